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
from typing import Any, Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feed_service.api import timeline_pb2 as pb
from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    RepostChange,
    TweetDelete,
    TweetUpsert,
)
from feed_service.core.reference import reference_entries, reference_tables, reference_user_timelines
from feed_service.core.rows import Cursor, Entry, ProfileRow
from feed_service.core.view import Materializer, TimelineView
from feed_service.core.view_changes import (
    AuthorChange,
    ExtrasChange,
    PullFollowChange,
    TimelineChange,
    UserRepostChange,
    VisibleChange,
    message_key,
)
from feed_service.kafka.view_change_consumer import Consumed
from feed_service.server.metrics import ServerMetrics
from feed_service.server.pull_sources import PullSources
from feed_service.server.read_cache import ReadCache
from feed_service.server.service import TimelineServicer
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.server.timeline_reads import TimelineReads
from feed_service.server.watch_hub import WatchHub
from feed_service.store.memory import MemoryStore

from .test_server_hybrid import config

USERS = ["u0", "u1", "u2", "u3", "u4"]
AUTHORS = USERS[:4]
TWEETS = ["a", "b", "c"]
CAP = 100
BUDGET = 10.0


def tweet_id(author: str, t: str) -> str:
    return f"{author}.{t}"  # tweet ids are unique across authors, as the real ones are


def random_event(rnd: random.Random) -> Event:
    kind = rnd.choice(["upsert"] * 5 + ["repost"] * 3 + ["follow"] * 5 + ["delete", "block", "mute", "profile"])
    version = rnd.randint(0, 2)
    if kind == "upsert":
        author, t = rnd.choice(AUTHORS), rnd.choice(TWEETS)
        created = rnd.randint(0, 20)
        parent: tuple[str | None, str | None] = (None, None)
        if rnd.random() < 0.5:  # a reply: to its own author, a reader, or a third user
            parent = (tweet_id(rnd.choice(USERS), "a"), rnd.choice(USERS))
        return TweetUpsert(tweet_id(author, t), author, version, created, rnd.choice(["x", "y"]),
                           rnd.randint(0, 1), *parent)
    if kind == "repost":
        author = rnd.choice(AUTHORS)
        tid = tweet_id(author, rnd.choice(TWEETS))
        if rnd.random() < 0.1:
            author = rnd.choice(AUTHORS)  # names the wrong author now and then: joins nothing
        reposter = rnd.choice(USERS)
        if rnd.random() < 0.75:
            return RepostChange(reposter, tid, author, version, "repost", rnd.randint(0, 30), rnd.randint(0, 1))
        return RepostChange(reposter, tid, author, version, "unrepost")
    if kind == "delete":
        author = rnd.choice(AUTHORS)
        return TweetDelete(tweet_id(author, rnd.choice(TWEETS)), author, version)
    if kind == "follow":
        follower, followee = rnd.sample(USERS, 2)
        return FollowChange(follower, followee, version, rnd.choice(["follow", "follow", "follow", "unfollow"]))
    if kind == "block":
        blocker, blocked = rnd.sample(USERS, 2)
        return BlockChange(blocker, blocked, version, rnd.choice(["block", "unblock", "unblock"]))
    if kind == "mute":
        muter, muted = rnd.sample(USERS, 2)
        return MuteChange(muter, muted, version, rnd.choice(["mute", "unmute", "unmute"]))
    return ProfileVersion(rnd.choice(USERS), rnd.randint(0, 1), rnd.choice(["A", "B"]))


def batches_of(rnd: random.Random, n: int) -> tuple[list[Event], list[list[Event]]]:
    history = [random_event(rnd) for _ in range(n)]
    batches, i = [], 0
    while i < len(history):
        k = rnd.randint(1, 12)
        batches.append(history[i:i + k])
        i += k
    return history, batches


def load(view: TimelineView, store: MemoryStore) -> None:
    """The view's tables as the store's rows (what the stream writes to Cassandra)."""
    def by_cursor(rows: dict) -> dict[Cursor, Entry]:
        return {e.cursor: e for e in rows.values()}

    store.timelines = {u: by_cursor(rows) for u, rows in view.timelines.items() if rows}
    store.author_timelines = {a: by_cursor(rows) for a, rows in view.author_timelines.items() if rows}
    store.follows_pull = {u: set(a) for u, a in view.pull_follows.items()}
    store.extras = {u: by_cursor(rows) for u, rows in view.extras.items()}
    store.user_reposts = {u: by_cursor(rows) for u, rows in view.own_reposts.items()}
    store.visible = {u: set(s) for u, s in view.visible.items()}
    for (user, version), p in view.profiles.items():
        store.add_profile(ProfileRow(user, version, p.display_name, p.avatar_url, p.bio))


