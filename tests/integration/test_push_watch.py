"""The view's change topic end to end, on the real stack: what the stream publishes to
``timeline_changes`` (docs/view-changes.md), and the read service's pushed watches and exact read
cache that consume it (docs/api.md#watch, docs/api.md#read-cache).

No stream of its own: the tests publish into the session's streamed world (tests/support/world.py) in
its phase 1 and run on its stream; each test has users of its own, and reads back only what they caused. The push watch test's phases:

1. a watcher receives a new tweet, an edit, a delete, an unfollow's removals and a pull author's tweet,
   each as the matching part of a message, while 200 idle watchers cause no Cassandra read at all
   (every store call of the server is counted);
2. the server restarts: the watcher resumes with its last token and gets exactly the tweets published
   while it was away, then the next live one, once each;
3. a randomized live history with edits, deletes, unfollows, blocks and mutes, read while it lands
   (fills racing changes): afterwards every page the cache serves equals the reference, and most
   reads were cache hits; the server's /metrics page parses and carries the names the dashboard uses.

The view changes test: the stream publishes every change it wrote; applying the home-timeline changes
in order, by row and last-writer-wins on ``ts``, rebuilds exactly the ``home_timeline`` rows. Two
phases, each caught up before the next (so that edits, deletes, unfollows and blocks change rows
written by an earlier micro-batch instead of being folded into the first one): tweets, follows,
profiles and a pull author; then an edit in place, an edit that moves a tweet, a delete, a follow that
brings old tweets, an unfollow, a block, a new profile version and a pull author's tweet.
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
import time
import urllib.request
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc as pb_grpc
from feed_service.core.reference import reference_timelines
from feed_service.core.rows import Entry
from feed_service.core.view_changes import (
    AuthorChange,
    BlockRowChange,
    HiddenChange,
    ProfileChange,
    PullFollowChange,
    PullReposterChange,
    TimelineChange,
    VisibleChange,
    decode,
    message_key,
)
from feed_service.kafka.client_config import client_config
from feed_service.kafka.offsets import SOURCE_ROLES, watermarks
from feed_service.security.roles import SERVER
from feed_service.server.config import ServerConfig
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.settings import Settings
from feed_service.store.cassandra_reader import CassandraReader

from tests.support.pipeline import StreamProcess, read_all_home_timelines, read_table
from tests.support.world import PULL_THRESHOLD, World

#: The world's threshold: in both tests star has six followers and is merged in at read time
#: (docs/fan-out.md): its changes are AuthorChange and PullFollowChange, never in inboxes. In the view
#: changes test bob, with three, stays a push author.
THRESHOLD = PULL_THRESHOLD
T0 = 1_767_225_600_000
IDLE_WATCHERS = 200


class CountingStore:
    """The server's Cassandra store, with every call counted (each call is one query or more)."""

    def __init__(self, store: CassandraReader) -> None:
        self._store = store
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name == "close" or not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return attr(*args, **kwargs)

        return counted


def _tweet(author: str, n: int, version: int = 1, text: str = "") -> dict[str, Any]:
    return {"type": "tweet", "op": "upsert", "tweet_id": f"{author}-t{n}", "author_id": author, "version": version,
            "created_at": T0 + n * 1000 + len(author), "text": text or f"{author} #{n} v{version}",
            "profile_version": 1}


def _delete(author: str, n: int, version: int) -> dict[str, Any]:
    return {"type": "tweet", "op": "delete", "tweet_id": f"{author}-t{n}", "author_id": author, "version": version}


def _follow(follower: str, followee: str, version: int = 1, op: str = "follow") -> dict[str, Any]:
    return {"type": "follow", "op": op, "follower_id": follower, "followee_id": followee, "version": version}


