"""The read service on reposts and replies, against the in-memory model (docs/reposts-and-replies.md).

Random histories with reposts and replies run through the pure core's
:class:`~feed_service.core.view.Materializer`; its tables (inbox, ``home_extras``, author timelines,
pull follows, a user's reposts, the visible sets) are loaded into a :class:`MemoryStore`, and the
service's reads must give, page by page at small page sizes, what the model's
``TimelineView.entries`` (and the batch reference) give: the home timeline merging inbox, extras and
pull authors with a pull author's replies filtered by the reader's visible set, the user timeline
merging a user's tweets and reposts. Then the same histories batch by batch as view changes: the
read cache (filled, hit, kept by the changes) and a pushed watch (a client applying its messages)
must follow the model after every batch. And the entry fields over gRPC.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feed_service.api import timeline_pb2 as pb
from feed_service.core.reference import reference_entries, reference_tables, reference_user_timelines
from feed_service.core.rows import Entry, ProfileRow
from feed_service.core.view import Materializer
from feed_service.server.pull_sources import PullSources
from feed_service.server.read_cache import ReadCache
from feed_service.server.testing import ServerThread
from feed_service.server.timeline_reads import TimelineReads
from feed_service.server.watch_hub import WatchHub
from feed_service.store.memory import MemoryStore
from tests.support.model import (
    BUDGET,
    CAP,
    USERS,
    WatchedService,
    batches_of,
    changes_between,
    home_pages,
    interleaved,
    load,
    seeds,
    snapshot,
    user_pages,
)
from tests.support.loopback import loopback_config
from tests.support.page_races import DeliveringStore, PendingFeed
from tests.support.sizes import examples

SETTINGS = settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(rnd=st.randoms(use_true_random=False), pull_threshold=st.sampled_from([1, 2, 1000]),
       size=st.integers(1, 3), ttl=st.sampled_from([0.0, 30.0]))
def test_home_and_user_pages_equal_the_model_and_the_reference(rnd: random.Random, pull_threshold: int, size: int,
                                                              ttl: float) -> None:
    history, batches = batches_of(rnd, rnd.randint(0, 80))
    engine = Materializer(inbox_cap=CAP, pull_threshold=pull_threshold)
    for batch in batches:
        engine.process_batch(batch)
    store = MemoryStore()
    load(engine.view, store)
    reads = TimelineReads(PullSources(ttl_s=ttl, head=201))
    tables = reference_tables(history)
    reference = reference_entries(tables, inbox_cap=CAP)
    own = reference_user_timelines(tables, inbox_cap=CAP)

    async def check() -> None:
        for user in USERS:
            assert await home_pages(reads, store, user, size) == engine.view.entries(user) == reference.get(user, [])
            assert await user_pages(reads, store, user, size) == engine.view.author_entries(user) == own.get(user, [])

    asyncio.run(check())


def test_a_pull_authors_hidden_replies_are_read_past() -> None:
    """Replies to a user the reader does not see leave a pull author's slice short: the read goes
    on below them (in growing slices) and asks the visible set once per round."""
    store = MemoryStore()
    store.add_pull_follow("ann", "star")
    for n in range(30):  # star's newest 25 reply to dan, whom ann does not see; 5 older plain tweets
        reply = ("x", "dan") if n >= 5 else (None, None)
        store.add_author_entry(Entry(f"s{n:02d}", "star", 100 + n, 1, "t", 1, *reply))
    store.add_author_entry(Entry("s99", "star", 500, 1, "t", 1, "x", "ann"))  # a reply to the reader: shown
    store.add_author_entry(Entry("s98", "star", 400, 1, "t", 1, "x", "star"))  # a thread: shown
    store.add_entry("ann", Entry("b1", "bob", 50, 1, "t", 1))
    reads = TimelineReads(PullSources(ttl_s=0.0, head=201))

    async def check() -> tuple[list[str], list[str]]:
        first = await reads.home_page(store, "ann", None, 4, BUDGET)
        every = await home_pages(reads, store, "ann", 3)
        return [e.tweet_id for e in first], [e.tweet_id for e in every]

    first, every = asyncio.run(check())
    assert first == ["s99", "s98", "s04", "s03"]
    assert every == ["s99", "s98", "s04", "s03", "s02", "s01", "s00", "b1"]
    store.visible["ann"] = {"dan"}
    assert [e.tweet_id for e in asyncio.run(reads.home_page(store, "ann", None, 4, BUDGET))] == [
        "s99", "s98", "s29", "s28"]


# --- as view changes: the read cache and a pushed watch follow the model ----------------------------


@pytest.mark.parametrize("seed", seeds())
def test_the_read_cache_and_a_pushed_watch_follow_the_model_batch_by_batch(seed: int) -> None:
    rnd = random.Random(seed)
    _, batches = batches_of(rnd, 120)
    pull_threshold = rnd.choice([1, 2, 1000])

    async def run() -> None:
        engine = Materializer(inbox_cap=CAP, pull_threshold=pull_threshold)
        service = WatchedService(rnd)
        await service.open_watches(first_state=False)
        for i, batch in enumerate(batches):
            before = snapshot(engine.view)
            engine.process_batch(batch)
            load(engine.view, service.store)  # the stream writes, then publishes
            service.publish(changes_between(before, snapshot(engine.view), ts=i + 1))
            for _ in range(60):
                await asyncio.sleep(0)
            for user in USERS:
                size, _ = await service.check(user, engine.view.entries(user), (i, user))
                assert await user_pages(service.reads, service.store, user, size) == engine.view.author_entries(user)
        assert service.cache.hits > 0
        service.close()

    asyncio.run(run())


def test_entries_carry_their_reposter_and_parent_over_grpc() -> None:
    store = MemoryStore()
    store.add_entry("ann", Entry("b1", "bob", 10, 1, "plain", 1))
    store.extras["ann"] = {(50, "c1"): Entry("c1", "cat", 5, 2, "reposted", 1, None, None, "pat", 50, 3),
                           (30, "d1"): Entry("d1", "dan", 30, 1, "a reply", 1, "e0", "eve")}
    store.user_reposts["pat"] = {(50, "c1"): Entry("c1", "cat", 5, 2, "reposted", 1, None, None, "pat", 50, 3)}
    store.add_author_entry(Entry("p1", "pat", 40, 1, "own", 3))
    for row in (ProfileRow("pat", 3, "Pat", None, None), ProfileRow("cat", 1, "Cat", None, None)):
        store.add_profile(row)
    with ServerThread(loopback_config(), store=store) as server:
        stub = server.stub()
        home = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"), timeout=5)
        own = stub.GetUserTimeline(pb.GetUserTimelineRequest(user_id="pat"), metadata=server.auth("ann"), timeout=5)
    assert [e.tweet_id for e in home.entries] == ["c1", "d1", "b1"]
    repost, reply, plain = home.entries
    assert (repost.reposted_by, repost.reposted_by_display_name, repost.reposted_at_ms, repost.created_at_ms,
            repost.author_display_name) == ("pat", "Pat", 50, 5, "Cat")
    assert (reply.in_reply_to_tweet_id, reply.in_reply_to_author_id, reply.reposted_by) == ("e0", "eve", "")
    assert plain.reposted_by == "" and plain.in_reply_to_author_id == ""
    assert [(e.tweet_id, e.reposted_by) for e in own.entries] == [("c1", "pat"), ("p1", "")]


@pytest.mark.parametrize("seed", range(4))
def test_cached_and_encoded_pages_over_grpc_equal_the_uncached_ones_batch_by_batch(seed: int) -> None:
    """A server with the read cache (changes delivered at random, some while a page is hydrated)
    and one without it answer every page the same, once the changes are applied."""
    rnd = random.Random(seed)
    _, batches = batches_of(rnd, 150)
    engine = Materializer(inbox_cap=CAP, pull_threshold=rnd.choice([1, 2]))
    store = DeliveringStore()
    feed = PendingFeed()
    store.feed = feed
    for user in USERS:  # every profile version a history names: display names never race here
        for version in (0, 1):
            store.add_profile(ProfileRow(user, version, f"{user} v{version}", None, None))

    def read_all(server: ServerThread, user: str, size: int) -> list[pb.GetHomeTimelineResponse]:
        stub, out, token = server.stub(), [], ""
        while True:
            page = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=user, page_size=size, page_token=token),
                                        metadata=server.auth(user), timeout=5)
            out.append(page)
            token = page.next_page_token
            if not token:
                return out

    async def deliver() -> None:
        feed.deliver()

    with ServerThread(loopback_config(), store=store) as cached, ServerThread(loopback_config(), store=store) as plain:
        async def attach() -> ReadCache:
            cache = ReadCache(feed, depth=rnd.choice([3, 9]))
            feed.cache = cache
            cached.server.servicer.attach_changes(feed, cache, WatchHub())
            return cache

        cache = cached.run(attach())
        served = {"memo": 0}
        page_memo = cache.page_memo

        def counting(user_id, key):
            found = page_memo(user_id, key)
            served["memo"] += found is not None
            return found

        cache.page_memo = counting  # type: ignore[method-assign]
        compared = 0
        for i, batch in enumerate(batches):
            before = snapshot(engine.view)
            engine.process_batch(batch)
            profiles = dict(store.profile_rows)
            load(engine.view, store)
            store.profile_rows = profiles
            for change in interleaved(rnd, changes_between(before, snapshot(engine.view), ts=i + 1)):
                feed.publish(change)
            if rnd.random() < 0.5:
                store.armed = True  # deliver them while the next page is hydrated
            for user in rnd.sample(USERS, 2):
                size = rnd.choice((1, 2, 3))
                read_all(cached, user, size)  # races the pending changes: either side may show
                store.armed = store.fired = False
                cached.run(deliver())
                for _ in range(2):  # filled, then hit (and kept encoded), then served encoded
                    assert read_all(cached, user, size) == read_all(plain, user, size), (i, user)
                assert [e.tweet_id for p in read_all(plain, user, size) for e in p.entries] == [
                    e.tweet_id for e in engine.view.entries(user)]
                compared += 1
        assert compared > 0 and served["memo"] > 0
