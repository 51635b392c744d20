"""The read service's transport and abuse limits on a real in-process server (docs/api.md#tls,
docs/api.md#limits): TLS refuses plaintext, mutual TLS refuses a missing or foreign client
certificate, health shares the transport, the rate limit answers RESOURCE_EXHAUSTED with a
RetryInfo, the watch cap refuses the next stream while the open ones go on, and gRPC's own size caps.

Certificates come from :class:`feed_service.security.pki.LocalCA` in a temporary folder (one CA for
the server and its clients, another one for an intruder).
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc as pb_grpc
from feed_service.core.rows import Entry
from feed_service.errors import ConfigError
from feed_service.security.pki import LocalCA
from feed_service.server.client_channel import ClientTLS, open_channel
from feed_service.server.config import ServerConfig, load_config
from feed_service.server.rate_limit import RateLimiter, peer_host
from feed_service.server.testing import TEST_SECRET, ServerThread, tls_options
from feed_service.store.memory import MemoryStore

Code = grpc.StatusCode


def config(**kw) -> ServerConfig:
    base = dict(auth_secret=TEST_SECRET, metrics_port=None, watch_poll_s=0.05, shutdown_grace_s=0.5,
                change_feed=False)
    return ServerConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """The server's CA with a server and a client certificate; a foreign CA with a client certificate."""
    root = tmp_path_factory.mktemp("pki")
    ca, other = LocalCA(root / "ca"), LocalCA(root / "other")
    ca.ensure()
    other.ensure()
    server = ca.issue("grpc-server", ips=("127.0.0.1",), dns=("localhost",), server=True, client=False)
    client = ca.issue("svc-timeline-api", server=False, client=True)
    intruder = other.issue("svc-timeline-api", server=False, client=True)  # same name, wrong CA
    return {"ca": ca.ca_cert, "server_cert": server.cert, "server_key": server.key,
            "client_cert": client.cert, "client_key": client.key,
            "intruder_cert": intruder.cert, "intruder_key": intruder.key, "other_ca": other.ca_cert}


@pytest.fixture(scope="module")
def store() -> MemoryStore:
    s = MemoryStore()
    s.add_entry("ann", Entry("t1", "bob", 1_000, 1, "hello", 1))
    return s


def _tls(pki: dict[str, Path], mutual: bool) -> dict[str, str]:
    env = {"FEED_GRPC_TLS_CERT_FILE": str(pki["server_cert"]), "FEED_GRPC_TLS_KEY_FILE": str(pki["server_key"])}
    if mutual:
        env["FEED_GRPC_CLIENT_CA_FILE"] = str(pki["ca"])
    return tls_options(env)


def _home(channel, server: ServerThread, user: str = "ann", timeout: float = 5) -> pb.GetHomeTimelineResponse:
    return pb_grpc.TimelineServiceStub(channel).GetHomeTimeline(
        pb.GetHomeTimelineRequest(user_id=user), metadata=server.auth(user), timeout=timeout)


def _refused(channel, server: ServerThread) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        _home(channel, server, timeout=3)
    return info.value


def test_tls_serves_a_client_that_trusts_its_ca_and_refuses_plaintext(pki, store) -> None:
    with ServerThread(config(**_tls(pki, mutual=False)), store=store, client=ClientTLS(str(pki["ca"]))) as server:
        assert [e.tweet_id for e in _home(server.channel(), server).entries] == ["t1"]
        health = health_pb2_grpc.HealthStub(server.channel())  # health shares the port and its TLS
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        with grpc.insecure_channel(server.address) as plain:
            assert _refused(plain, server).code() == Code.UNAVAILABLE
        with open_channel(server.address, ca_file=str(pki["other_ca"]), cert_file="", key_file="") as foreign:
            assert _refused(foreign, server).code() == Code.UNAVAILABLE  # the server's chain is not trusted


def test_mutual_tls_requires_a_client_certificate_of_its_ca(pki, store) -> None:
    right = ClientTLS(str(pki["ca"]), str(pki["client_cert"]), str(pki["client_key"]))
    with ServerThread(config(**_tls(pki, mutual=True)), store=store, client=right) as server:
        assert [e.tweet_id for e in _home(server.channel(), server).entries] == ["t1"]
        with open_channel(server.address, ca_file=str(pki["ca"]), cert_file="", key_file="") as anonymous:
            assert _refused(anonymous, server).code() == Code.UNAVAILABLE
        with open_channel(server.address, ca_file=str(pki["ca"]), cert_file=str(pki["intruder_cert"]),
                          key_file=str(pki["intruder_key"])) as intruder:
            assert _refused(intruder, server).code() == Code.UNAVAILABLE
        with grpc.insecure_channel(server.address) as plain:
            assert _refused(plain, server).code() == Code.UNAVAILABLE
        health = health_pb2_grpc.HealthStub(server.channel())
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING


def test_open_channel_reads_the_environment(pki, store, monkeypatch) -> None:
    monkeypatch.setenv("FEED_GRPC_CA_FILE", str(pki["ca"]))
    monkeypatch.setenv("FEED_GRPC_CLIENT_CERT_FILE", str(pki["client_cert"]))
    monkeypatch.setenv("FEED_GRPC_CLIENT_KEY_FILE", str(pki["client_key"]))
    with ServerThread(config(**_tls(pki, mutual=True)), store=store) as server:  # client files: the env's
        assert _home(server.channel(), server).entries
        with open_channel(server.address) as channel:
            assert _home(channel, server).entries
    with ServerThread(config(), store=store) as plain:  # a plaintext server: plaintext whatever the env says
        assert _home(plain.channel(), plain).entries


def test_tls_configuration_errors(pki, tmp_path) -> None:
    cert, key = str(pki["server_cert"]), str(pki["server_key"])
    with pytest.raises(ConfigError, match="both tls_cert_file and tls_key_file"):
        config(tls_cert_file=cert).validated()
    with pytest.raises(ConfigError, match="needs server TLS"):
        config(client_ca_file=str(pki["ca"])).validated()
    with pytest.raises(ConfigError, match="tls_key_file: cannot read"):
        config(tls_cert_file=cert, tls_key_file=str(tmp_path / "missing.key")).validated()
    loaded = load_config(env={"FEED_GRPC_TLS_CERT_FILE": cert, "FEED_GRPC_TLS_KEY_FILE": key,
                              "FEED_GRPC_CLIENT_CA_FILE": str(pki["ca"]), "FEED_AUTH_SECRET": TEST_SECRET.decode()})
    assert loaded.validated().tls and loaded.client_ca_file == str(pki["ca"])
    with pytest.raises(ConfigError, match="needs its key"):
        ClientTLS(str(pki["ca"]), cert, "").credentials()


# -- abuse limits ---------------------------------------------------------------------------------


def _retry_delay(error: grpc.RpcError) -> float:
    status = rpc_status.from_call(error)
    assert status is not None and status.code == Code.RESOURCE_EXHAUSTED.value[0]
    infos = [d for d in status.details if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR)]
    assert len(infos) == 1
    info = error_details_pb2.RetryInfo()
    infos[0].Unpack(info)
    return info.retry_delay.ToTimedelta().total_seconds()


def test_rate_limit_is_resource_exhausted_with_retry_info(store) -> None:
    with ServerThread(config(rate_limit_per_s=5, rate_limit_burst=3), store=store) as server:
        stub = server.stub()
        for _ in range(3):  # the burst
            stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"), timeout=5)
        with pytest.raises(grpc.RpcError) as info:
            stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"), timeout=5)
        assert info.value.code() == Code.RESOURCE_EXHAUSTED and "rate limit" in info.value.details()
        delay = _retry_delay(info.value)
        assert 0 < delay <= 0.2 + 1e-6  # one call's interval at 5/s
        # another user is not limited by ann's calls; a service token is not limited by default
        stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="bob"), metadata=server.auth("bob"), timeout=5)
        for _ in range(10):
            stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("api", "service"),
                                 timeout=5)
        time.sleep(delay + 0.01)  # waiting as told is enough
        stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"), timeout=5)
        # calls without a valid token count against the peer's address: UNAUTHENTICATED, then limited
        codes = []
        for _ in range(6):
            with pytest.raises(grpc.RpcError) as bad:
                stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"),
                                     metadata=[("authorization", "Bearer forged")], timeout=5)
            codes.append(bad.value.code())
        assert codes[:3] == [Code.UNAUTHENTICATED] * 3 and codes[-1] == Code.RESOURCE_EXHAUSTED


