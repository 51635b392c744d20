"""The gRPC service against the real test Cassandra, through generated stubs on a loopback port.

Rows go in through the project's own :class:`CassandraWriter` (what the streaming job uses), so
these tests read exactly what the job writes. Ids carry ``unique`` so tests never see each other.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc as pb_grpc
from feed_service.server import auth
from feed_service.server.config import ServerConfig
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.settings import Settings
from feed_service.core.rows import (
    AuthorTimelineWrite,
    BlockWrite,
    Entry,
    ProfileRow,
    ProfileWrite,
    TimelineFanout,
    TimelineWrite,
    TweetWrite,
)
from feed_service.store.cassandra_reader import CassandraReader
from feed_service.store.cassandra_writer import MIN_FANOUT_PARTITIONS, CassandraWriter

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: cwd of the CLI runs below
Code = grpc.StatusCode
_clock = itertools.count(int(time.time() * 1000) * 1000)


def ts() -> int:
    """An increasing write timestamp (the writer takes any increasing int)."""
    return next(_clock)


def wait_serving(channel: grpc.Channel, timeout: float = 30.0) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1).status == \
                    health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("server never became SERVING")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cassandra(settings: Settings):
    from feed_service.store.session import connect

    cluster, session = connect(settings)
    yield session
    cluster.shutdown()


@pytest.fixture(scope="module")
def writer(cassandra, settings: Settings) -> CassandraWriter:
    return CassandraWriter(cassandra, settings.keyspace)


@pytest.fixture(scope="module")
def server(settings: Settings):
    # These tests write rows straight to Cassandra, with no stream to publish the view's changes: the
    # server runs without the change topic (polled watches, no read cache), the path it falls back
    # to when the topic cannot be read. The pushed path: test_push_watch.py. Nor does it reuse pull
    # authors' heads for a second (FEED_PULL_CACHE_TTL_S): a test reads right after it writes.
    config = ServerConfig(auth_secret=TEST_SECRET, metrics_port=None, watch_poll_s=0.1, settings=settings,
                          change_feed=False, pull_cache_ttl_s=0.0)
    with ServerThread(config) as running:  # connects to Cassandra itself, like `feedctl serve`
        wait_serving(running.channel())
        yield running


@pytest.fixture(scope="module")
def stub(server: ServerThread):
    return server.stub()


def put_entries(writer: CassandraWriter, user: str, author: str, ids: range, *, pv: int = 1, base: int = 0) -> None:
    writer.write(timeline=[
        TimelineWrite("insert", user, Entry(f"{author}-t{n:03d}", author, base + n, 1, f"tweet {n}", pv), ts()) for n in ids
    ])


def page(stub, server, user: str, *, size: int = 0, token: str = "", as_: str | None = None, role="user"):
    return stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=user, page_size=size, page_token=token),
                                metadata=server.auth(as_ or user, role), timeout=5)


def rpc_error(fn, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn(*args, **kwargs)
    return info.value


def test_pagination_is_stable_while_new_entries_arrive(writer, stub, server, unique: str) -> None:
    user, author = f"u-{unique}", f"a-{unique}"
    put_entries(writer, user, author, range(100, 130), base=1_000_000)
    first = page(stub, server, user, size=10)
    assert [e.created_at_ms for e in first.entries] == list(range(1_000_129, 1_000_119, -1))
    put_entries(writer, user, author, range(200, 205), base=1_000_000)  # newer: land above the cursor
    seen, token = [e.tweet_id for e in first.entries], first.next_page_token
    while token:
        p = page(stub, server, user, size=10, token=token)
        seen += [e.tweet_id for e in p.entries]
        token = p.next_page_token
    assert seen == [f"{author}-t{n:03d}" for n in range(129, 99, -1)]  # each original entry exactly once
    assert [e.tweet_id for e in page(stub, server, user, size=5).entries][:1] == [f"{author}-t204"]


def test_hydration_with_versioned_profiles(writer, stub, server, unique: str) -> None:
    user, author = f"u-{unique}", f"a-{unique}"
    writer.write(profiles=[ProfileWrite(ProfileRow(author, 1, "Ann", "https://img/1", None), ts()),
                           ProfileWrite(ProfileRow(author, 2, "Ann Lee", "https://img/2", "bio"), ts())])
    put_entries(writer, user, author, range(0, 2), pv=1)
    put_entries(writer, user, author, range(2, 4), pv=2)
    put_entries(writer, user, author, range(4, 5), pv=3)  # profile version 3 has not arrived yet
    names = [(e.profile_version, e.author_display_name) for e in page(stub, server, user).entries]
    assert names == [(3, ""), (2, "Ann Lee"), (2, "Ann Lee"), (1, "Ann"), (1, "Ann")]
    writer.write(profiles=[ProfileWrite(ProfileRow(author, 3, "Ann L.", None, None), ts())])  # the late version fills in
    # the server remembers version 3 as missing (for missing_ttl_s) until the change topic announces it;
    # no stream runs here, so the test announces it the way the server does on a profile change
    forget = server.server.servicer.cache.forget_missing

    async def announced() -> None:
        forget((author, 3))

    server.run(announced())
    assert page(stub, server, user).entries[0].author_display_name == "Ann L."
    # a newer profile does not rename old tweets: each keeps the version it was written under
    assert page(stub, server, user).entries[-1].author_display_name == "Ann"


def test_edits_and_deletes_show_through(writer, stub, server, unique: str) -> None:
    user, author = f"u-{unique}", f"a-{unique}"
    tweet = f"{author}-t001"
    writer.write(timeline=[TimelineWrite("insert", user, Entry(tweet, author, 5, 1, "first", 1), ts())],
                 tweets=[TweetWrite(tweet, author, Entry(tweet, author, 5, 1, "first", 1), ts())])
    writer.write(timeline=[TimelineWrite("update", user, Entry(tweet, author, 5, 2, "edited", 1), ts())],
                 tweets=[TweetWrite(tweet, author, Entry(tweet, author, 5, 2, "edited", 1), ts())])
    (entry,) = page(stub, server, user).entries
    assert (entry.version, entry.text) == (2, "edited")
    got = stub.GetTweet(pb.GetTweetRequest(tweet_id=tweet), metadata=server.auth(user))
    assert (got.version, got.text, got.author_id, got.created_at_ms) == (2, "edited", author, 5)
    writer.write(timeline=[TimelineWrite("delete", user, Entry(tweet, author, 5, 2, "edited", 1), ts())],
                 tweets=[TweetWrite(tweet, author, None, ts())])
    assert list(page(stub, server, user).entries) == []
    err = rpc_error(stub.GetTweet, pb.GetTweetRequest(tweet_id=tweet), metadata=server.auth(user))
    assert err.code() == Code.NOT_FOUND


def test_reply_fields_are_stored_served_and_cleared_by_an_edit(writer, stub, server, unique: str) -> None:
    """A reply's parent goes through every write form (one row, a fan-out statement, the author
    timeline, the tweet) and back out of GetHomeTimeline, GetUserTimeline and GetTweet; an edit
    that stops it being a reply clears the fields (stored as '', schemas/cql/feed.cql)."""
    author, parent_author = f"a-{unique}", f"p-{unique}"
    readers = [f"u{i}-{unique}" for i in range(MIN_FANOUT_PARTITIONS + 1)]  # readers[1:]: one fan-out statement
    tid = f"{author}-t001"
    reply = Entry(tid, author, 9, 1, "@p indeed", 1, f"{parent_author}-t000", parent_author)
    plain = Entry(tid, author, 9, 2, "indeed", 1)
    for version, e in ((1, reply), (2, plain)):
        writer.write(timeline=[TimelineWrite("insert", readers[0], e, ts())],
                     timeline_fanout=[TimelineFanout("insert", tuple(readers[1:]), e, ts())],
                     author_timeline=[AuthorTimelineWrite("insert", e, ts())],
                     tweets=[TweetWrite(tid, author, e, ts())])
        for user in (readers[0], readers[-1]):
            (got,) = page(stub, server, user).entries
            assert got.version == version
            assert (got.in_reply_to_tweet_id, got.in_reply_to_author_id) == (
                (e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or ""))
            assert not got.reposted_by and not got.reposted_at_ms
        (own,) = stub.GetUserTimeline(pb.GetUserTimelineRequest(user_id=author), metadata=server.auth(author),
                                      timeout=5).entries
        tweet = stub.GetTweet(pb.GetTweetRequest(tweet_id=tid), metadata=server.auth(author), timeout=5)
        for got in (own, tweet):
            assert (got.in_reply_to_tweet_id, got.in_reply_to_author_id) == (
                (e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or ""))


def test_an_authors_block_hides_its_tweets_and_timeline_from_that_user(writer, stub, server, unique: str) -> None:
    author, blocked, other = f"a-{unique}", f"u-{unique}", f"o-{unique}"
    row = Entry(f"{author}-t001", author, 7, 1, "hello", 1)
    writer.write(tweets=[TweetWrite(row.tweet_id, author, row, ts())],
                 author_timeline=[AuthorTimelineWrite("insert", row, ts())],
                 blocks=[BlockWrite("insert", author, blocked, ts())])

    def get_tweet(as_: str, role: str = "user"):
        return stub.GetTweet(pb.GetTweetRequest(tweet_id=row.tweet_id), metadata=server.auth(as_, role), timeout=5)

    def user_timeline(as_: str, role: str = "user"):
        return stub.GetUserTimeline(pb.GetUserTimelineRequest(user_id=author), metadata=server.auth(as_, role),
                                    timeout=5)

    err = rpc_error(get_tweet, blocked)
    missing = rpc_error(stub.GetTweet, pb.GetTweetRequest(tweet_id=f"{author}-none"), metadata=server.auth(blocked))
    assert err.code() == missing.code() == Code.NOT_FOUND
    assert err.details() == f"tweet {row.tweet_id!r} not found"  # worded as for a missing tweet: no block named
    err = rpc_error(user_timeline, blocked)
    assert (err.code(), err.details()) == (Code.NOT_FOUND, f"user timeline {author!r} not found")
    for as_, role in ((other, "user"), (author, "user"), ("timeline-api", "service")):  # everyone else sees it
        assert get_tweet(as_, role).text == "hello"
        assert [e.tweet_id for e in user_timeline(as_, role).entries] == [row.tweet_id]
    writer.write(blocks=[BlockWrite("delete", author, blocked, ts())])  # unblocked: seen at once
    assert get_tweet(blocked).text == "hello" and len(user_timeline(blocked).entries) == 1


def test_get_profile(writer, stub, server, unique: str) -> None:
    author = f"a-{unique}"
    writer.write(profiles=[ProfileWrite(ProfileRow(author, 1, "Old", None, None), ts()),
                           ProfileWrite(ProfileRow(author, 7, "New", "https://x", "hi"), ts())])
    md = server.auth("anyone")
    latest = stub.GetProfile(pb.GetProfileRequest(user_id=author), metadata=md)
    assert (latest.version, latest.display_name, latest.avatar_url, latest.bio) == (7, "New", "https://x", "hi")
    assert stub.GetProfile(pb.GetProfileRequest(user_id=author, version=1), metadata=md).display_name == "Old"
    err = rpc_error(stub.GetProfile, pb.GetProfileRequest(user_id=author, version=3), metadata=md)
    assert err.code() == Code.NOT_FOUND
    assert rpc_error(stub.GetProfile, pb.GetProfileRequest(user_id=f"none-{unique}"), metadata=md).code() == \
        Code.NOT_FOUND


def test_auth_rules_and_error_codes(writer, stub, server, unique: str) -> None:
    user, other = f"u-{unique}", f"o-{unique}"
    put_entries(writer, user, f"a-{unique}", range(3))
    assert len(page(stub, server, user, as_="timeline-api", role="service").entries) == 3
    assert rpc_error(page, stub, server, user, as_=other).code() == Code.PERMISSION_DENIED
    request = pb.GetHomeTimelineRequest(user_id=user)
    assert rpc_error(stub.GetHomeTimeline, request).code() == Code.UNAUTHENTICATED
    forged = auth.mint(b"not-the-server-secret-000", subject=user, role="service")
    err = rpc_error(stub.GetHomeTimeline, request, metadata=[("authorization", f"Bearer {forged}")])
    assert err.code() == Code.UNAUTHENTICATED
    for bad in (dict(user_id=""), dict(user_id="x" * 200), dict(user_id=user, page_size=500),
                dict(user_id=user, page_token="garbage")):
        err = rpc_error(stub.GetHomeTimeline, pb.GetHomeTimelineRequest(**bad),
                        metadata=server.auth("svc", "service"))
        assert err.code() == Code.INVALID_ARGUMENT, bad
    put_entries(writer, other, f"a-{unique}", range(3))
    foreign = page(stub, server, other, size=1).next_page_token
    assert rpc_error(page, stub, server, user, token=foreign).code() == Code.INVALID_ARGUMENT


def test_watch_stream_delivers_a_new_entry(writer, stub, server, unique: str) -> None:
    user, author = f"u-{unique}", f"a-{unique}"
    writer.write(profiles=[ProfileWrite(ProfileRow(author, 1, "Watcher", None, None), ts())])
    put_entries(writer, user, author, range(3))
    stream = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user), metadata=server.auth(user),
                                    timeout=20)
    time.sleep(0.5)  # the stream has read the head: the 3 existing entries are not "new"
    put_entries(writer, user, author, range(10, 11))
    message = next(stream)
    assert [(e.tweet_id, e.author_display_name) for e in message.entries] == [(f"{author}-t010", "Watcher")]
    stream.cancel()
    assert rpc_error(next, stream).code() == Code.CANCELLED


def test_health_and_reflection(server) -> None:
    channel = server.channel()
    status = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service="feed.v1.TimelineService")).status
    assert status == health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
    (response,) = reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    assert {"feed.v1.TimelineService", "grpc.health.v1.Health"} <= {
        s.name for s in response.list_services_response.service}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the with block ends


def test_cassandra_unreachable_is_unavailable(settings: Settings) -> None:
    unreachable = replace(settings, cassandra_port=_closed_port())
    config = ServerConfig(auth_secret=TEST_SECRET, metrics_port=None, settings=unreachable, change_feed=False)
    with ServerThread(config) as server:
        deadline = time.monotonic() + 10
        while True:  # until the first connection attempt has failed (the status says "connecting" before)
            err = rpc_error(page, server.stub(), server, "ann")
            if not err.details().endswith(": connecting") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert err.code() == Code.UNAVAILABLE and "cassandra unavailable" in err.details()


def test_session_lost_is_unavailable(settings: Settings) -> None:
    """A session that was connected and then lost (cluster shut down): UNAVAILABLE, not a crash."""
    reader = CassandraReader.connect(settings)
    with ServerThread(ServerConfig(auth_secret=TEST_SECRET, metrics_port=None, settings=settings, change_feed=False),
                      store=reader) as server:
        stub = server.stub()
        assert page(stub, server, "ann").next_page_token == ""
        reader.cluster.shutdown()
        for call in (lambda: page(stub, server, "ann"),
                     lambda: stub.GetTweet(pb.GetTweetRequest(tweet_id="t"), metadata=server.auth("ann"))):
            assert rpc_error(call).code() == Code.UNAVAILABLE


def test_feedctl_serve_drains_on_sigterm(settings: Settings, unique: str) -> None:
    port = _closed_port()
    secret = "sigterm-secret-0123456789"
    env = {**os.environ, "FEED_AUTH_SECRET": secret, "FEED_GRPC_HOST": "127.0.0.1", "FEED_GRPC_PORT": str(port),
           "FEED_METRICS_PORT": "0", "FEED_CASSANDRA_PORT": str(settings.cassandra_port),
           "FEED_CASSANDRA_HOSTS": ",".join(settings.cassandra_hosts), "FEED_KEYSPACE": settings.keyspace,
           "FEED_WATCH_POLL_S": "0.1", "FEED_CHANGE_FEED": "0"}  # rows written directly: no change topic
    proc = subprocess.Popen([sys.executable, "-m", "feed_service", "serve"], env=env, cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        wait_serving(channel)
        stub = pb_grpc.TimelineServiceStub(channel)
        user = f"u-{unique}"
        md = [("authorization", "Bearer " + auth.mint(secret.encode(), subject=user, role="user"))]
        served = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=user), metadata=md, timeout=5)
        assert (list(served.entries), served.next_page_token) == ([], "")  # a user nobody wrote for
        stream = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user), metadata=md, timeout=20)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert list(stream) == [] and stream.code() == Code.OK  # open streams end cleanly
        assert proc.wait(15) == 0
        _, stderr = proc.communicate()
        assert '"msg": "stopped"' in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