class Watcher:
    """One WatchHomeTimeline stream read on a thread; messages land in ``messages``."""

    def __init__(self, server: ServerThread, user: str, resume_token: str = "") -> None:
        self.messages: queue.Queue = queue.Queue()
        stub = pb_grpc.TimelineServiceStub(server.channel())
        self.call = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user, resume_token=resume_token),
                                           metadata=server.auth(user), timeout=600)
        self.last_token = resume_token
        self.ended: BaseException | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for message in self.call:
                self.messages.put(message)
        except grpc.RpcError as exc:
            self.ended = exc

    def take(self, predicate, timeout: float = 60) -> list[pb.WatchHomeTimelineResponse]:
        """Messages until one satisfies ``predicate`` (all of them, in order)."""
        taken = []
        deadline = time.monotonic() + timeout
        while True:
            message = self.messages.get(timeout=max(0.1, deadline - time.monotonic()))
            taken.append(message)
            if message.resume_token:
                self.last_token = message.resume_token
            if predicate(message):
                return taken

    def drain(self, seconds: float) -> list[pb.WatchHomeTimelineResponse]:
        out = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                message = self.messages.get(timeout=0.1)
            except queue.Empty:
                continue
            out.append(message)
            if message.resume_token:
                self.last_token = message.resume_token
        return out

    def cancel(self) -> None:
        self.call.cancel()
        self._thread.join(5)


def _idle_watchers(server: ServerThread, users: list[str]) -> tuple[asyncio.AbstractEventLoop, list[asyncio.Task]]:
    """``users``' watch streams held open on an event loop of their own (one thread for all)."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    channel_box: list[grpc.aio.Channel] = []

    async def open_all() -> list[asyncio.Task]:
        channel = grpc.aio.insecure_channel(server.address)
        channel_box.append(channel)
        stub = pb_grpc.TimelineServiceStub(channel)

        async def watch(user: str) -> None:
            async for _ in stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user),
                                                  metadata=server.auth(user)):
                pass

        return [asyncio.ensure_future(watch(u)) for u in users]

    tasks = asyncio.run_coroutine_threadsafe(open_all(), loop).result(30)
    return loop, tasks


def _stop_loop(loop: asyncio.AbstractEventLoop, tasks: list[asyncio.Task]) -> None:
    async def cancel() -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(cancel(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)


def _server(pipeline: Settings) -> tuple[ServerThread, list[CountingStore]]:
    stores: list[CountingStore] = []

    def factory() -> CountingStore:
        stores.append(CountingStore(CassandraReader.connect(pipeline)))
        return stores[-1]

    config = ServerConfig(auth_secret=TEST_SECRET, metrics_port=0, metrics_host="127.0.0.1", settings=pipeline,
                          pull_cache_ttl_s=0)
    server = ServerThread(config, store_factory=factory).start()
    deadline = time.monotonic() + 60
    while not stores or not server.server.store_connected():
        assert time.monotonic() < deadline, "the server did not connect to Cassandra"
        time.sleep(0.1)
    server.feed_live()
    return server, stores


@pytest.fixture(scope="module")
def pipeline(world: World) -> Settings:
    """The session's streamed world's topics and keyspace (tests/support/world.py), in phase 1: this
    module's users are its own (a tag, or names no other history uses), so its events change nothing the
    other tests read."""
    return world.settings


@pytest.fixture(scope="module")
def stream(world: World) -> StreamProcess:
    """The world's stream, running and caught up with phase 1."""
    return world.stream


def _ids(entries) -> list[str]:
    return [e.tweet_id for e in entries]


