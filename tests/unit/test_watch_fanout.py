"""A pushed change fanned out to many watches: encoded once, framed per watcher (docs/api.md#watch).

The streams run in process (no gRPC), on a :class:`MemoryStore`, with changes routed by the hub as
the change feed would. What a watcher receives is checked against a reference of what a message is
(:class:`Reference`: the watch's semantics, one message per drained batch, built as a protobuf
message): same bytes, same parsed message, across new, changed, removed, duplicate, resumed and
pull-follow changes. Then: the shared encoding serves watchers of different users with their own
resume tokens, one profile read serves them all, the log of pull-author changes held for starting
watches hands over exactly what a list per subscription did, and the deadline is one timer.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Iterable

import grpc
import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.core.rows import AuthorTimelineWrite, Cursor, Entry, ProfileRow, TimelineWrite
from feed_service.core.view_changes import AuthorChange, ProfileChange, PullFollowChange, TimelineChange
from feed_service.errors import PageTokenError, StoreUnavailable
from feed_service.kafka.view_change_consumer import Consumed
from feed_service.server.calls import RpcFailure
from feed_service.server.metrics import ServerMetrics
from feed_service.server.page_token import KIND_WATCH, PageCursor, PageTokenCodec
from feed_service.server.registration import serialize
from feed_service.server.service import TimelineServicer
from feed_service.server.watch_frames import token_field
from feed_service.server.watch_hub import Subscription, WatchHub
from feed_service.store.memory import MemoryStore

SECRET = b"fanout-test-secret-0123456789"


class StubFeed:
    """The change topic, live (no read cache here)."""

    live = True
    position: dict[int, int] = {0: 0}


class Context:
    """What a stream asks of its gRPC context: the time left before its deadline, and to send its
    initial metadata."""

    def __init__(self, seconds: float | None = None) -> None:
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def time_remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    async def send_initial_metadata(self, metadata) -> None:
        """Where the stream starts (its start token, docs/api.md#watch): kept for the test to read."""
        self.initial_metadata = metadata


class Stream:
    """One watch stream consumed on a task; ``received`` holds each response as the wire carries it."""

    def __init__(self, watch, store: MemoryStore, user: str, token: str, context: Context) -> None:
        self.user = user
        self.received: list[bytes] = []
        self.error: BaseException | None = None
        self.task = asyncio.ensure_future(self._run(watch.stream(store, user, token, context)))

    async def _run(self, messages) -> None:
        try:
            async for message in messages:
                self.received.append(serialize(message))
        except RpcFailure as exc:
            self.error = exc

    def take(self) -> list[bytes]:
        got, self.received = self.received, []
        return got


class Fanout:
    """A servicer's pushed watches on a memory store, with a hub fed by :meth:`route`."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.servicer = TimelineServicer(store=lambda: store, secret=SECRET, metrics=ServerMetrics())
        self.hub = WatchHub()
        self.servicer.attach_changes(StubFeed(), None, self.hub)
        self.watch = self.servicer.watch
        self.tokens = PageTokenCodec(SECRET)
        self._offset = 0

    async def open(self, user: str, token: str = "", seconds: float | None = None) -> Stream:
        stream = Stream(self.watch, self.store, user, token, Context(seconds))
        for _ in range(100):  # subscribed, head read, pull authors known, catch-up sent
            await asyncio.sleep(0)
            if not len(self.hub._starting) and self.hub._by_user.get(user):
                break
        await settle()
        return stream

    async def route(self, *changes: object, write: bool = True) -> None:
        """Write the changes' rows (unless not ``write``), then route them: the stream publishes what
        it has written."""
        batch = []
        for change in changes:
            if write:
                written(self.store, change)
            batch.append(Consumed(0, self._offset, change))
            self._offset += 1
        self.hub.route(batch)
        await settle()


def written(store: MemoryStore, change: object) -> None:
    """``change``'s rows in ``store``, as the stream wrote them before publishing it (a replay's
    older write timestamp loses to the newer row)."""
    if isinstance(change, TimelineChange):
        store.write(timeline=[TimelineWrite(change.op, t, change.entry, change.ts) for t in change.timeline_ids])
    elif isinstance(change, AuthorChange):
        store.write(author_timeline=[AuthorTimelineWrite(change.op, change.entry, change.ts)])
    elif isinstance(change, PullFollowChange):  # as the hub takes them: the last one routed holds
        for f in change.follower_ids:
            follows = store.follows_pull.setdefault(f, set())
            (follows.discard if change.op == "delete" else follows.add)(change.author_id)


async def settle(ticks: int = 20) -> None:
    """Let every woken watch run (the memory store never makes one wait)."""
    for _ in range(ticks):
        await asyncio.sleep(0)


def entry(n: int, author: str = "bob", version: int = 1, created_at: int | None = None) -> Entry:
    return Entry(f"t{n:03d}", author, 1_000 + n if created_at is None else created_at, version,
                 f"text {n} v{version}", 1)


class Reference:
    """What one pushed watch sends, as a protobuf message per drained batch: the semantics of
    docs/api.md#watch, written out plainly (dedup by write timestamp, the catch-up read's versions,
    new above the position, changed at or below it, removed; a pull follow brings the author's page,
    an unfollow removes it unless the store holds a row of it in another source).
    One source per tweet: test_server_reposts_replies.py has tweets held by two at once."""

    def __init__(self, user: str, position: Cursor | None, store: MemoryStore, tokens: PageTokenCodec) -> None:
        self.user, self.position, self.store, self.tokens = user, position, store, tokens
        self.seen: dict[str, int] = {}
        self.read: dict[str, int] = {}

    def message(self, items: Iterable[object]) -> pb.WatchHomeTimelineResponse | None:
        upserts: dict[str, Entry] = {}
        removed: dict[str, None] = {}
        unmerged: set[str] = set()

        def note(op: str, e: Entry) -> None:
            if op == "delete":
                upserts.pop(e.tweet_id, None)
                removed[e.tweet_id] = None
            else:
                removed.pop(e.tweet_id, None)
                upserts[e.tweet_id] = e

        for change in items:
            if isinstance(change, PullFollowChange):
                page = sorted(self.store.author_timelines.get(change.author_id, {}).values(),
                              key=lambda e: e.cursor, reverse=True)
                for e in page:
                    note("insert" if change.op == "insert" else "delete", e)
                    unmerged.add(e.tweet_id)
                continue
            e = change.entry
            last = self.seen.get(e.tweet_id)
            if last is not None and change.ts <= last:
                continue
            self.seen[e.tweet_id] = change.ts
            if change.op == "delete":
                self.read.pop(e.tweet_id, None)  # a later insert of the tweet is news again
            elif self.read.get(e.tweet_id) == e.version:
                continue
            note(change.op, e)
        for tid in [t for t in removed if t in unmerged]:  # the store may hold it in another source
            stored = self.stored_row(tid)
            if stored is not None:
                note("insert", stored)
        if not upserts and not removed:
            return None
        new = sorted((e for e in upserts.values() if self.position is None or e.cursor > self.position),
                     key=lambda e: e.cursor)
        changed = [e for e in upserts.values() if not (self.position is None or e.cursor > self.position)]
        if new:
            self.position = new[-1].cursor
        return self.build(new, changed, list(removed))

    def stored_row(self, tweet_id: str) -> Entry | None:
        """The tweet's row the store holds for this user now: in its inbox, or in a merged pull
        author's timeline (every change is published after its row is written)."""
        rows = list(self.store.timelines.get(self.user, {}).values())
        for author in self.store.follows_pull.get(self.user, ()):
            rows += self.store.author_timelines.get(author, {}).values()
        return next((e for e in rows if e.tweet_id == tweet_id), None)

    def catch_up(self, rows: list[Entry]) -> pb.WatchHomeTimelineResponse:
        self.position = rows[-1].cursor
        for r in rows:
            self.read[r.tweet_id] = r.version
        return self.build(rows, [], [])

    def build(self, new: list[Entry], changed: list[Entry], removed: list[str]) -> pb.WatchHomeTimelineResponse:
        token = (self.tokens.encode(PageCursor(self.user, self.position, 0, KIND_WATCH))
                 if self.position is not None else "")
        return pb.WatchHomeTimelineResponse(entries=[self.entry(e) for e in new],
                                            changed=[self.entry(e) for e in changed],
                                            removed_tweet_ids=removed, resume_token=token)

    def entry(self, e: Entry) -> pb.TimelineEntry:
        profile = self.store.profile_rows.get((e.author_id, e.profile_version))
        return pb.TimelineEntry(tweet_id=e.tweet_id, author_id=e.author_id, created_at_ms=e.created_at,
                                version=e.version, text=e.text, profile_version=e.profile_version,
                                author_display_name=profile.display_name if profile else "",
                                author_avatar_url=(profile.avatar_url or "") if profile else "")


