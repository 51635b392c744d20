"""The read service with pull reposters merged at read, against the model and the reference
(docs/reposts-and-replies.md, hybrid fan-out).

Random histories run through ``Materializer(pull_reposters=True)`` at thresholds of 1-3 readers, so
reposters cross between push and pull; its tables (and the readers' pull reposters and hidden sets)
are loaded into a :class:`MemoryStore`. Home pages read page by page at small sizes, and a watch's
catch-up from the start, must equal the model's ``TimelineView.entries`` and the batch reference;
then batch by batch as view changes, through the read cache and a pushed watch.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feed_service.api import timeline_pb2 as pb
from feed_service.core.reference import reference_entries, reference_tables
from feed_service.core.rows import Entry
from feed_service.core.view import Materializer, TimelineView
from feed_service.core.view_changes import (
    AuthorChange,
    ExtrasChange,
    HiddenChange,
    PullFollowChange,
    PullReposterChange,
    TimelineChange,
    UserRepostChange,
    VisibleChange,
)
from feed_service.kafka.view_change_consumer import Consumed
from feed_service.server.pull_sources import PullSources
from feed_service.server.metrics import ServerMetrics
from feed_service.server.read_cache import ReadCache
from feed_service.server.service import TimelineServicer
from feed_service.server.testing import TEST_SECRET
from feed_service.server.timeline_reads import TimelineReads
from feed_service.server.watch_hub import WatchHub
from feed_service.store.memory import MemoryStore

from .test_server_reposts_replies import (
    BUDGET,
    CAP,
    USERS,
    LiveFeed,
    StubContext,
    _snapshot,
    batches_of,
    changes_between,
    client_view,
    expected_shown,
    home_pages,
    interleaved,
    load,
    shown,
)


#: The stream's stages in the order each writes its tables, then publishes its changes
#: (docs/streaming.md): the author keys, the reposter step, the reader step. A consumer may act on
#: one stage's changes while the next stage's tables are still the previous batch's.
STAGES = (
    (("timelines", "author_timelines", "follows_pull", "tweets", "profile_rows"),
     (TimelineChange, AuthorChange, PullFollowChange)),
    (("user_reposts", "reposters_pull"), (UserRepostChange, PullReposterChange)),
    (("extras", "visible", "hidden"), (ExtrasChange, VisibleChange, HiddenChange)),
)


def load_all(view: TimelineView, store: MemoryStore) -> None:
    """``load`` and the tables of the pull reposters: who merges whom in, and the hidden sets."""
    load(view, store)
    store.reposters_pull = {u: set(p) for u, p in view.pull_reposters.items()}
    store.hidden = {u: set(h) for u, h in view.hidden.items()}
    store.tweets = {tid: e for (_, tid), e in view.tweets.items() if e is not None}  # tweet ids are one tweet's


async def newer_all(reads: TimelineReads, store: MemoryStore, user: str, size: int) -> list[Entry]:
    """A watch's catch-up from the start, ``size`` entries at a time, oldest first."""
    out: list[Entry] = []
    after = None
    while True:
        rows = await reads.home_newer(store, user, after, size, BUDGET)
        out += rows
        if len(rows) < size:
            return out
        after = rows[-1].cursor


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(rnd=st.randoms(use_true_random=False), pull_threshold=st.sampled_from([1, 2, 3]), size=st.integers(1, 3))
def test_home_pages_and_catch_up_with_pull_reposters_equal_the_model_and_the_reference(
        rnd: random.Random, pull_threshold: int, size: int) -> None:
    history, batches = batches_of(rnd, rnd.randint(0, 90))
    engine = Materializer(inbox_cap=CAP, pull_threshold=pull_threshold, pull_reposters=True)
    for batch in batches:
        engine.process_batch(batch)
    store = MemoryStore()
    load_all(engine.view, store)
    reads = TimelineReads(PullSources(ttl_s=0.0, head=201))
    reference = reference_entries(reference_tables(history), inbox_cap=CAP)

    async def check() -> None:
        for user in USERS:
            expected = engine.view.entries(user)
            assert expected == reference.get(user, [])
            assert await home_pages(reads, store, user, size) == expected
            assert await newer_all(reads, store, user, size) == expected[::-1]

    asyncio.run(check())


def test_a_pull_reposters_earlier_repost_hides_the_pushed_entry_and_is_read_past_when_hidden() -> None:
    """ann sees pat (a pull reposter) and zoe (a push reposter); pat's 6 newest reposts are of tweets
    direct for ann or reposted earlier by zoe, so a page reads past them."""
    store = MemoryStore()
    store.reposters_pull["ann"] = {"pat"}
    store.visible["ann"] = {"pat", "zoe", "bob"}
    for n in range(8):  # pat reposts cat's c0..c7 at 100+n; bob's tweets are direct for ann
        author = "bob" if n >= 5 else "cat"
        store.user_reposts.setdefault("pat", {})[(100 + n, f"c{n}")] = Entry(
            f"c{n}", author, n, 1, "t", 1, None, None, "pat", 100 + n, 1)
    # zoe reposted c4 at 50 (earlier than pat's 104): ann's pushed entry of c4
    store.extras["ann"] = {(50, "c4"): Entry("c4", "cat", 4, 1, "t", 1, None, None, "zoe", 50, 1),
                           # zoe reposted c0 at 150, after pat's 100: pat's row shows, this one does not
                           (150, "c0"): Entry("c0", "cat", 0, 1, "t", 1, None, None, "zoe", 150, 1)}
    reads = TimelineReads(PullSources(ttl_s=0.0, head=201))
    page = asyncio.run(home_pages(reads, store, "ann", 2))
    assert [(e.tweet_id, e.at, e.reposted_by) for e in page] == [
        ("c3", 103, "pat"), ("c2", 102, "pat"), ("c1", 101, "pat"), ("c0", 100, "pat"), ("c4", 50, "zoe")]
    store.hidden["ann"] = {"cat"}  # ann mutes cat: no repost of cat's tweets shows, pushed or pulled
    store.extras["ann"] = {}
    assert asyncio.run(home_pages(reads, store, "ann", 2)) == []


