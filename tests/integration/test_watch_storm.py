"""A reconnect storm of watches on the real stack: 5,000 WatchHomeTimeline streams opened at once
against one ``feedctl serve`` process with its default settings, through the client's
:class:`~feed_service.client.watch.ReconnectingWatch` (docs/api.md#limits, docs/api.md#reconnecting-watches).

With gRPC's own pending-call limits (1,000 / 3,000) about a third of such a storm ends CANCELLED at
once; the server's defaults (``FEED_GRPC_MAX_PENDING_REQUESTS``, ``_HARD_LIMIT``) let every one start.
The streams share four HTTP/2 connections (streams on one connection cost no file descriptor). Then one
view change naming every watcher is published to the change topic, as the stream would publish it,
and reaches every watch. Then the same against a server whose pending-call limits are far below a
storm of 1,000: gRPC refuses some of them, and the helper reconnects each until every one started.

Bounded: 5,000 watches, loopback only, every wait with a deadline (none of them asserted as a speed).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from feed_service.api import timeline_pb2_grpc as pb_grpc
from feed_service.client.watch import Backoff, ReconnectingWatch
from feed_service.core.rows import Entry
from feed_service.core.view_changes import TimelineChange, encode, message_key, split
from feed_service.kafka.client_config import client_config
from feed_service.security.roles import STREAM
from feed_service.server import auth
from feed_service.settings import Settings
from feed_service.stack.config import free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]
WATCHES = 5_000
REFUSED_WATCHES = 1_000
CHANNELS = 4
SECRET = "watch-storm-secret-0123456789"
#: Bounds of the waits (a loaded 2-core machine), never asserted as speeds.
START_BOUND_S = 240.0
DELIVERY_BOUND_S = 120.0


def _serve(settings: Settings, grpc_port: int, metrics_port: int, limits: dict[str, str]) -> subprocess.Popen:
    env = {**os.environ, **settings.to_env(), "FEED_AUTH_SECRET": SECRET, "FEED_GRPC_HOST": "127.0.0.1",
           "FEED_GRPC_PORT": str(grpc_port), "FEED_METRICS_PORT": str(metrics_port), "FEED_LOG_LEVEL": "WARNING"}
    for name in ("FEED_GRPC_MAX_PENDING_REQUESTS", "FEED_GRPC_MAX_PENDING_REQUESTS_HARD_LIMIT",
                 "FEED_MAX_CONCURRENT_RPCS", "FEED_RATE_LIMIT_PER_S", "FEED_MAX_WATCHES_PER_USER"):
        env.pop(name, None)  # the defaults, unless the test sets one
    env.update(limits)
    return subprocess.Popen([sys.executable, "-m", "feed_service", "serve"], env=env, cwd=REPO_ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_serving(port: int, proc: subprocess.Popen) -> None:
    """Until health says SERVING (Cassandra connected)."""
    deadline = time.monotonic() + 60
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            assert proc.poll() is None, f"feedctl serve exited: {proc.stderr.read()}"
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            assert time.monotonic() < deadline, "the server never became SERVING"
            time.sleep(0.2)


def _timeline_changes_applied(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "feed_view_changes_total" and sample.labels.get("kind") == "timeline")


class ChangePublisher:
    """Publishes view changes to the change topic as the stream does (split, keyed, encoded), with a
    producer of its own that the test closes (:mod:`feed_service.kafka.stream_publisher` keeps one per
    worker for good)."""

    def __init__(self, settings: Settings) -> None:
        from confluent_kafka import Producer

        self.topic = settings.topic("timeline_changes")
        self.producer = Producer(client_config(settings, STREAM) | {"acks": "all"})

    def publish(self, change: TimelineChange) -> None:
        for message in split(change):
            self.producer.produce(self.topic, key=message_key(message).encode(), value=encode(message))
        assert self.producer.flush(30) == 0, "view change not delivered"


def _change(entry: Entry, users: list[str]) -> TimelineChange:
    now_ms = int(time.time() * 1000)
    return TimelineChange("insert", entry, tuple(users), now_ms * 1000, now_ms)


def _wait_change_feed(publisher: ChangePublisher, metrics_port: int, unique: str) -> None:
    """Until the server applies the change topic (a probe change for a user nobody watches): watches
    opened from then on are pushed, not polled (docs/api.md#watch)."""
    deadline = time.monotonic() + 60
    probe = Entry(f"probe-{unique}", f"probe-author-{unique}", int(time.time() * 1000), 1, "probe", 1)
    while _timeline_changes_applied(metrics_port) == 0:
        assert time.monotonic() < deadline, "the server never consumed the view's change topic"
        publisher.publish(_change(probe, [f"probe-{unique}"]))
        time.sleep(0.5)


async def _storm(port: int, users: list[str], publisher: ChangePublisher, entry: Entry) -> Counter:
    """Open a watch of each of ``users`` at once, wait until every one started, publish ``entry`` to all
    of them and wait until every one received it; the ends the watches reconnected after, by status."""
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(CHANNELS)]
    stubs = [pb_grpc.TimelineServiceStub(channel) for channel in channels]
    received: dict[str, asyncio.Event] = {user: asyncio.Event() for user in users}
    tokens: dict[str, str] = {}
    watches = [ReconnectingWatch(stubs[i % CHANNELS], user, backoff=Backoff(initial_s=0.5, max_s=5.0),
                                 metadata=[("authorization", "Bearer " + auth.mint(SECRET.encode(), subject=user, role="user"))])
               for i, user in enumerate(users)]

    async def consume(watch: ReconnectingWatch) -> None:
        async for message in watch:
            if any(e.tweet_id == entry.tweet_id for e in message.entries):
                tokens[watch.user_id] = message.resume_token
                received[watch.user_id].set()

    tasks = [asyncio.create_task(consume(w)) for w in watches]  # all at once: the storm
    try:
        started = asyncio.gather(*(w.started.wait() for w in watches))
        done, _ = await asyncio.wait([started, *tasks], timeout=START_BOUND_S, return_when=asyncio.FIRST_COMPLETED)
        failed = [t.exception() for t in tasks if t.done()]
        assert not failed, f"watches ended with {failed[:3]}"
        not_started = [w.user_id for w in watches if not w.started.is_set()]
        assert not not_started, f"{len(not_started)} of {len(watches)} watches never started"
        assert all(w.resume_token for w in watches)  # each knows where it started
        ends = sum((w.ends for w in watches), Counter())
        print(f"{len(watches)} watches started over {CHANNELS} connections; ends reconnected after: {dict(ends)}")

        # a change published afterwards reaches every one of them
        await asyncio.to_thread(publisher.publish, _change(entry, users))
        waits = asyncio.gather(*(event.wait() for event in received.values()))
        await asyncio.wait([waits], timeout=DELIVERY_BOUND_S)
        missing = [user for user, event in received.items() if not event.is_set()]
        assert not missing, f"{len(missing)} of {len(users)} watches did not receive the change"
        assert all(tokens[user] for user in users)
        return ends
    finally:
        for watch in watches:
            watch.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        for channel in channels:
            await channel.close()