def assert_same(received: list[bytes], expected: list[pb.WatchHomeTimelineResponse]) -> None:
    """The bytes a watcher received are the old messages' encoding, and parse to the same messages."""
    assert [pb.WatchHomeTimelineResponse.FromString(r) for r in received] == expected
    assert received == [m.SerializeToString() for m in expected]


def fanout_store() -> MemoryStore:
    store = MemoryStore()
    store.add_profile(ProfileRow("bob", 1, "Bob", "https://a/bob.png", None))
    store.add_profile(ProfileRow("star", 1, "Star", None, None))  # "cat" has no profile: empty names
    store.add_entry("ann", entry(50))
    store.add_entry("dan", entry(10))
    for user in ("ann", "dan"):  # eve's timeline is empty: no position until its first entry
        store.add_pull_follow(user, "star")
    for n in (5, 8):  # below ann's and dan's heads
        store.add_author_entry(entry(n, author="star"))
    return store


def test_each_kind_of_change_arrives_as_the_message_it_always_was() -> None:
    async def run() -> None:
        store = fanout_store()
        f = Fanout(store)
        ann = await f.open("ann")
        ref = Reference("ann", entry(50).cursor, store, f.tokens)
        unfollowed = AuthorChange("insert", entry(90, author="star"), 18, None)
        steps = [
            [TimelineChange("insert", entry(70), ("ann", "dan"), 10, None)],  # new
            [TimelineChange("update", entry(70, version=2), ("ann",), 11, None)],  # changed (at the position)
            [TimelineChange("insert", entry(20, author="cat"), ("ann",), 12, None)],  # below: changed, no name
            [TimelineChange("delete", entry(20, author="cat"), ("ann",), 13, None)],  # removed
            [TimelineChange("update", entry(70, version=2), ("ann",), 11, None)],  # a replay: nothing
            [AuthorChange("insert", entry(80, author="star"), 14, None),  # several in one message
             TimelineChange("insert", entry(75), ("ann",), 15, None),
             TimelineChange("delete", entry(50), ("ann",), 16, None)],
            [PullFollowChange("delete", "star", ("ann",), 17, None)],  # the author's page leaves
            [unfollowed],  # no longer merged in: it does not reach ann
            [PullFollowChange("insert", "star", ("ann",), 19, None)],  # its page comes back, below
        ]
        for batch in steps:
            await f.route(*batch)
            expected = ref.message(c for c in batch if c is not unfollowed)
            assert_same(ann.take(), [expected] if expected is not None else [])
        ann.task.cancel()

    asyncio.run(run())


