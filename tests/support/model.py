"""The unit-level model harness of the read path: random histories through the pure core's
:class:`~feed_service.core.view.Materializer`, their tables loaded into a :class:`MemoryStore` as the
stream writes them, their view changes published as the stream publishes them, and a client that
applies a watch's messages. The batch-by-batch tests of reads, the read cache and Watch
(tests/unit/test_server_reposts_replies.py, test_server_pull_reposters.py, test_dropped_inbox_reads.py)
and the read cache's race tests (test_read_cache.py, test_read_cache_per_reader.py) share it.

One module over 450 lines on purpose: its parts (histories, loads, published changes, the watched
service, the client) are one harness, every part used by each batch-by-batch test.

:func:`seeds` is the seed count of the batch-by-batch tests: ``FEED_TEST_SEEDS`` (default
:data:`DEFAULT_SEEDS`, what CI runs); a run outside CI sets it higher (docs/operations.md#longer-test-runs).
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any, Iterable

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
from feed_service.core.rows import Cursor, Entry, ProfileRow
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
    message_key,
)
from feed_service.kafka.view_change_consumer import Consumed
from feed_service.server.metrics import ServerMetrics
from feed_service.server.read_cache import ReadCache
from feed_service.server.registration import serialize
from feed_service.server.service import TimelineServicer
from feed_service.server.testing import TEST_SECRET
from feed_service.server.timeline_reads import TimelineReads
from feed_service.server.watch_hub import WatchHub
from feed_service.store.memory import MemoryStore
from .sizes import examples

#: Seeds per batch-by-batch test when ``FEED_TEST_SEEDS`` is not set (CI).
DEFAULT_SEEDS = 60


def seeds(at_least: int = 0) -> range:
    """The seeds of a batch-by-batch test: ``FEED_TEST_SEEDS`` of them (default :data:`DEFAULT_SEEDS`
    times ``FEED_TEST_SCALE``: :mod:`tests.support.sizes`), never fewer than ``at_least`` (a test that
    ran more before keeps them)."""
    raw = os.environ.get("FEED_TEST_SEEDS", "")
    try:
        count = int(raw) if raw else examples(DEFAULT_SEEDS)
    except ValueError:
        raise ValueError(f"FEED_TEST_SEEDS must be a whole number of seeds, not {raw!r}") from None
    return range(max(count, at_least))


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


# --- the model's tables as the store's rows ---------------------------------------------------------


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


def load_all(view: TimelineView, store: MemoryStore) -> None:
    """:func:`load` and the tables of the pull reposters: who merges whom in, and the hidden sets."""
    load(view, store)
    store.reposters_pull = {u: set(p) for u, p in view.pull_reposters.items()}
    store.hidden = {u: set(h) for u, h in view.hidden.items()}
    store.tweets = {tid: e for (_, tid), e in view.tweets.items() if e is not None}  # tweet ids are one tweet's


def drop(store: MemoryStore, users: set[str], rnd: random.Random) -> None:
    """Drop ``users``' inboxes as the driver does: the flag set, the rows deleted but for a random
    few left behind, and now and then a stale row of a tweet the view no longer holds."""
    for u in users:
        store.dropped.add(u)
        rows = store.timelines.pop(u, {})
        stale = {c: e for c, e in rows.items() if rnd.random() < 0.3}
        if rnd.random() < 0.3:
            ghost = Entry(f"ghost-{u}", "u0", 19, 9, "stale", 1)
            stale[ghost.cursor] = ghost
        if stale:
            store.timelines[u] = stale


def written_with_stale(engine: Materializer, dropped: dict[str, dict[Cursor, Entry]]) -> MemoryStore:
    """The store as the stream leaves it after a batch: a dropped reader's inbox holds only the
    stale rows it held when dropped."""
    written = MemoryStore()
    load_all(engine.view, written)
    for u, stale in dropped.items():
        written.timelines.pop(u, None)
        if stale:
            written.timelines[u] = dict(stale)
    return written


# --- reads as a client pages them --------------------------------------------------------------------


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


# --- view changes as the stream publishes them -------------------------------------------------------


#: The stream's stages in the order each writes its tables, then publishes its changes
#: (docs/streaming.md): the author keys, the reposter step, the reader step. A consumer may act on
#: one stage's changes while the next stage's tables are still the previous batch's.
STAGES = (
    (("timelines", "author_timelines", "follows_pull", "tweets", "profile_rows"),
     (TimelineChange, AuthorChange, PullFollowChange)),
    (("user_reposts", "reposters_pull"), (UserRepostChange, PullReposterChange)),
    (("extras", "visible", "hidden"), (ExtrasChange, VisibleChange, HiddenChange)),
)


def rows_diff(before: dict, after: dict) -> Iterable[tuple[str, Entry]]:
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


def snapshot(view: TimelineView) -> dict[str, Any]:
    """The view's tables that changes are published of, copied (what :func:`changes_between` compares)."""
    return {
        "timelines": {u: dict(r) for u, r in view.timelines.items()},
        "authors": {u: dict(r) for u, r in view.author_timelines.items()},
        "pull": {u: set(a) for u, a in view.pull_follows.items()},
        "extras": {u: dict(r) for u, r in view.extras.items()},
        "reposts": {u: dict(r) for u, r in view.own_reposts.items()},
        "visible": {u: set(s) for u, s in view.visible.items()},
        "reposters": {u: set(p) for u, p in view.pull_reposters.items()},
        "hidden": {u: set(h) for u, h in view.hidden.items()},
    }