def _run(settings: Settings, unique: str, watches: int, limits: dict[str, str]) -> Counter:
    """One ``feedctl serve`` with ``limits`` over its defaults, and a storm of ``watches`` against it."""
    grpc_port, metrics_port = free_ports(2)
    proc = _serve(settings, grpc_port, metrics_port, limits)
    publisher = ChangePublisher(settings)
    try:
        _wait_serving(grpc_port, proc)
        _wait_change_feed(publisher, metrics_port, unique)
        users = [f"storm-{unique}-{i}" for i in range(watches)]
        entry = Entry(f"storm-{unique}-t1", f"storm-author-{unique}", int(time.time() * 1000), 1, "hello", 1)
        return asyncio.run(_storm(grpc_port, users, publisher, entry))
    finally:
        publisher.producer.flush(5)
        del publisher
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_five_thousand_watches_at_once_all_start_and_receive_a_change(settings: Settings, unique: str) -> None:
    ends = _run(settings, unique, WATCHES, {})
    # the defaults are above the storm: gRPC refused none of them (a refusal is a CANCELLED end; an
    # UNAVAILABLE of a Cassandra read under this load would be the helper's to absorb)
    assert ends["CANCELLED"] == 0 and ends["RESOURCE_EXHAUSTED"] == 0


def test_watches_grpc_refuses_reconnect_until_every_one_started(settings: Settings, unique: str) -> None:
    """Pending-call limits far below the storm: gRPC refuses watches at once (CANCELLED), and the
    helper opens each again after a jittered wait until every one has started and receives the change."""
    ends = _run(settings, unique, REFUSED_WATCHES, {"FEED_GRPC_MAX_PENDING_REQUESTS": "20",
                                                     "FEED_GRPC_MAX_PENDING_REQUESTS_HARD_LIMIT": "40"})
    assert ends["CANCELLED"] > 0