def test_a_resumed_watch_sends_its_catch_up_then_only_what_the_read_did_not() -> None:
    async def run() -> None:
        store = fanout_store()
        f = Fanout(store)
        first = await f.open("ann")
        await f.route(TimelineChange("insert", entry(70), ("ann",), 10, None))
        token = pb.WatchHomeTimelineResponse.FromString(first.take()[0]).resume_token
        first.task.cancel()
        for n in (71, 72):
            store.add_entry("ann", entry(n))
        resumed = await f.open("ann", token)
        ref = Reference("ann", entry(70).cursor, store, f.tokens)
        assert_same(resumed.take(), [ref.catch_up([entry(71), entry(72)])])
        batches = [
            [TimelineChange("insert", entry(71), ("ann",), 20, None),  # what the read sent: dropped
             TimelineChange("insert", entry(72), ("ann",), 21, None)],
            [TimelineChange("update", entry(72, version=2), ("ann",), 22, None)],  # a newer version: sent
            [TimelineChange("insert", entry(73), ("ann",), 23, None)],
        ]
        for batch in batches:
            await f.route(*batch)
            expected = ref.message(batch)
            assert_same(resumed.take(), [expected] if expected is not None else [])
        resumed.task.cancel()

    asyncio.run(run())


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_fanned_out_to_several_watchers_match_the_reference(seed: int) -> None:
    rng = random.Random(seed)

    async def run() -> None:
        store = fanout_store()
        f = Fanout(store)
        users = ("ann", "dan", "eve")
        streams = {u: await f.open(u) for u in users}
        heads = {"ann": entry(50).cursor, "dan": entry(10).cursor, "eve": None}
        refs = {u: Reference(u, heads[u], store, f.tokens) for u in users}
        follows = {u: u != "eve" for u in users}
        pool = [entry(n, author=rng.choice(("bob", "cat", "star")), created_at=1_000 + rng.randrange(0, 100))
                for n in range(20, 32)]  # apart from star's stored tweets, which a pull follow brings
        for _ in range(40):
            batch = []
            for _ in range(rng.randint(1, 3)):
                e = rng.choice(pool)
                e = e._replace(version=rng.randint(1, 3))
                op = rng.choice(("insert", "update", "delete"))
                ts = rng.randint(1, 30)  # small: replays and stale changes happen
                kind = rng.random()
                if kind < 0.55:
                    batch.append(TimelineChange(op, e, tuple(rng.sample(users, rng.randint(1, 3))), ts, None))
                elif kind < 0.9:  # a tweet of star's own (tweet ids are unique across authors)
                    batch.append(AuthorChange(op, e._replace(author_id="star", tweet_id=f"s{e.tweet_id}"), ts, None))
                else:
                    batch.append(PullFollowChange(rng.choice(("insert", "delete")), "star",
                                                  tuple(rng.sample(users, rng.randint(1, 2))), ts, None))
            await f.route(*batch)
            for u in users:
                mine = []
                for c in batch:
                    if isinstance(c, TimelineChange) and u in c.timeline_ids:
                        mine.append(c)
                    elif isinstance(c, AuthorChange) and follows[u]:
                        mine.append(c)
                    elif isinstance(c, PullFollowChange) and u in c.follower_ids:
                        follows[u] = c.op == "insert"
                        mine.append(c)
                expected = refs[u].message(mine)
                assert_same(streams[u].take(), [expected] if expected is not None else [])
        for s in streams.values():
            s.task.cancel()

    asyncio.run(run())