def changes_between(before: dict[str, Any], after: dict[str, Any], ts: int, *,
                    reposters: bool = False) -> list[Any]:
    """The view changes one batch published: one per row changed, at the batch's write time;
    ``reposters``: the pull reposters' and hidden sets' changes too."""
    out: list[Any] = []
    for u in sorted(before["timelines"].keys() | after["timelines"].keys()):
        for op, e in rows_diff(before["timelines"].get(u, {}), after["timelines"].get(u, {})):
            out.append(TimelineChange(op, e, (u,), ts, None))
    for a in sorted(before["authors"].keys() | after["authors"].keys()):
        for op, e in rows_diff(before["authors"].get(a, {}), after["authors"].get(a, {})):
            out.append(AuthorChange(op, e, ts, None))
    for u in sorted(before["pull"].keys() | after["pull"].keys()):
        old, new = before["pull"].get(u, set()), after["pull"].get(u, set())
        out += [PullFollowChange("delete", a, (u,), ts, None) for a in sorted(old - new)]
        out += [PullFollowChange("insert", a, (u,), ts, None) for a in sorted(new - old)]
    for u in sorted(before["extras"].keys() | after["extras"].keys()):
        for op, e in rows_diff(before["extras"].get(u, {}), after["extras"].get(u, {})):
            out.append(ExtrasChange(op, e, u, ts, None))
    for u in sorted(before["reposts"].keys() | after["reposts"].keys()):
        for op, e in rows_diff(before["reposts"].get(u, {}), after["reposts"].get(u, {})):
            out.append(UserRepostChange(op, e, ts, None))
    for u in sorted(before["visible"].keys() | after["visible"].keys()):
        old, new = before["visible"].get(u, set()), after["visible"].get(u, set())
        out += [VisibleChange("delete", u, x, ts, None) for x in sorted(old - new)]
        out += [VisibleChange("insert", u, x, ts, None) for x in sorted(new - old)]
    if reposters:
        for u in sorted(before["reposters"].keys() | after["reposters"].keys()):
            old, new = before["reposters"].get(u, set()), after["reposters"].get(u, set())
            out += [PullReposterChange("delete", u, p, ts, None) for p in sorted(old - new)]
            out += [PullReposterChange("insert", u, p, ts, None) for p in sorted(new - old)]
        for u in sorted(before["hidden"].keys() | after["hidden"].keys()):
            old, new = before["hidden"].get(u, set()), after["hidden"].get(u, set())
            out += [HiddenChange("delete", u, x, ts, None) for x in sorted(old - new)]
            out += [HiddenChange("insert", u, x, ts, None) for x in sorted(new - old)]
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


class ScriptedFeed:
    """One partition; ``publish`` appends to the topic, ``deliver`` applies up to an offset (the read
    cache's race tests decide which changes were published before, during and after a fill)."""

    def __init__(self) -> None:
        self.live = True
        self.position = {0: 0}
        self.topic: list[object] = []
        self.cache: ReadCache | None = None
        self.highs_after_read: dict[int, int] | None = None

    def publish(self, change: object) -> int:
        self.topic.append(change)
        return len(self.topic) - 1

    def deliver(self, upto: int | None = None) -> None:
        upto = len(self.topic) if upto is None else upto
        batch = [Consumed(0, o, self.topic[o]) for o in range(self.position[0], upto)]
        self.position[0] = upto
        if batch:
            self.cache.apply(batch)

    async def high_watermarks_after(self, moment: float) -> dict[int, int]:
        return dict(self.highs_after_read) if self.highs_after_read is not None else {0: len(self.topic)}

    async def wait_reached(self, target: dict[int, int], timeout: float) -> bool:
        self.deliver(max(target[0], self.position[0]))
        return True


async def settle(cache: ReadCache) -> None:
    """Let the cache's pending fills settle."""
    for _ in range(5):
        await asyncio.sleep(0)
    if cache._tasks:
        await asyncio.gather(*cache._tasks)


# --- a watch's client --------------------------------------------------------------------------------


