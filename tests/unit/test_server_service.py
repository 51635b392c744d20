"""The gRPC service over loopback with an in-memory store: every rule that needs no Cassandra.

The same server code runs here as in production (grpc.aio on a real port, generated client stubs);
only the store is :class:`MemoryStore`. tests/integration/test_grpc_*.py repeats the essentials
against real Cassandra.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from feed_service.api import timeline_pb2 as pb
from feed_service.server.config import ServerConfig
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.core.join import DEFAULT_INBOX_CAP as INBOX_CAP
from feed_service.core.rows import Entry, ProfileRow
from feed_service.errors import StoreTimeout, StoreUnavailable
from feed_service.store.memory import MemoryStore

Code = grpc.StatusCode


def config(**kw) -> ServerConfig:
    base = dict(auth_secret=TEST_SECRET, metrics_port=None, watch_poll_s=0.05, shutdown_grace_s=1.0,
                change_feed=False)  # no Kafka in unit tests: watches poll
    return ServerConfig(**{**base, **kw})


def entry(n: int, author: str = "bob", pv: int = 1) -> Entry:
    return Entry(f"t{n:04d}", author, 1_000 + n, 1, f"text {n}", pv)


@pytest.fixture(scope="module")
def store() -> MemoryStore:
    s = MemoryStore()
    for n in range(45):
        s.add_entry("ann", entry(n, author="bob" if n % 2 else "cat", pv=1 + n % 3))
    for n in range(INBOX_CAP + 50):
        s.add_entry("big", entry(n))
    for user in ("bob", "cat"):
        for v in (1, 2, 3):
            s.add_profile(ProfileRow(user, v, f"{user.title()} v{v}", f"https://a/{user}/{v}.png", None))
    s.tweets["t0001"] = Entry("t0001", "bob", 1001, 4, "edited", 2)
    return s


@pytest.fixture(scope="module")
def server(store: MemoryStore):
    with ServerThread(config(metrics_port=0), store=store) as running:
        yield running


@pytest.fixture(scope="module")
def stub(server: ServerThread):
    return server.stub()


def rpc_error(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kwargs)
    return info.value


def home(stub, server, user: str = "ann", *, as_: str | None = None, role: str = "user", **fields):
    request = pb.GetHomeTimelineRequest(user_id=user, **fields)
    return stub.GetHomeTimeline(request, metadata=server.auth(as_ or user, role), timeout=5)


def test_first_page_newest_first_hydrated(stub, server) -> None:
    page = home(stub, server)
    assert len(page.entries) == 20 and page.next_page_token
    assert [e.tweet_id for e in page.entries] == [f"t{n:04d}" for n in range(44, 24, -1)]
    first = page.entries[0]  # t0044: author cat, profile version 1 + 44 % 3 = 3
    assert (first.author_id, first.profile_version, first.author_display_name) == ("cat", 3, "Cat v3")
    assert first.author_avatar_url == "https://a/cat/3.png"
    assert (first.created_at_ms, first.version, first.text) == (1044, 1, "text 44")


def test_pages_cover_the_timeline_once(stub, server) -> None:
    seen, token, pages = [], "", 0
    while True:
        page = home(stub, server, page_size=7, page_token=token)
        seen += [e.tweet_id for e in page.entries]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == [f"t{n:04d}" for n in range(44, -1, -1)] and pages == 7  # 45 = 6*7 + 3: no empty last page


def test_exact_multiple_ends_without_an_empty_page(stub, server) -> None:
    page = home(stub, server, page_size=45)
    assert len(page.entries) == 45 and page.next_page_token == ""


def test_paging_stops_at_the_inbox_cap(stub, server) -> None:
    token, served = "", 0
    while True:
        page = home(stub, server, "big", page_size=200, page_token=token)
        served += len(page.entries)
        token = page.next_page_token
        if not token:
            break
    assert served == INBOX_CAP


def test_empty_timeline(stub, server) -> None:
    page = home(stub, server, "nobody")
    assert list(page.entries) == [] and page.next_page_token == ""


@pytest.mark.parametrize("fields, message", [
    (dict(user_id=""), "user_id is required"),
    (dict(user_id="u" * 129), "longer than 128"),
    (dict(user_id="ann", page_size=-1), "page_size must be between 1 and 200"),
    (dict(user_id="ann", page_size=201), "page_size must be between 1 and 200"),
    (dict(user_id="ann", page_token="not-a-token"), "page token"),
])
def test_invalid_arguments(stub, server, fields: dict, message: str) -> None:
    err = rpc_error(stub.GetHomeTimeline, pb.GetHomeTimelineRequest(**fields),
                    metadata=server.auth("svc", "service"))
    assert err.code() == Code.INVALID_ARGUMENT and message in err.details()


def test_tampered_and_foreign_page_tokens(stub, server) -> None:
    token = home(stub, server).next_page_token
    tampered = token[:-3] + ("AAA" if token[-3:] != "AAA" else "BBB")
    err = rpc_error(home, stub, server, page_token=tampered)
    assert err.code() == Code.INVALID_ARGUMENT and "modified" in err.details()
    # a service may read bob's timeline, but not with a cursor minted for ann's
    err = rpc_error(home, stub, server, "bob", as_="svc", role="service", page_token=token)
    assert err.code() == Code.INVALID_ARGUMENT and "another timeline" in err.details()


def test_authentication(stub, server) -> None:
    request = pb.GetHomeTimelineRequest(user_id="ann")
    for metadata in ([], [("authorization", "Bearer nope")], [("authorization", "Basic abc")]):
        err = rpc_error(stub.GetHomeTimeline, request, metadata=metadata)
        assert err.code() == Code.UNAUTHENTICATED
    expired = server.token("ann", ttl_s=-1)
    err = rpc_error(stub.GetHomeTimeline, request, metadata=[("authorization", f"Bearer {expired}")])
    assert err.code() == Code.UNAUTHENTICATED and "expired" in err.details()
    for call, req in ((stub.GetTweet, pb.GetTweetRequest(tweet_id="t0001")),
                      (stub.GetProfile, pb.GetProfileRequest(user_id="bob"))):
        assert rpc_error(call, req).code() == Code.UNAUTHENTICATED


def test_authorization(stub, server) -> None:
    err = rpc_error(home, stub, server, "ann", as_="bob")
    assert err.code() == Code.PERMISSION_DENIED
    assert len(home(stub, server, "ann", as_="feed-api", role="service").entries) == 20
    # tweets and profiles are readable with any valid token
    assert stub.GetTweet(pb.GetTweetRequest(tweet_id="t0001"), metadata=server.auth("zed")).text == "edited"


def test_get_tweet_and_profile(stub, server) -> None:
    md = server.auth("ann")
    tweet = stub.GetTweet(pb.GetTweetRequest(tweet_id="t0001"), metadata=md)
    assert (tweet.author_id, tweet.version, tweet.text, tweet.profile_version) == ("bob", 4, "edited", 2)
    assert rpc_error(stub.GetTweet, pb.GetTweetRequest(tweet_id="gone"), metadata=md).code() == Code.NOT_FOUND
    assert rpc_error(stub.GetTweet, pb.GetTweetRequest(), metadata=md).code() == Code.INVALID_ARGUMENT
    assert stub.GetProfile(pb.GetProfileRequest(user_id="bob"), metadata=md).version == 3
    at2 = stub.GetProfile(pb.GetProfileRequest(user_id="bob", version=2), metadata=md)
    assert (at2.version, at2.display_name) == (2, "Bob v2")
    err = rpc_error(stub.GetProfile, pb.GetProfileRequest(user_id="bob", version=9), metadata=md)
    assert err.code() == Code.NOT_FOUND
    err = rpc_error(stub.GetProfile, pb.GetProfileRequest(user_id="bob", version=-1), metadata=md)
    assert err.code() == Code.INVALID_ARGUMENT


class BlocksStore(MemoryStore):
    """bob blocks ann; counts reads, and notes whether a block read ran while a page read was waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.paging = False
        self.block_read_during_page: list[bool] = []
        for n in range(3):
            row = Entry(f"b{n}", "bob", 2_000 + n, 1, f"bob {n}", 1)
            self.add_author_entry(row)
            self.tweets[row.tweet_id] = row
        self.add_block("bob", "ann")

    async def tweet(self, *args, **kwargs):
        self.reads.append("tweet")
        return await super().tweet(*args, **kwargs)

    async def author_page(self, *args, **kwargs):
        import asyncio

        self.reads.append("author_page")
        self.paging = True
        await asyncio.sleep(0.05)
        self.paging = False
        return await super().author_page(*args, **kwargs)

    async def user_reposts_page(self, *args, **kwargs):
        self.reads.append("user_reposts_page")
        return await super().user_reposts_page(*args, **kwargs)

    async def blocks(self, *args, **kwargs):
        import asyncio

        self.reads.append("blocks")
        await asyncio.sleep(0.01)  # a page read started beside it is under way by now
        self.block_read_during_page.append(self.paging)
        return await super().blocks(*args, **kwargs)