class GatedStore(MemoryStore):
    """Profile reads wait for ``gate`` (watchers of one content meet while the read is in flight);
    ``readers`` are the tasks that read."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.readers: list[asyncio.Task] = []

    async def profiles(self, keys, *, timeout: float):
        self.readers.append(asyncio.current_task())
        await self.gate.wait()
        return await super().profiles(keys, timeout=timeout)


def test_watchers_of_different_users_share_one_encoding_and_get_their_own_tokens() -> None:
    async def run() -> None:
        store = GatedStore()
        store.gate.set()
        store.add_profile(ProfileRow("star", 1, "Star", None, None))  # not cached yet: one read for all
        users = [f"user{i:02d}" for i in range(40)]
        for u in users:
            store.add_pull_follow(u, "star")
        f = Fanout(store)
        encodes = []
        hydrate = f.watch.encodings.hydrator.entries

        async def counted(*args, **kwargs):
            encodes.append(args)
            return await hydrate(*args, **kwargs)

        f.watch.encodings.hydrator.entries = counted
        streams = [await f.open(u) for u in users]
        await f.route(AuthorChange("insert", entry(7, author="star"), 5, None))
        assert len(encodes) == 1 and len(store.readers) == 1
        messages = [pb.WatchHomeTimelineResponse.FromString(s.take()[0]) for s in streams]
        assert all(m.entries == messages[0].entries for m in messages)
        assert messages[0].entries[0].author_display_name == "Star"
        assert len({m.resume_token for m in messages}) == len(users)
        for u, m in zip(users, messages):
            assert f.tokens.decode(m.resume_token, timeline_id=u, kind=KIND_WATCH).position == entry(7).cursor
        with pytest.raises(PageTokenError):
            f.tokens.decode(messages[0].resume_token, timeline_id=users[1], kind=KIND_WATCH)
        for s in streams:
            s.task.cancel()

    asyncio.run(run())


def test_watchers_wait_for_the_one_profile_read_and_read_again_if_its_watcher_goes() -> None:
    async def run() -> None:
        store = GatedStore()
        store.add_profile(ProfileRow("star", 1, "Star", None, None))
        users = ("ann", "dan", "eve")
        for u in users:
            store.add_pull_follow(u, "star")
        f = Fanout(store)
        streams = [await f.open(u) for u in users]
        await f.route(AuthorChange("insert", entry(7, author="star"), 5, None))
        assert len(store.readers) == 1  # the first reads; the others wait for it
        gone = next(s for s in streams if s.task is store.readers[0])
        gone.task.cancel()  # the reading watcher goes away mid-read
        await settle()
        assert len(store.readers) == 2 and store.readers[1] is not gone.task  # another reads instead, once
        store.gate.set()
        await settle()
        staying = [s for s in streams if s is not gone]
        got = [pb.WatchHomeTimelineResponse.FromString(s.take()[0]) for s in staying]
        assert [m.entries[0].author_display_name for m in got] == ["Star", "Star"]
        assert gone.received == []
        for s in staying:
            s.task.cancel()

    asyncio.run(run())


def test_a_failed_profile_read_fails_every_watcher_that_waited_for_it() -> None:
    async def run() -> None:
        store = GatedStore()
        users = ("ann", "dan", "eve")
        for u in users:
            store.add_pull_follow(u, "star")
        f = Fanout(store)
        streams = [await f.open(u) for u in users]
        await f.route(AuthorChange("insert", entry(7, author="star"), 5, None))
        store.fail = StoreUnavailable("cassandra down")
        store.gate.set()
        await settle()
        assert len(store.readers) == 1
        for s in streams:
            assert s.task.done() and isinstance(s.task.exception(), StoreUnavailable)

    asyncio.run(run())


def test_an_encoding_is_shared_within_one_delivery_only() -> None:
    async def run() -> None:
        store = MemoryStore()  # star's profile has not arrived yet
        for u in ("ann", "dan"):
            store.add_pull_follow(u, "star")
        f = Fanout(store)
        tweet = AuthorChange("insert", entry(7, author="star"), 5, None)
        ann = await f.open("ann")
        await f.route(tweet, write=False)  # not stored: dan's watch opens on an empty head below
        assert pb.WatchHomeTimelineResponse.FromString(ann.take()[0]).entries[0].author_display_name == ""
        store.add_profile(ProfileRow("star", 1, "Star", None, None))  # the profile arrives, as the app applies it
        await f.route(ProfileChange("star", 1, 6, None))
        f.servicer.cache.forget_missing(("star", 1))
        dan = await f.open("dan")
        await f.route(tweet)  # the same content as ann's message, in a later delivery
        assert pb.WatchHomeTimelineResponse.FromString(dan.take()[0]).entries[0].author_display_name == "Star"
        assert ann.take() == []  # a replay for ann
        ann.task.cancel()
        dan.task.cancel()

    asyncio.run(run())


def test_token_field_encodes_its_length_as_a_varint() -> None:
    for n in (0, 1, 127, 128, 300, 1024):
        token = "a" * n
        framed = token_field(token.encode())
        assert pb.WatchHomeTimelineResponse.FromString(framed).resume_token == token
        assert framed == pb.WatchHomeTimelineResponse(resume_token=token).SerializeToString()


class OldEarlyAuthors:
    """The early pull-author changes as the hub held them before: a list per starting subscription,
    every pull author's change appended to each."""

    def __init__(self) -> None:
        self.early: dict[Subscription, list[AuthorChange]] = {}

    def subscribe(self, sub: Subscription) -> None:
        self.early[sub] = []

    def route(self, change: object) -> None:
        if isinstance(change, AuthorChange):
            for held in self.early.values():
                held.append(change)

    def start(self, sub: Subscription) -> list[AuthorChange]:
        held = self.early.pop(sub, [])
        return [c for c in held if c.entry.author_id in sub.authors]

    def unsubscribe(self, sub: Subscription) -> None:
        self.early.pop(sub, None)