def test_push_watch_resume_and_the_exact_read_cache(world: World, pipeline: Settings, stream: StreamProcess,
                                                    unique: str) -> None:
    tag = unique[-6:]
    ann, bob, cat, star, fan1, fan2, fan3, fan4, fan5 = (
        f"{n}-{tag}" for n in ("ann", "bob", "cat", "star", "fan1", "fan2", "fan3", "fan4", "fan5"))
    idle = [f"idle{i:03d}-{tag}" for i in range(IDLE_WATCHERS)]
    history = [
        {"type": "profile", "user_id": bob, "version": 1, "display_name": "Bob"},
        _follow(ann, bob), _follow(ann, cat), _follow(ann, star), _follow(fan1, star), _follow(fan2, star),
        _follow(fan3, star), _follow(fan4, star), _follow(fan5, star),
        *(_tweet(a, n) for a in (bob, cat, star) for n in range(3)),
        *(_follow(u, bob) for u in idle[:20]),  # some idle users have timelines too
    ]
    world.publish(history, wait=False)
    stream.wait_caught_up()
    server, stores = _server(pipeline)
    try:
        # -- 1. pushed changes, and idle watchers that read nothing -------------------------
        watcher = Watcher(server, ann)
        loop, tasks = _idle_watchers(server, idle)
        hub = server.server.servicer.hub
        assert hub is not None
        # every watch has subscribed, read its head and its pull authors (the hub then starts it)
        deadline = time.monotonic() + 30
        while (len(hub) < IDLE_WATCHERS + 1 or hub._starting) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(hub) == IDLE_WATCHERS + 1 and not hub._starting
        calls = stores[-1].calls
        time.sleep(3.0)
        assert stores[-1].calls == calls, "idle watchers read Cassandra"  # polling would be 201 x 2 / s

        step = [_tweet(bob, 10)]
        world.publish(step, wait=False)
        history += step
        got = watcher.take(lambda m: f"{bob}-t10" in _ids(m.entries))
        assert [e.author_display_name for m in got for e in m.entries if e.tweet_id == f"{bob}-t10"] == ["Bob"]

        step = [_tweet(bob, 1, version=2, text="edited")]
        world.publish(step, wait=False)
        history += step
        got = watcher.take(lambda m: any(e.tweet_id == f"{bob}-t1" for e in m.changed))
        (edited,) = [e for m in got for e in m.changed if e.tweet_id == f"{bob}-t1"]
        assert (edited.version, edited.text) == (2, "edited")

        step = [_delete(bob, 2, version=2)]
        world.publish(step, wait=False)
        history += step
        watcher.take(lambda m: f"{bob}-t2" in m.removed_tweet_ids)

        step = [_follow(ann, cat, version=2, op="unfollow")]
        world.publish(step, wait=False)
        history += step
        got = watcher.take(lambda m: {f"{cat}-t{n}" for n in range(3)} <= set(m.removed_tweet_ids))

        step = [_tweet(star, 11)]  # a pull author: one change for all its followers
        world.publish(step, wait=False)
        history += step
        watcher.take(lambda m: f"{star}-t11" in _ids(m.entries))
        stream.wait_caught_up()
        server.changes_applied()
        calls = stores[-1].calls  # pushing read only display names and the unfollowed author's tweets
        time.sleep(2.0)
        assert stores[-1].calls == calls, "idle watchers read Cassandra"
        _stop_loop(loop, tasks)
        token = watcher.last_token
    finally:
        server.stop()
    watcher.cancel()

    # -- 2. resume across a server restart: no gap, no duplicate --------------------------
    away = [_tweet(bob, 20), _tweet(star, 21)]
    world.publish(away, wait=False)
    history += away
    stream.wait_caught_up()
    server, stores = _server(pipeline)
    try:
        resumed = Watcher(server, ann, resume_token=token)
        first = resumed.take(lambda m: bool(m.entries))
        caught_up = [i for m in first for i in _ids(m.entries)]
        caught_up += [i for m in resumed.drain(1.0) for i in _ids(m.entries)]
        assert caught_up == [f"{bob}-t20", f"{star}-t21"], caught_up  # exactly the two, oldest first
        step = [_tweet(cat, 22), _tweet(bob, 23)]
        world.publish(step, wait=False)
        history += step
        live = resumed.take(lambda m: f"{bob}-t23" in _ids(m.entries))
        live += resumed.drain(1.0)
        assert [i for m in live for i in _ids(m.entries)] == [f"{bob}-t23"]  # ann no longer follows cat
        resumed.cancel()

        # -- 3. a randomized live history against the reference, read while it lands -------
        rng = random.Random(unique)
        users = [ann, bob, cat, star, fan1, fan2, *idle[:6]]
        versions: dict[tuple, int] = {}
        for round_ in range(3):
            events = []
            for _ in range(40):
                a, b = rng.sample(users, 2)
                kind = rng.random()
                if kind < 0.35:
                    key = ("t", a, n := rng.randrange(30, 40))
                    versions[key] = versions.get(key, 0) + 1
                    events.append(_tweet(a, n, version=versions[key]))
                elif kind < 0.5:
                    key = ("t", a, n := rng.randrange(30, 40))
                    versions[key] = versions.get(key, 0) + 1
                    events.append(_delete(a, n, versions[key]))
                elif kind < 0.8:
                    key = ("f", a, b)
                    versions[key] = versions.get(key, 1) + 1
                    events.append(_follow(a, b, versions[key], rng.choice(("follow", "unfollow"))))
                else:
                    key = ("h", a, b)
                    versions[key] = versions.get(key, 0) + 1
                    events.append(
                        {"type": "block", "op": rng.choice(("block", "unblock")), "blocker_id": a, "blocked_id": b,
                         "version": versions[key]} if rng.random() < 0.5 else
                        {"type": "mute", "op": rng.choice(("mute", "unmute")), "muter_id": a, "muted_id": b,
                         "version": versions[key]})
            world.publish(events, wait=False)
            history += events
            deadline = time.monotonic() + 3  # reads racing the stream's writes and their changes
            stub = server.stub()
            while time.monotonic() < deadline:
                for user in users:
                    stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=user, page_size=5),
                                         metadata=server.auth("checker", "service"), timeout=10)
        stream.wait_caught_up()
        expected = reference_timelines(history, inbox_cap=pipeline.inbox_cap)
        cache = server.server.servicer.read_cache
        hits = cache.hits
        first_pass = read_all_home_timelines(server, users, page_size=5)
        second_pass = read_all_home_timelines(server, users, page_size=5)
        assert first_pass == {u: expected[u] for u in users if u in expected}
        assert second_pass == first_pass
        assert cache.hits > hits, "the second pass should be served from the cache"

        page = urllib.request.urlopen(f"http://127.0.0.1:{server.server.metrics_port}/metrics", timeout=10)
        families = {f.name: f for f in text_string_to_metric_families(page.read().decode())}
        for name in ("feed_publish_to_visible_seconds", "feed_view_changes", "feed_read_cache",
                     "feed_read_cache_evictions", "feed_read_cache_timelines", "feed_watch_messages",
                     "feed_watch_streams"):
            assert name in families, name
        count = [s.value for s in families["feed_publish_to_visible_seconds"].samples
                 if s.name.endswith("_count")]
        assert count and count[0] > 0
        hit = [s.value for s in families["feed_read_cache"].samples if s.labels.get("result") == "hit"]
        assert hit and hit[0] > 0
    finally:
        server.stop()