def test_service_rate_limit_keys_on_the_client_certificate(pki, store) -> None:
    right = ClientTLS(str(pki["ca"]), str(pki["client_cert"]), str(pki["client_key"]))
    with ServerThread(config(rate_limit_service_per_s=2, rate_limit_burst=2, **_tls(pki, mutual=True)),
                      store=store, client=right) as server:
        stub = server.stub()
        request = pb.GetHomeTimelineRequest(user_id="ann")
        stub.GetHomeTimeline(request, metadata=server.auth("api-1", "service"), timeout=5)
        stub.GetHomeTimeline(request, metadata=server.auth("api-2", "service"), timeout=5)
        with pytest.raises(grpc.RpcError) as info:  # a third token, the same certificate: one principal
            stub.GetHomeTimeline(request, metadata=server.auth("api-3", "service"), timeout=5)
        assert info.value.code() == Code.RESOURCE_EXHAUSTED and _retry_delay(info.value) > 0


def test_rate_limiter_allows_the_burst_then_the_rate() -> None:
    clock = [100.0]
    limiter = RateLimiter(10, 5, now=lambda: clock[0])
    assert [limiter.acquire("k") for _ in range(5)] == [0.0] * 5
    wait = limiter.acquire("k")
    assert wait == pytest.approx(0.1)
    clock[0] += wait
    assert limiter.acquire("k") == 0.0 and limiter.acquire("k") > 0
    clock[0] += 10  # idle: the whole burst again
    assert [limiter.acquire("k") for _ in range(5)] == [0.0] * 5
    for n in range(5000):  # idle principals are pruned as the table grows
        clock[0] += 0.01
        limiter.acquire(n)
    assert len(limiter) < 2100
    assert peer_host("ipv4:10.0.0.1:5000") == "ipv4:10.0.0.1" and peer_host("ipv6:[::1]:80") == "ipv6:[::1]"


def _wait_open(server: ServerThread, user: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while server.server.servicer.watch.open.get(user, 0) != count:
        assert time.monotonic() < deadline, f"{user} has not {count} open watches"
        time.sleep(0.02)


def test_watch_cap_refuses_the_next_stream_and_the_open_ones_go_on() -> None:
    store = MemoryStore()
    with ServerThread(config(max_watches_per_user=2), store=store) as server:
        stub = server.stub()
        request = pb.WatchHomeTimelineRequest(user_id="ann")
        streams = [stub.WatchHomeTimeline(request, metadata=server.auth("ann"), timeout=30) for _ in range(2)]
        _wait_open(server, "ann", 2)
        time.sleep(0.3)  # past the streams' reads of their head
        with pytest.raises(grpc.RpcError) as info:
            next(stub.WatchHomeTimeline(request, metadata=server.auth("ann"), timeout=5))
        assert info.value.code() == Code.RESOURCE_EXHAUSTED
        bob = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id="bob"), metadata=server.auth("bob"), timeout=30)
        store.add_entry("ann", Entry("t9", "bob", 9_000, 1, "new", 1))
        for stream in streams:  # the open ones still receive
            assert [e.tweet_id for e in next(stream).entries] == ["t9"]
        streams[0].cancel()
        _wait_open(server, "ann", 1)  # the cancelled one is released
        third = stub.WatchHomeTimeline(request, metadata=server.auth("ann"), timeout=30)
        _wait_open(server, "ann", 2)
        time.sleep(0.3)  # past the new stream's read of its head: what follows is news to it
        store.add_entry("ann", Entry("t10", "bob", 10_000, 1, "newer", 1))
        assert [e.tweet_id for e in next(third).entries] == ["t10"]
        for stream in (streams[1], third, bob):
            stream.cancel()


def test_request_and_metadata_size_caps(store) -> None:
    with ServerThread(config(max_request_bytes=2048, max_metadata_bytes=4096), store=store) as server:
        call = server.channel().unary_unary("/feed.v1.TimelineService/GetHomeTimeline")
        token = server.auth("ann")
        big = pb.GetHomeTimelineRequest(user_id="ann", page_token="x" * 4000).SerializeToString()
        with pytest.raises(grpc.RpcError) as info:
            call(big, metadata=token, timeout=5)
        assert info.value.code() == Code.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.RpcError) as info:
            call(b"", metadata=token + [("x-padding", "p" * 5000)], timeout=5)
        assert info.value.code() == Code.RESOURCE_EXHAUSTED
        call(pb.GetHomeTimelineRequest(user_id="ann").SerializeToString(), metadata=token, timeout=5)