@pytest.mark.parametrize("seed", range(30))
def test_the_shared_early_author_log_hands_over_what_each_list_held(seed: int) -> None:
    rng = random.Random(seed)
    hub, old = WatchHub(), OldEarlyAuthors()
    authors = ("star", "moon", "sun", "comet")
    users = ("ann", "bob", "cat", "dan")
    subs: list[Subscription] = []
    starting: list[Subscription] = []
    ts = 0
    for _ in range(400):
        roll = rng.random()
        if roll < 0.2:
            sub = hub.subscribe(rng.choice(users))
            old.subscribe(sub)
            subs.append(sub)
            starting.append(sub)
        elif roll < 0.35 and starting:
            sub = starting.pop(rng.randrange(len(starting)))
            before = list(sub.items)
            hub.start(sub, rng.sample(authors, rng.randint(0, 3)))
            handed = sub.items[:len(sub.items) - len(before)]
            assert sub.items[len(handed):] == before
            assert handed == old.start(sub)  # the same changes, in the same order
        elif roll < 0.45 and subs:
            sub = subs.pop(rng.randrange(len(subs)))
            if sub in starting:
                starting.remove(sub)
            hub.unsubscribe(sub)
            old.unsubscribe(sub)
        else:
            batch = []
            for _ in range(rng.randint(1, 4)):
                ts += 1
                if rng.random() < 0.85:
                    change = AuthorChange("insert", entry(ts, author=rng.choice(authors)), ts, None)
                else:
                    change = PullFollowChange(rng.choice(("insert", "delete")), rng.choice(authors),
                                              (rng.choice(users),), ts, None)
                batch.append(Consumed(0, ts, change))
                if subs:  # the hub routes nothing while nobody watches
                    old.route(change)
            hub.route(batch)
        log = hub._starting
        assert len(log) == len(starting)
        if not starting:
            assert log.changes == []
        else:  # the head no starting subscription needs is shorter than what they do need
            end, first = log.base + len(log.changes), min(s.early_from for s in starting)
            assert log.base <= first and (first == log.base or first - log.base < end - first)
    for sub in subs:
        hub.unsubscribe(sub)
    assert len(hub) == 0 and hub._starting.changes == [] and not hub._by_author