# -- the view changes test ---------------------------------------------------------------------------

#: The view changes test's users (their names are the module's alone: the push watch test's carry a tag).
VIEW_USERS = frozenset({"ann", "bob", "cat", "dan", "eve", "star"})


def _view_tweet(author: str, n: int, version: int = 1, text: str | None = None, moved: int = 0) -> dict[str, Any]:
    return {"type": "tweet", "op": "upsert", "tweet_id": f"{author}-t{n}", "author_id": author, "version": version,
            "created_at": T0 + n * 1000 + moved, "text": text or f"{author} #{n}", "profile_version": 1}


BASE = [
    {"type": "profile", "user_id": "bob", "version": 1, "display_name": "Bob"},
    _follow("ann", "bob"), _follow("cat", "bob"), _follow("eve", "bob"), _follow("bob", "cat"),
    _follow("ann", "star"), _follow("cat", "star"), _follow("dan", "star"), _follow("eve", "star"),
    _follow("fay", "star"), _follow("gus", "star"),
    *(_view_tweet("bob", n) for n in range(4)), _view_tweet("cat", 0), _view_tweet("star", 0),
]
#: Published and applied before CHANGES: with cat still following when dan follows, bob would reach the
#: pull threshold in any batch that holds dan's follow without cat's unfollow, and every row of bob
#: would leave and come back (a delete and an insert, not the update this test checks for).
UNFOLLOW_FIRST = [_follow("cat", "bob", 2, "unfollow")]  # takes bob's tweets out of cat's inbox
CHANGES = [
    _view_tweet("bob", 0, version=2, text="bob #0, edited"),  # update in place (eve's row: she stays)
    _view_tweet("bob", 1, version=2, moved=5000),  # a new created_at: delete + insert, one ts
    {"type": "tweet", "op": "delete", "tweet_id": "bob-t2", "author_id": "bob", "version": 2},
    _follow("dan", "bob"),  # brings bob's retained tweets
    {"type": "block", "op": "block", "blocker_id": "bob", "blocked_id": "ann", "version": 1},
    {"type": "profile", "user_id": "bob", "version": 2, "display_name": "Bobby"},
    _view_tweet("star", 1),
]