def test_an_authors_block_hides_its_tweets_and_timeline_from_that_user_only() -> None:
    store = BlocksStore()
    with ServerThread(config(pull_cache_ttl_s=0.0), store=store) as server:
        stub = server.stub()

        def tweet(as_: str, role: str = "user", tweet_id: str = "b1"):
            return stub.GetTweet(pb.GetTweetRequest(tweet_id=tweet_id), metadata=server.auth(as_, role), timeout=5)

        def timeline(as_: str, role: str = "user", **fields):
            return stub.GetUserTimeline(pb.GetUserTimelineRequest(user_id="bob", **fields),
                                        metadata=server.auth(as_, role), timeout=5)

        # ann, whom bob blocks: NOT_FOUND, worded exactly as for a tweet or timeline that does not exist
        err = rpc_error(tweet, "ann")
        assert (err.code(), err.details()) == (Code.NOT_FOUND, "tweet 'b1' not found")
        assert rpc_error(tweet, "ann", tweet_id="b9").details() == "tweet 'b9' not found"
        err = rpc_error(timeline, "ann")
        assert (err.code(), err.details()) == (Code.NOT_FOUND, "user timeline 'bob' not found")
        token = timeline("zed", page_size=1).next_page_token  # a cursor from before, or from someone else
        assert rpc_error(timeline, "ann", page_token=token).code() == Code.NOT_FOUND
        # everyone else sees bob's tweets: other users, bob himself, any service
        for as_, role in (("zed", "user"), ("bob", "user"), ("feed-api", "service")):
            assert tweet(as_, role).text == "bob 1"
            assert [e.tweet_id for e in timeline(as_, role).entries] == ["b2", "b1", "b0"]
        # a block hides one way here: bob's block of ann does not hide ann's tweets from bob
        store.tweets["a1"] = Entry("a1", "ann", 3_000, 1, "ann 1", 1)
        assert tweet("bob", tweet_id="a1").text == "ann 1"
        store.blocked.discard(("bob", "ann"))  # unblocked: seen again, at once (the read is not cached)
        assert tweet("ann").text == "bob 1" and len(timeline("ann").entries) == 3


