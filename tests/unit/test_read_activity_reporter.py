"""The read service's read-activity reports without Kafka (docs/activity.md#read-activity): the
reporter's dedupe per interval and its bound, a produce that fails, and the hooks of the server's
home-timeline RPCs, with an injected produce function."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import grpc
import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.core.rows import Entry
from feed_service.kafka.read_activity import BadReport, ReadActivityProducer, decode_report, encode_report
from feed_service.server.activity import ReadReporter
from feed_service.server.config import ServerConfig
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.settings import Settings
from feed_service.store.memory import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Produced(list):
    """An injected produce function: (reader, decoded value) per call."""

    def __call__(self, reader_id: str, value: bytes) -> None:
        self.append((reader_id, json.loads(value)))


def reporter(produced: Produced, clock: Clock, **kw) -> ReadReporter:
    return ReadReporter(produced, interval_s=60, clock=clock, wall_ms=lambda: int(clock.now * 1000), **kw)


def test_one_record_per_reader_per_interval() -> None:
    produced, clock = Produced(), Clock()
    r = reporter(produced, clock)
    for _ in range(5):
        r.read("ann")
        r.read("bob")
    assert produced == [("ann", {"reader_id": "ann", "read_at": 1_000_000}),
                        ("bob", {"reader_id": "bob", "read_at": 1_000_000})]
    clock.now += 59.9
    r.read("ann")
    assert len(produced) == 2
    clock.now += 0.2  # the interval has passed: the next read is reported again, at its own time
    r.read("ann")
    r.read("ann")
    assert produced[2:] == [("ann", {"reader_id": "ann", "read_at": 1_060_100})]


def test_the_set_is_bounded_and_drops_the_oldest_report_first() -> None:
    produced, clock = Produced(), Clock()
    r = reporter(produced, clock, max_readers=3)
    for user in ("u1", "u2", "u3", "u4"):
        clock.now += 1
        r.read(user)
    assert len(r) == 3
    r.read("u2"), r.read("u3"), r.read("u4")  # still remembered: nothing new
    assert [reader for reader, _ in produced] == ["u1", "u2", "u3", "u4"]
    r.read("u1")  # the oldest went first: reported again, and u2, now the oldest, leaves
    assert [reader for reader, _ in produced][-1] == "u1" and len(r) == 3
    for n in range(1000):
        r.read(f"x{n}")
    assert len(r) == 3


def test_a_refused_record_is_counted_and_the_next_read_tries_again() -> None:
    calls: list[str] = []
    failures: list[int] = []

    def produce(reader_id: str, value: bytes) -> None:
        calls.append(reader_id)
        if len(calls) == 1:
            raise BufferError("Local: Queue full")

    r = ReadReporter(produce, interval_s=60, on_failure=lambda: failures.append(1))
    r.read("ann")  # never raises
    assert failures == [1] and len(r) == 0
    r.read("ann")
    r.read("ann")
    assert calls == ["ann", "ann"] and failures == [1]


def test_invalid_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        ReadReporter(Produced(), interval_s=0)
    with pytest.raises(ValueError):
        ReadReporter(Produced(), interval_s=1, max_readers=0)


def test_the_record_value_is_compact_json() -> None:
    assert json.loads(encode_report("ann", 5)) == {"reader_id": "ann", "read_at": 5}
    assert decode_report(b"ann", encode_report("ann", 5)) == ("ann", 5)
    assert decode_report(None, encode_report("ann", 5)) == ("ann", 5)


@pytest.mark.parametrize("key, value, reason", [
    (b"ann", None, "no_value"),
    (b"ann", b"{not json", "bad_json"),
    (b"ann", b"\xff\xfe", "bad_json"),
    (b"ann", b'["ann", 5]', "not_object"),
    (b"ann", b'{"read_at": 5}', "bad_reader_id"),
    (b"", b'{"reader_id": "", "read_at": 5}', "bad_reader_id"),
    (b"ann", b'{"reader_id": 7, "read_at": 5}', "bad_reader_id"),
    (b"ann", b'{"reader_id": "ann"}', "bad_read_at"),
    (b"ann", b'{"reader_id": "ann", "read_at": "5"}', "bad_read_at"),
    (b"ann", b'{"reader_id": "ann", "read_at": 5.0}', "bad_read_at"),
    (b"ann", b'{"reader_id": "ann", "read_at": false}', "bad_read_at"),
    (b"ann", b'{"reader_id": "ann", "read_at": -1}', "bad_read_at"),
    (b"bob", b'{"reader_id": "ann", "read_at": 5}', "key_mismatch"),
])
def test_records_that_are_not_reports_are_named(key: bytes | None, value: bytes | None, reason: str) -> None:
    with pytest.raises(BadReport) as bad:
        decode_report(key, value)
    assert bad.value.reason == reason


# -- the server's hooks ------------------------------------------------------------------------------

def config(settings: Settings = Settings(), **kw) -> ServerConfig:
    return ServerConfig(**{"auth_secret": TEST_SECRET, "metrics_port": None, "watch_poll_s": 0.05,
                           "shutdown_grace_s": 0.5, "change_feed": False, "settings": settings, **kw})


def store() -> MemoryStore:
    s = MemoryStore()
    for n in range(30):
        s.add_entry("ann", Entry(f"t{n:03d}", "bob", 1_000 + n, 1, f"text {n}", 1))
    return s


def metric(server: ServerThread, name: str, labels: str = "") -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.server.metrics_port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + labels + " "):
            return float(line.split()[-1])
    return 0.0


def test_home_reads_and_watch_starts_are_reported_once_per_reader() -> None:
    produced = Produced()
    before = int(time.time() * 1000)
    with ServerThread(config(metrics_port=0), store=store(), report_reads=produced) as server:
        stub = server.stub()
        first = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann", page_size=5),
                                     metadata=server.auth("ann"), timeout=5)
        stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann", page_size=5, page_token=first.next_page_token),
                             metadata=server.auth("ann"), timeout=5)
        stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("svc", "service"),
                             timeout=5)
        watch = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id="cat"), metadata=server.auth("cat"),
                                       timeout=5)
        deadline = time.monotonic() + 5
        while len(produced) < 2 and time.monotonic() < deadline:  # the watch has started (it sends nothing yet)
            time.sleep(0.01)
        watch.cancel()
        # not home reads, or not admitted: nothing reported
        stub.GetUserTimeline(pb.GetUserTimelineRequest(user_id="dan"), metadata=server.auth("eve"), timeout=5)
        with pytest.raises(grpc.RpcError) as denied:
            stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("mallory"), timeout=5)
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert [reader for reader, _ in produced] == ["ann", "cat"]
        assert all(before <= value["read_at"] <= int(time.time() * 1000) and value["reader_id"] == reader
                   for reader, value in produced)
        assert metric(server, "feed_read_report_readers") == 2


def test_no_reporter_when_nobody_is_ever_inactive() -> None:
    produced = Produced()
    with ServerThread(config(Settings(inactive_after_s=0)), store=store(), report_reads=produced) as server:
        server.stub().GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"), timeout=5)
        assert server.server.servicer.read_activity is None
    assert produced == []


def test_a_failing_produce_never_fails_a_read_and_is_counted() -> None:
    def produce(reader_id: str, value: bytes) -> None:
        raise RuntimeError("broker on fire")

    with ServerThread(config(metrics_port=0), store=store(), report_reads=produce) as server:
        page = server.stub().GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"),
                                             timeout=5)
        assert len(page.entries) == 20
        assert metric(server, "feed_read_reports_total", '{result="failed"}') == 1


def test_kafka_reports_to_an_unreachable_broker_fail_quietly_and_close_at_once() -> None:
    """No broker listens: the read path only enqueues, and closing does not wait for one."""
    failures = threading.Semaphore(0)
    reports = ReadActivityProducer(Settings(kafka_bootstrap="127.0.0.1:1"), on_failure=failures.release)
    r = ReadReporter(reports.produce, interval_s=60)
    started = time.perf_counter()
    r.read("ann")
    assert time.perf_counter() - started < 0.05
    time.sleep(0.5)  # the client learns that every broker is down
    started = time.perf_counter()
    reports.close(timeout=5)
    assert time.perf_counter() - started < 1.0
    assert failures.acquire(timeout=5)  # the record still queued is dropped and counted
