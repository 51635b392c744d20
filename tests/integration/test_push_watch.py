"""The view's change topic at the read service: pushed watches and the exact read cache, on the real stack.

One stream process; read servers that consume ``timeline_changes`` (docs/api.md#watch,
docs/api.md#read-cache). The phases share the stream to keep the suite short:

1. a watcher receives a new tweet, an edit, a delete, an unfollow's removals and a pull author's tweet,
   each as the matching part of a message, while 200 idle watchers cause no Cassandra read at all
   (every store call of the server is counted);
2. the server restarts: the watcher resumes with its last token and gets exactly the tweets published
   while it was away, then the next live one, once each;
3. a randomized live history with edits, deletes, unfollows, blocks and mutes, read while it lands
   (fills racing changes): afterwards every page the cache serves equals the reference, and most
   reads were cache hits; the server's /metrics page parses and carries the names the dashboard uses.
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc as pb_grpc
from feed_service.core.reference import reference_timelines
from feed_service.ops.provision import provision
from feed_service.server.config import ServerConfig
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.settings import Settings
from feed_service.store.cassandra_reader import CassandraReader

from .pipeline import StreamProcess, publish, read_all_home_timelines, running

#: star has three followers and is merged in at read time (docs/fan-out.md); the others are pushed.
THRESHOLD = 3
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


@pytest.fixture
def pipeline(settings: Settings, unique: str) -> Settings:
    isolated = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}", pull_threshold=THRESHOLD)
    provision(isolated)
    return isolated


def _ids(entries) -> list[str]:
    return [e.tweet_id for e in entries]


def test_push_watch_resume_and_the_exact_read_cache(pipeline: Settings, unique: str, tmp_path: Path) -> None:
    tag = unique[-6:]
    ann, bob, cat, star, fan1, fan2 = (f"{n}-{tag}" for n in ("ann", "bob", "cat", "star", "fan1", "fan2"))
    idle = [f"idle{i:03d}-{tag}" for i in range(IDLE_WATCHERS)]
    history = [
        {"type": "profile", "user_id": bob, "version": 1, "display_name": "Bob"},
        _follow(ann, bob), _follow(ann, cat), _follow(ann, star), _follow(fan1, star), _follow(fan2, star),
        *(_tweet(a, n) for a in (bob, cat, star) for n in range(3)),
        *(_follow(u, bob) for u in idle[:20]),  # some idle users have timelines too
    ]
    publish(pipeline, history)
    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log")) as stream:
        stream.wait_caught_up()
        server, stores = _server(pipeline)
        try:
            # -- 1. pushed changes, and idle watchers that read nothing -------------------------
            watcher = Watcher(server, ann)
            loop, tasks = _idle_watchers(server, idle)
            time.sleep(2.0)  # every watch has read its head and subscribed
            assert server.server.servicer.hub is not None and len(server.server.servicer.hub) == IDLE_WATCHERS + 1
            calls = stores[-1].calls
            time.sleep(3.0)
            assert stores[-1].calls == calls, "idle watchers read Cassandra"  # polling would be 201 x 2 / s

            step = [_tweet(bob, 10)]
            publish(pipeline, step)
            history += step
            got = watcher.take(lambda m: f"{bob}-t10" in _ids(m.entries))
            assert [e.author_display_name for m in got for e in m.entries if e.tweet_id == f"{bob}-t10"] == ["Bob"]

            step = [_tweet(bob, 1, version=2, text="edited")]
            publish(pipeline, step)
            history += step
            got = watcher.take(lambda m: any(e.tweet_id == f"{bob}-t1" for e in m.changed))
            (edited,) = [e for m in got for e in m.changed if e.tweet_id == f"{bob}-t1"]
            assert (edited.version, edited.text) == (2, "edited")

            step = [_delete(bob, 2, version=2)]
            publish(pipeline, step)
            history += step
            watcher.take(lambda m: f"{bob}-t2" in m.removed_tweet_ids)

            step = [_follow(ann, cat, version=2, op="unfollow")]
            publish(pipeline, step)
            history += step
            got = watcher.take(lambda m: {f"{cat}-t{n}" for n in range(3)} <= set(m.removed_tweet_ids))

            step = [_tweet(star, 11)]  # a pull author: one change for all its followers
            publish(pipeline, step)
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
        publish(pipeline, away)
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
            publish(pipeline, step)
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
                publish(pipeline, events)
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