def test_block_reads_cost_one_query_beside_the_main_read() -> None:
    store = BlocksStore()
    with ServerThread(config(pull_cache_ttl_s=0.0), store=store) as server:
        stub = server.stub()
        for as_, role, expected in (("zed", "user", ["tweet", "blocks"]), ("svc", "service", ["tweet"]),
                                    ("bob", "user", ["tweet"])):
            store.reads.clear()
            stub.GetTweet(pb.GetTweetRequest(tweet_id="b0"), metadata=server.auth(as_, role), timeout=5)
            assert store.reads == expected, as_
        rpc_error(stub.GetTweet, pb.GetTweetRequest(tweet_id="gone"), metadata=server.auth("zed"), timeout=5)
        for as_, role, expected in (("zed", "user", ["author_page", "blocks", "user_reposts_page"]),
                                    ("svc", "service", ["author_page", "user_reposts_page"]),
                                    ("bob", "user", ["author_page", "user_reposts_page"])):
            store.reads.clear()
            stub.GetUserTimeline(pb.GetUserTimelineRequest(user_id="bob"), metadata=server.auth(as_, role), timeout=5)
            assert sorted(store.reads) == expected, as_  # concurrent: in any order
        assert store.block_read_during_page == [False, True]  # GetTweet's follows the read, GetUserTimeline's not
        store.fail = StoreUnavailable("cassandra unavailable: NoHostAvailable")
        err = rpc_error(stub.GetUserTimeline, pb.GetUserTimelineRequest(user_id="bob"), metadata=server.auth("zed"),
                        timeout=5)
        assert err.code() == Code.UNAVAILABLE


def test_store_errors_map_to_unavailable_and_deadline(store: MemoryStore, stub, server) -> None:
    store.fail = StoreUnavailable("cassandra unavailable: NoHostAvailable")
    try:
        err = rpc_error(home, stub, server)
        assert err.code() == Code.UNAVAILABLE and "NoHostAvailable" in err.details()
        store.fail = StoreTimeout("cassandra read timed out")
        assert rpc_error(home, stub, server).code() == Code.UNAVAILABLE  # the client's deadline still runs
    finally:
        store.fail = None