def test_starting_watches_cost_a_routed_change_one_append() -> None:
    hub = WatchHub()
    subs = [hub.subscribe(f"user{i}") for i in range(5_000)]
    changes = [AuthorChange("insert", entry(n, author="star"), n, None) for n in range(100)]
    hub.route([Consumed(0, n, c) for n, c in enumerate(changes)])
    assert hub._starting.changes == changes and all(s.items == [] for s in subs)
    hub.start(subs[0], ["star"])
    assert subs[0].items == changes
    for sub in subs[1:]:
        hub.unsubscribe(sub)
    assert hub._starting.changes == []


def test_the_deadline_is_one_timer_that_ends_the_stream_with_deadline_exceeded() -> None:
    async def run() -> None:
        store = fanout_store()
        f = Fanout(store)
        stream = await f.open("ann", seconds=0.3)
        for n in range(5):  # waits make no task (a timeout per wait would)
            await f.route(TimelineChange("insert", entry(70 + n), ("ann",), 10 + n, None))
            assert asyncio.all_tasks() == {asyncio.current_task(), stream.task}
        assert len(stream.take()) == 5
        await asyncio.wait_for(stream.task, 5)
        assert isinstance(stream.error, RpcFailure) and stream.error.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert len(f.hub) == 0

    asyncio.run(run())


def test_shutdown_ends_pushed_streams_cleanly_and_cancels_their_timers() -> None:
    async def run() -> None:
        f = Fanout(fanout_store())
        loop = asyncio.get_running_loop()
        timers: list[asyncio.TimerHandle] = []
        call_later = loop.call_later

        def recording(*args, **kwargs) -> asyncio.TimerHandle:
            timers.append(call_later(*args, **kwargs))
            return timers[-1]

        loop.call_later = recording
        streams = [await f.open(u, seconds=600) for u in ("ann", "dan")]
        assert len(timers) == 2 and not any(t.cancelled() for t in timers)  # one per stream
        await f.route(TimelineChange("insert", entry(70), ("ann", "dan"), 10, None))
        assert len(timers) == 2
        f.servicer.stop_watches()
        await asyncio.wait_for(asyncio.gather(*(s.task for s in streams)), 5)
        assert all(s.error is None for s in streams) and len(f.hub) == 0
        assert all(t.cancelled() for t in timers)

    asyncio.run(run())