async def home_pages(reads: TimelineReads, store: MemoryStore, user: str, size: int) -> list[Entry]:
    """Every page of ``user``'s home timeline as the service pages it (a row beyond the page says a
    next page exists; the cursor is the last entry served; the cap bounds the whole sequence)."""
    out: list[Entry] = []
    before = None
    while True:
        limit = min(size, CAP - len(out))
        rows = await reads.home_page(store, user, before, limit + 1, BUDGET)
        out += rows[:limit]
        if len(rows) <= limit or len(out) >= CAP:
            return out
        before = rows[limit - 1].cursor


async def user_pages(reads: TimelineReads, store: MemoryStore, user: str, size: int) -> list[Entry]:
    out: list[Entry] = []
    before = None
    while True:
        rows = await reads.user_page(store, user, before, size + 1, BUDGET)
        out += rows[:size]
        if len(rows) <= size:
            return out
        before = rows[size - 1].cursor


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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


def _rows_diff(before: dict, after: dict) -> Iterable[tuple[str, Entry]]:
    """The row changes from ``before`` to ``after`` (rows by position): deletes first, as the steps emit."""
    for key, entry in before.items():
        if key not in after:
            yield "delete", entry
    for key, entry in after.items():
        old = before.get(key)
        if old is None:
            yield "insert", entry
        elif old != entry:
            yield "update", entry


def _snapshot(view: TimelineView) -> dict[str, Any]:
    return {
        "timelines": {u: dict(r) for u, r in view.timelines.items()},
        "authors": {u: dict(r) for u, r in view.author_timelines.items()},
        "pull": {u: set(a) for u, a in view.pull_follows.items()},
        "extras": {u: dict(r) for u, r in view.extras.items()},
        "reposts": {u: dict(r) for u, r in view.own_reposts.items()},
        "visible": {u: set(s) for u, s in view.visible.items()},
    }


def changes_between(before: dict[str, Any], after: dict[str, Any], ts: int) -> list[Any]:
    """The view changes one batch published: one per row changed, at the batch's write time."""
    out: list[Any] = []
    for u in sorted(before["timelines"].keys() | after["timelines"].keys()):
        for op, e in _rows_diff(before["timelines"].get(u, {}), after["timelines"].get(u, {})):
            out.append(TimelineChange(op, e, (u,), ts, None))
    for a in sorted(before["authors"].keys() | after["authors"].keys()):
        for op, e in _rows_diff(before["authors"].get(a, {}), after["authors"].get(a, {})):
            out.append(AuthorChange(op, e, ts, None))
    for u in sorted(before["pull"].keys() | after["pull"].keys()):
        old, new = before["pull"].get(u, set()), after["pull"].get(u, set())
        out += [PullFollowChange("delete", a, (u,), ts, None) for a in sorted(old - new)]
        out += [PullFollowChange("insert", a, (u,), ts, None) for a in sorted(new - old)]
    for u in sorted(before["extras"].keys() | after["extras"].keys()):
        for op, e in _rows_diff(before["extras"].get(u, {}), after["extras"].get(u, {})):
            out.append(ExtrasChange(op, e, u, ts, None))
    for u in sorted(before["reposts"].keys() | after["reposts"].keys()):
        for op, e in _rows_diff(before["reposts"].get(u, {}), after["reposts"].get(u, {})):
            out.append(UserRepostChange(op, e, ts, None))
    for u in sorted(before["visible"].keys() | after["visible"].keys()):
        old, new = before["visible"].get(u, set()), after["visible"].get(u, set())
        out += [VisibleChange("delete", u, x, ts, None) for x in sorted(old - new)]
        out += [VisibleChange("insert", u, x, ts, None) for x in sorted(new - old)]
    return out


def interleaved(rnd: random.Random, changes: list[Any]) -> list[Any]:
    """The changes as consumers may receive them: in order per message key (one partition each),
    keys interleaved at random, some published twice (a replayed batch)."""
    by_key: dict[str, list[Any]] = {}
    for c in changes:
        by_key.setdefault(message_key(c), []).append(c)
    queues = list(by_key.values())
    out: list[Any] = []
    while queues:
        q = rnd.choice(queues)
        out.append(q.pop(0))
        if not q:
            queues.remove(q)
    if out and rnd.random() < 0.3:
        out += out[:rnd.randint(1, len(out))]
    return out