def test_not_connected_is_unavailable_and_not_serving() -> None:
    def never() -> MemoryStore:
        raise StoreUnavailable("cassandra unavailable: connection refused")

    with ServerThread(config(), store_factory=never) as server:
        err = rpc_error(home, server.stub(), server)
        assert err.code() == Code.UNAVAILABLE and "connection refused" in err.details()
        health = health_pb2_grpc.HealthStub(server.channel())
        status = health.Check(health_pb2.HealthCheckRequest(service="feed.v1.TimelineService")).status
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING


class BuggyStore(MemoryStore):
    """A store whose page() has a bug (not a store fault)."""

    async def page(self, *args, **kwargs):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")


def test_a_bug_in_the_store_is_internal_with_its_traceback_logged(caplog) -> None:
    with ServerThread(config(), store=BuggyStore()) as server, caplog.at_level("ERROR", "feed_service.server"):
        err = rpc_error(home, server.stub(), server)
    assert err.code() == Code.INTERNAL  # not a retryable UNAVAILABLE
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and logged[0].exc_info[0] is TypeError


def test_driver_errors_are_translated_and_bugs_are_not() -> None:
    from cassandra.cluster import NoHostAvailable

    from feed_service.store.cassandra_reader import translate_driver_error

    bug = TypeError("boom")
    assert translate_driver_error(bug) is bug
    assert isinstance(translate_driver_error(NoHostAvailable("no host", {})), StoreUnavailable)
    assert isinstance(translate_driver_error(TimeoutError()), StoreTimeout)
    # a role refused by the grants is a deployment error, not an outage to retry (docs/security.md)
    from cassandra import Unauthorized

    from feed_service.errors import StorePermissionDenied

    assert isinstance(translate_driver_error(Unauthorized("no SELECT")), StorePermissionDenied)


def test_paging_stops_at_the_configured_inbox_cap(store: MemoryStore) -> None:
    from feed_service.settings import Settings

    with ServerThread(config(settings=Settings(inbox_cap=30)), store=store) as server:
        stub, ids, token = server.stub(), [], ""
        while True:
            page = home(stub, server, "big", page_size=7, page_token=token)
            ids += [e.tweet_id for e in page.entries]
            token = page.next_page_token
            if not token:
                break
    assert len(ids) == 30 and len(set(ids)) == 30