def _changes(engine: Materializer, before: dict, old_reposters: dict, old_hidden: dict, ts: int) -> list:
    """The batch's view changes, the pull reposters' and hidden sets' included."""
    changes = changes_between(before, _snapshot(engine.view), ts=ts)
    for u in sorted(old_reposters.keys() | engine.view.pull_reposters.keys()):
        old, new = old_reposters.get(u, set()), engine.view.pull_reposters.get(u, set())
        changes += [PullReposterChange("delete", u, p, ts, None) for p in sorted(old - new)]
        changes += [PullReposterChange("insert", u, p, ts, None) for p in sorted(new - old)]
    for u in sorted(old_hidden.keys() | engine.view.hidden.keys()):
        old, new = old_hidden.get(u, set()), engine.view.hidden.get(u, set())
        changes += [HiddenChange("delete", u, x, ts, None) for x in sorted(old - new)]
        changes += [HiddenChange("insert", u, x, ts, None) for x in sorted(new - old)]
    return changes


@pytest.mark.parametrize("seed", range(60))
def test_the_read_cache_and_a_pushed_watch_follow_pull_reposters_batch_by_batch(seed: int) -> None:
    """Watches open before the first batch, or (odd seeds) in the middle of the history with the
    client's first state read page by page after subscribing, as a client does: rows the watch
    never heard of must still change and leave. Each batch is written and published stage by stage
    as the stream does, so a watch may act on one stage's changes while the next stage's tables
    (the visible sets, the extras) are still the previous batch's."""
    rnd = random.Random(seed)
    _, batches = batches_of(rnd, 120)
    pull_threshold = rnd.choice([1, 2, 3])
    start_at = 0 if seed % 2 == 0 else len(batches) // 2

    async def run() -> None:
        engine = Materializer(inbox_cap=CAP, pull_threshold=pull_threshold, pull_reposters=True)
        store = MemoryStore()
        feed = LiveFeed()
        cache = ReadCache(feed, depth=rnd.choice([2, 3, 41]))  # type: ignore[arg-type]
        servicer = TimelineServicer(store=lambda: store, secret=TEST_SECRET, metrics=ServerMetrics())
        hub = WatchHub()
        servicer.attach_changes(feed, cache, hub)  # type: ignore[arg-type]
        reads = servicer.reads
        clients: dict[str, dict] = {u: {} for u in USERS}
        received: dict[str, list] = {u: [] for u in USERS}

        async def consume(user: str) -> None:
            from feed_service.server.registration import serialize

            async for message in servicer.watch.stream(store, user, "", StubContext()):
                received[user].append(serialize(message))

        async def open_watches() -> list:
            tasks = [asyncio.ensure_future(consume(u)) for u in USERS]
            for _ in range(50):
                await asyncio.sleep(0)
            assert len(hub) == len(USERS)
            for u in USERS:  # the client's first state: its pages, read after subscribing
                for e in await home_pages(reads, store, u, 3):
                    clients[u].setdefault(e.tweet_id, pb.TimelineEntry(
                        tweet_id=e.tweet_id, author_id=e.author_id, created_at_ms=e.created_at, version=e.version,
                        text=e.text, reposted_by=e.reposted_by or "", reposted_at_ms=e.reposted_at or 0,
                        in_reply_to_tweet_id=e.in_reply_to_tweet_id or "",
                        in_reply_to_author_id=e.in_reply_to_author_id or ""))
            return tasks

        watches: list = []
        offset = 0
        for i, batch in enumerate(batches):
            if i == start_at:
                watches = await open_watches()
            before = _snapshot(engine.view)
            old_reposters = {u: set(p) for u, p in engine.view.pull_reposters.items()}
            old_hidden = {u: set(h) for u, h in engine.view.hidden.items()}
            engine.process_batch(batch)
            changes = _changes(engine, before, old_reposters, old_hidden, i + 1)
            written = MemoryStore()
            load_all(engine.view, written)
            for tables, kinds in STAGES:  # each stage writes its tables, then publishes
                for table in tables:
                    setattr(store, table, getattr(written, table))
                staged = [c for c in changes if isinstance(c, kinds)]
                consumed = [Consumed(0, offset + k, c) for k, c in enumerate(interleaved(rnd, staged))]
                offset += len(consumed)
                feed.position = {0: offset}
                cache.apply(consumed)
                hub.route(consumed)
                for _ in range(rnd.choice([0, 80])):  # delivered now, or with the next stage's
                    await asyncio.sleep(0)
            for _ in range(80):
                await asyncio.sleep(0)
            for user in USERS:
                expected = engine.view.entries(user)
                size = rnd.randint(1, 3)
                for _ in range(2):  # the second read of a user fills its head; later ones hit it
                    assert await home_pages(reads, store, user, size) == expected, (i, user)
                cached = reads.cached_home_page(user, None, size + 1)
                if cached is not None:
                    assert cached[0] == expected[:size + 1]
                client_view(received[user], clients[user])
                received[user].clear()
                if watches:
                    assert sorted(shown(e) for e in clients[user].values()) == sorted(
                        expected_shown(e) for e in expected), (i, user)
        assert cache.hits > 0
        for w in watches:
            w.cancel()

    asyncio.run(run())