def client_view(messages: list[bytes], state: dict[str, pb.TimelineEntry]) -> None:
    """A watch client: upsert ``entries`` and ``changed`` by tweet id, remove ``removed_tweet_ids``."""
    for raw in messages:
        m = pb.WatchHomeTimelineResponse.FromString(raw)
        for e in (*m.entries, *m.changed):
            state[e.tweet_id] = e
        for tid in m.removed_tweet_ids:
            state.pop(tid, None)


def client_entry(e: Entry) -> pb.TimelineEntry:
    """An entry as a client holds it after reading it on a page (no display names: the watch tests
    compare what :func:`shown` shows)."""
    return pb.TimelineEntry(
        tweet_id=e.tweet_id, author_id=e.author_id, created_at_ms=e.created_at, version=e.version,
        text=e.text, reposted_by=e.reposted_by or "", reposted_at_ms=e.reposted_at or 0,
        in_reply_to_tweet_id=e.in_reply_to_tweet_id or "", in_reply_to_author_id=e.in_reply_to_author_id or "")


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


# --- the service with the change topic live: pages, the read cache and pushed watches ------------------


class WatchedService:
    """A read service on ``store`` with the change topic live (:class:`LiveFeed`), the read cache
    (of a depth drawn from ``rnd``) and a pushed watch per user whose messages a client applies
    (``clients``). :meth:`publish` hands changes to the cache and the hub as the topic's consumer
    does; :meth:`check` compares a user's pages, cached page and watch client with the model."""

    def __init__(self, rnd: random.Random, store: MemoryStore | None = None) -> None:
        self.rnd = rnd
        self.store = store if store is not None else MemoryStore()
        self.feed = LiveFeed()
        self.cache = ReadCache(self.feed, depth=rnd.choice([2, 3, 41]))  # type: ignore[arg-type]
        self.servicer = TimelineServicer(store=lambda: self.store, secret=TEST_SECRET, metrics=ServerMetrics())
        self.hub = WatchHub()
        self.servicer.attach_changes(self.feed, self.cache, self.hub)  # type: ignore[arg-type]
        self.reads = self.servicer.reads
        self.clients: dict[str, dict[str, pb.TimelineEntry]] = {u: {} for u in USERS}
        self.received: dict[str, list[bytes]] = {u: [] for u in USERS}
        self.watches: list[asyncio.Future] = []
        self.offset = 0

    async def _consume(self, user: str) -> None:
        async for message in self.servicer.watch.stream(self.store, user, "", StubContext()):
            self.received[user].append(serialize(message))

    async def open_watches(self, *, first_state: bool) -> None:
        """Open a watch per user; ``first_state``: the client's first state is its pages, read after
        subscribing, as a client does (else the watches open on empty timelines)."""
        self.watches = [asyncio.ensure_future(self._consume(u)) for u in USERS]
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(self.hub) == len(USERS)
        if first_state:
            for u in USERS:
                for e in await home_pages(self.reads, self.store, u, 3):
                    self.clients[u].setdefault(e.tweet_id, client_entry(e))

    def publish(self, changes: list[Any]) -> None:
        """Publish ``changes`` (interleaved and replayed at random) to the cache and the watches."""
        consumed = [Consumed(0, self.offset + k, c) for k, c in enumerate(interleaved(self.rnd, changes))]
        self.offset += len(consumed)
        self.feed.position = {0: self.offset}
        self.cache.apply(consumed)
        self.hub.route(consumed)

    async def publish_staged(self, changes: list[Any], written: MemoryStore) -> None:
        """Write and publish one batch stage by stage, as the stream does (:data:`STAGES`): each
        stage's changes are delivered now or with the next stage's."""
        for tables, kinds in STAGES:
            for table in tables:
                setattr(self.store, table, getattr(written, table))
            self.publish([c for c in changes if isinstance(c, kinds)])
            for _ in range(self.rnd.choice([0, 80])):
                await asyncio.sleep(0)

    async def check(self, user: str, expected: list[Entry], where: Any) -> tuple[int, bool]:
        """``user``'s pages (read twice: the second read fills its head) equal ``expected``, and so
        does its cached first page when the cache holds it and its watch client once the messages
        received are applied (when watches are open). Returns the page size drawn and whether the
        first page was cached."""
        size = self.rnd.randint(1, 3)
        for _ in range(2):
            assert await home_pages(self.reads, self.store, user, size) == expected, where
        cached = self.reads.cached_home_page(user, None, size + 1)
        if cached is not None:
            assert cached[0] == expected[:size + 1], where
        client_view(self.received[user], self.clients[user])
        self.received[user].clear()
        if self.watches:
            assert sorted(shown(e) for e in self.clients[user].values()) == sorted(
                expected_shown(e) for e in expected), where
        return size, cached is not None

    def close(self) -> None:
        for w in self.watches:
            w.cancel()