def _read_to_end(settings: Settings, roles: tuple[str, ...]) -> list[Any]:
    """Every message of the topics of ``roles``, from the start to their high watermarks now."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    _, high = watermarks(settings, roles)
    wanted = {(topic, int(p)): end for topic, parts in high.items() for p, end in parts.items() if end > 0}
    consumer = Consumer(client_config(settings, SERVER) | {"group.id": "view-changes-test", "enable.auto.commit": False})
    out: list[Any] = []
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in wanted])
        done: set[tuple[str, int]] = set()
        while len(done) < len(wanted):
            msg = consumer.poll(10)
            assert msg is not None, f"no message within 10 s; read {len(out)}, done {sorted(done)} of {wanted}"
            assert msg.error() is None, msg.error()
            out.append(msg)
            if msg.offset() + 1 >= wanted[(msg.topic(), msg.partition())]:
                done.add((msg.topic(), msg.partition()))
        return out
    finally:
        consumer.close()


def _home_timeline(settings: Settings) -> dict[tuple[str, str], Entry]:
    """The view changes test's rows of ``home_timeline``, by (timeline, tweet)."""
    rows = read_table(settings, "SELECT timeline_id, tweet_id, author_id, created_at, version, text, profile_version"
                                " FROM home_timeline")
    return {(r[0], r[1]): Entry(r[1], *r[2:]) for r in rows if r[0] in VIEW_USERS and r[1] is not None}


def test_applying_the_timeline_changes_rebuilds_the_home_timelines(world: World, pipeline: Settings,
                                                                   stream: StreamProcess) -> None:
    assert pipeline.view_changes  # the default
    world.publish(BASE, wait=False)
    stream.wait_caught_up()
    world.publish(UNFOLLOW_FIRST, wait=False)
    stream.wait_caught_up()
    world.publish(CHANGES, wait=False)
    stream.wait_caught_up()
    stored = _home_timeline(pipeline)

    # The messages of this test's users: each message's key is the join key that wrote it, one of them.
    messages = [m for m in _read_to_end(pipeline, ("timeline_changes",)) if m.key().decode() in VIEW_USERS]
    changes = [decode(m.value()) for m in messages]
    assert [m.key().decode() for m in messages] == [message_key(c) for c in changes]

    # Applied per (timeline, tweet) in the order of each partition, a lower ts never overwriting a higher
    # one; an equal ts is the same step (the delete of a moved tweet's old position, then its insert).
    model: dict[tuple[str, str], tuple[int, str, Entry]] = {}
    for c in changes:
        if isinstance(c, TimelineChange):
            for tid in c.timeline_ids:
                old = model.get((tid, c.entry.tweet_id))
                if old is None or c.ts >= old[0]:
                    model[(tid, c.entry.tweet_id)] = (c.ts, c.op, c.entry)
    assert {k: e for k, (_, op, e) in model.items() if op != "delete"} == stored
    # The phases did what they were written for: rows changed in place, moved, left and came.
    ops = {(c.op, c.entry.tweet_id) for c in changes if isinstance(c, TimelineChange)}
    assert {("update", "bob-t0"), ("delete", "bob-t1"), ("insert", "bob-t1"), ("delete", "bob-t2")} <= ops
    assert ("dan", "bob-t3") in stored and ("cat", "bob-t3") not in stored and ("ann", "bob-t3") not in stored
    assert stored[("eve", "bob-t0")].text == "bob #0, edited" and ("eve", "bob-t2") not in stored
    assert all(e.author_id != "star" for e in stored.values())  # a pull author: merged in at read time
    # Every kind but the tweets table's rows, each caused by a record that was published (no repost
    # or reply here: no extras or user-repost rows; the follows change who each reader sees, the
    # block hides, and star's followers merge it in as a pull reposter too).
    kinds = {type(c) for c in changes}
    assert kinds == {TimelineChange, AuthorChange, PullFollowChange, ProfileChange, BlockRowChange, VisibleChange,
                     HiddenChange, PullReposterChange}
    assert [(c.op, c.blocker_id, c.blocked_id) for c in changes if isinstance(c, BlockRowChange)] == [
        ("insert", "bob", "ann")]
    assert {(c.user_id, c.version) for c in changes if isinstance(c, ProfileChange)} == {("bob", 1), ("bob", 2)}
    source_times = {m.timestamp()[1] for m in _read_to_end(pipeline, SOURCE_ROLES)}
    assert all(c.source_ms in source_times for c in changes), sorted(
        {c.source_ms for c in changes} - source_times, key=str)