class RecordingStore(MemoryStore):
    """Records the time budget each read was given."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float] = []

    async def page(self, *args, timeout: float, **kwargs):
        self.timeouts.append(timeout)
        return await super().page(*args, timeout=timeout, **kwargs)

    async def newer(self, *args, timeout: float, **kwargs):
        self.timeouts.append(timeout)
        return await super().newer(*args, timeout=timeout, **kwargs)


def test_watch_reads_stay_within_the_call_deadline() -> None:
    store = RecordingStore()
    with ServerThread(config(request_timeout_s=30.0), store=store) as server:
        stream = server.stub().WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id="ann"),
                                                 metadata=server.auth("ann"), timeout=0.6)
        with pytest.raises(grpc.RpcError) as info:
            next(stream)
    assert info.value.code() == Code.DEADLINE_EXCEEDED
    assert len(store.timeouts) >= 2  # the head read and at least one poll
    # never the 30 s request timeout; the server's view of the deadline comes from the grpc-timeout
    # header and its own clock, so it may exceed the client's 0.6 s by a rounding error
    assert max(store.timeouts) <= 0.6 + 0.01


class SlowStore(MemoryStore):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.add_entry("ann", entry(1))

    async def page(self, *args, **kwargs):
        import asyncio

        await asyncio.sleep(self.delay)
        return await super().page(*args, **kwargs)


def test_deadline_is_respected() -> None:
    # The store would take 10 s: the call ends with the client's deadline, long before (the bound is
    # loose on purpose, so a busy machine does not fail it).
    with ServerThread(config(), store=SlowStore(10.0)) as server:
        started = time.monotonic()
        err = rpc_error(server.stub().GetHomeTimeline, pb.GetHomeTimelineRequest(user_id="ann"),
                        metadata=server.auth("ann"), timeout=0.2)
        assert err.code() == Code.DEADLINE_EXCEEDED and time.monotonic() - started < 5


def test_graceful_shutdown_drains_in_flight_calls() -> None:
    server = ServerThread(config(shutdown_grace_s=5.0), store=SlowStore(0.5)).start()
    stub, results = server.stub(), []
    caller = threading.Thread(target=lambda: results.append(
        stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"), timeout=5)))
    caller.start()
    time.sleep(0.2)  # the call is in flight, waiting on the store
    server.run(server.server.stop(5.0))
    caller.join(5)
    assert len(results) == 1 and results[0].entries[0].tweet_id == "t0001"
    with pytest.raises(grpc.RpcError):  # no new calls after the drain
        stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"), timeout=1)
    server.stop()


def test_health_and_reflection_need_no_token(server) -> None:
    channel = server.channel()
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", "feed.v1.TimelineService"):
        assert health.Check(health_pb2.HealthCheckRequest(service=name)).status == \
            health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = list(reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = {s.name for s in responses[0].list_services_response.service}
    assert {"feed.v1.TimelineService", "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection"} <= names
    by_symbol = list(reflect.ServerReflectionInfo(iter([
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="feed.v1.TimelineService")])))
    assert by_symbol[0].file_descriptor_response.file_descriptor_proto


def test_watch_delivers_new_entries_and_ends_on_cancel(store: MemoryStore, stub, server) -> None:
    stream = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"))
    time.sleep(0.2)  # the stream has read the head
    store.add_entry("ann", Entry("t9000", "bob", 9_000, 1, "fresh", 2))
    message = next(stream)
    assert [(e.tweet_id, e.author_display_name) for e in message.entries] == [("t9000", "Bob v2")]
    assert message.resume_token
    store.add_entry("ann", Entry("t9001", "bob", 9_001, 1, "fresher", 2))
    assert [e.tweet_id for e in next(stream).entries] == ["t9001"]
    stream.cancel()
    with pytest.raises(grpc.RpcError) as info:
        next(stream)
    assert info.value.code() == Code.CANCELLED
    # resuming from the first message's token replays what came after it
    resumed = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id="ann", resume_token=message.resume_token),
                                     metadata=server.auth("ann"))
    assert [e.tweet_id for e in next(resumed).entries] == ["t9001"]
    resumed.cancel()
    for entry_id in ("t9000", "t9001"):
        del store.timelines["ann"][(int(entry_id[1:]), entry_id)]


def test_watch_sends_its_start_token_before_any_entry(store: MemoryStore, stub, server) -> None:
    """A started stream says so at once (initial metadata) with the token of where it starts: resuming
    from it, even on an empty timeline, sends what arrived meanwhile (docs/api.md#watch)."""
    from feed_service.server.watch import RESUME_TOKEN_HEADER

    for user, arrived in (("ann", "t9100"), ("nobody-yet", "t9101")):
        stream = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user), metadata=server.auth(user))
        start = dict(stream.initial_metadata())[RESUME_TOKEN_HEADER]  # before any entry exists to send
        assert start
        stream.cancel()
        store.add_entry(user, Entry(arrived, "bob", 9_100, 1, "while away", 2))
        resumed = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user, resume_token=start),
                                         metadata=server.auth(user))
        assert dict(resumed.initial_metadata())[RESUME_TOKEN_HEADER] == start
        assert [e.tweet_id for e in next(resumed).entries] == [arrived]
        resumed.cancel()
        del store.timelines[user][(9_100, arrived)]


def test_watch_auth_and_validation(stub, server) -> None:
    watch = stub.WatchHomeTimeline
    assert rpc_error(lambda: next(watch(pb.WatchHomeTimelineRequest(user_id="ann")))).code() == Code.UNAUTHENTICATED
    err = rpc_error(lambda: next(watch(pb.WatchHomeTimelineRequest(user_id="ann"), metadata=server.auth("bob"))))
    assert err.code() == Code.PERMISSION_DENIED
    err = rpc_error(lambda: next(watch(pb.WatchHomeTimelineRequest(user_id="ann", resume_token="x"),
                                       metadata=server.auth("ann"))))
    assert err.code() == Code.INVALID_ARGUMENT and "resume token" in err.details()


def test_watch_ends_cleanly_on_shutdown() -> None:
    server = ServerThread(config(), store=MemoryStore()).start()
    stream = server.stub().WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"))
    time.sleep(0.2)
    server.run(server.server.stop(2.0))
    assert list(stream) == []  # ended with OK, not an error
    assert stream.code() == Code.OK
    server.stop()


def test_metrics_endpoint(stub, server) -> None:
    home(stub, server)
    rpc_error(home, stub, server, "ann", as_="bob")
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.server.metrics_port}/metrics", timeout=5).read().decode()
    assert 'feed_grpc_requests_total{code="OK",method="GetHomeTimeline"}' in text
    assert 'feed_grpc_requests_total{code="PERMISSION_DENIED",method="GetHomeTimeline"}' in text
    assert 'feed_grpc_request_duration_seconds_bucket{code="OK",le="0.025",method="GetHomeTimeline"}' in text
    assert 'feed_profile_cache_total{result="hit"}' in text