class LiveFeed:
    """The change topic as the cache sees it: live, every change applied as it is published (a fill's
    read then never races an unapplied change)."""

    live = True

    def __init__(self) -> None:
        self.position = {0: 0}

    async def high_watermarks_after(self, moment: float) -> dict[int, int]:
        return dict(self.position)

    async def wait_reached(self, target: dict[int, int], timeout: float) -> bool:
        return True


def client_view(messages: list[bytes], state: dict[str, pb.TimelineEntry]) -> None:
    """A watch client: upsert ``entries`` and ``changed`` by tweet id, remove ``removed_tweet_ids``."""
    for raw in messages:
        m = pb.WatchHomeTimelineResponse.FromString(raw)
        for e in (*m.entries, *m.changed):
            state[e.tweet_id] = e
        for tid in m.removed_tweet_ids:
            state.pop(tid, None)


def shown(e: pb.TimelineEntry) -> tuple:
    return (e.tweet_id, e.author_id, e.created_at_ms, e.version, e.text, e.reposted_by, e.reposted_at_ms,
            e.in_reply_to_tweet_id, e.in_reply_to_author_id)


def expected_shown(e: Entry) -> tuple:
    return (e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.reposted_by or "", e.reposted_at or 0,
            e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or "")


class StubContext:
    def time_remaining(self) -> None:
        return None

    async def send_initial_metadata(self, metadata) -> None:  # a stream's start token (docs/api.md#watch)
        self.initial_metadata = metadata


@pytest.mark.parametrize("seed", range(40))
def test_the_read_cache_and_a_pushed_watch_follow_the_model_batch_by_batch(seed: int) -> None:
    rnd = random.Random(seed)
    _, batches = batches_of(rnd, 120)
    pull_threshold = rnd.choice([1, 2, 1000])

    async def run() -> None:
        engine = Materializer(inbox_cap=CAP, pull_threshold=pull_threshold)
        store = MemoryStore()
        feed = LiveFeed()
        cache = ReadCache(feed, depth=rnd.choice([2, 3, 41]))
        servicer = TimelineServicer(store=lambda: store, secret=TEST_SECRET, metrics=ServerMetrics())
        hub = WatchHub()
        servicer.attach_changes(feed, cache, hub)  # type: ignore[arg-type]
        reads = servicer.reads
        clients = {u: {} for u in USERS}
        received = {u: [] for u in USERS}

        async def consume(user: str) -> None:
            from feed_service.server.registration import serialize

            async for message in servicer.watch.stream(store, user, "", StubContext()):
                received[user].append(serialize(message))

        watches = [asyncio.ensure_future(consume(u)) for u in USERS]
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(hub) == len(USERS)
        offset = 0
        for i, batch in enumerate(batches):
            before = _snapshot(engine.view)
            engine.process_batch(batch)
            load(engine.view, store)  # the stream writes, then publishes
            published = interleaved(rnd, changes_between(before, _snapshot(engine.view), ts=i + 1))
            consumed = [Consumed(0, offset + k, c) for k, c in enumerate(published)]
            offset += len(consumed)
            feed.position = {0: offset}
            cache.apply(consumed)
            hub.route(consumed)
            for _ in range(60):
                await asyncio.sleep(0)
            for user in USERS:
                expected = engine.view.entries(user)
                size = rnd.randint(1, 3)
                for _ in range(2):  # the second read of a user fills its head; later ones hit it
                    assert await home_pages(reads, store, user, size) == expected, (i, user)
                cached = reads.cached_home_page(user, None, size + 1)
                if cached is not None:
                    assert cached[0] == expected[:size + 1]
                assert await user_pages(reads, store, user, size) == engine.view.author_entries(user)
                client_view(received[user], clients[user])
                received[user].clear()
                assert sorted(shown(e) for e in clients[user].values()) == sorted(
                    expected_shown(e) for e in expected), (i, user)
        assert cache.hits > 0
        for w in watches:
            w.cancel()

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
    with ServerThread(config(), store=store) as server:
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
    from . import test_read_cache_pages as pages_test

    rnd = random.Random(seed)
    _, batches = batches_of(rnd, 150)
    engine = Materializer(inbox_cap=CAP, pull_threshold=rnd.choice([1, 2]))
    store = pages_test.DeliveringStore()
    feed = pages_test.ScriptedFeed()
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

    with ServerThread(config(), store=store) as cached, ServerThread(config(), store=store) as plain:
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
            before = _snapshot(engine.view)
            engine.process_batch(batch)
            profiles = dict(store.profile_rows)
            load(engine.view, store)
            store.profile_rows = profiles
            for change in interleaved(rnd, changes_between(before, _snapshot(engine.view), ts=i + 1)):
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
