"""Read activity on the real stack (docs/activity.md#read-activity): a read server against the test
stack's Kafka and Cassandra reports each reader once per interval to the ``reads`` topic, and the
stream driver's :class:`ReadActivityConsumer` returns them, commits, and skips what is not a report."""

from __future__ import annotations

import time
from dataclasses import replace

from feed_service.api import timeline_pb2 as pb
from feed_service.kafka.client_config import client_config
from feed_service.kafka.offsets import watermarks
from feed_service.kafka.read_activity import ReadActivityConsumer, encode_report
from feed_service.kafka.topics import ensure_topics
from feed_service.security.roles import ADMIN
from feed_service.server.config import ServerConfig
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.settings import Settings


def _records(settings: Settings) -> int:
    """Records the ``reads`` topic holds (it starts empty: one topic per test)."""
    _, highs = watermarks(settings, ("reads",))
    return sum(highs[settings.topic("reads")].values())


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _produce_raw(settings: Settings, key: bytes, value: bytes) -> None:
    from confluent_kafka import Producer

    producer = Producer(client_config(settings, ADMIN))
    producer.produce(settings.topic("reads"), key=key, value=value)
    assert producer.flush(30) == 0


def test_reads_are_reported_once_per_reader_and_consumed(settings: Settings, unique: str) -> None:
    isolated = replace(settings.with_topic_suffix(f".{unique}"), read_report_interval_s=3600)
    ensure_topics(isolated, [isolated.topics["reads"]])
    ann, cat = f"ann-{unique}", f"cat-{unique}"
    config = ServerConfig(auth_secret=TEST_SECRET, metrics_port=None, change_feed=False, shutdown_grace_s=1.0,
                          settings=isolated)
    before = int(time.time() * 1000)
    with ServerThread(config) as server:
        _wait(server.server.store_connected)
        delivered = server.server.metrics.read_reports.labels("delivered")
        stub = server.stub()
        for _ in range(2):
            page = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=ann), metadata=server.auth(ann), timeout=10)
            assert list(page.entries) == []
        watch = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=cat), metadata=server.auth(cat), timeout=30)
        _wait(lambda: delivered._value.get() >= 2)
        watch.cancel()
        stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=cat), metadata=server.auth(cat), timeout=10)
        time.sleep(0.5)  # a record of that read would be delivered by now (linger 50 ms)
        assert delivered._value.get() == 2
        assert server.server.metrics.read_reports.labels("failed")._value.get() == 0
    after = int(time.time() * 1000)
    assert _records(isolated) == 2

    with ReadActivityConsumer(isolated) as consumer:
        seen = consumer.poll_available(timeout=30)
        assert consumer.caught_up
        assert set(seen) == {ann, cat} and all(before <= t <= after for t in seen.values())
        assert consumer.poll_available(timeout=5) == {}  # nothing new since the last call
        consumer.commit()

    # a later report and a record that is not one: the group goes on from its commit
    _produce_raw(isolated, ann.encode(), encode_report(ann, after + 1))
    _produce_raw(isolated, ann.encode(), encode_report(ann, after - 1))  # older: the newest wins
    _produce_raw(isolated, b"junk", b"{not json")
    with ReadActivityConsumer(isolated) as consumer:
        assert consumer.poll_available(timeout=30) == {ann: after + 1}
        assert consumer.caught_up and consumer.skipped == 1 and consumer.skipped_by_reason == {"bad_json": 1}
        # not committed: a new consumer of the group reads the same records again
    with ReadActivityConsumer(isolated) as consumer:
        assert consumer.poll_available(timeout=30) == {ann: after + 1}
        consumer.commit()
    with ReadActivityConsumer(isolated) as consumer:
        assert consumer.poll_available(timeout=10) == {} and consumer.caught_up


def test_no_report_when_nobody_is_ever_inactive(settings: Settings, unique: str) -> None:
    isolated = replace(settings.with_topic_suffix(f".{unique}"), inactive_after_s=0)
    ensure_topics(isolated, [isolated.topics["reads"]])
    config = ServerConfig(auth_secret=TEST_SECRET, metrics_port=None, change_feed=False, shutdown_grace_s=1.0,
                          settings=isolated)
    with ServerThread(config) as server:
        _wait(server.server.store_connected)
        user = f"ann-{unique}"
        server.stub().GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=user), metadata=server.auth(user), timeout=10)
        assert server.server.servicer.read_activity is None
    time.sleep(0.5)
    assert _records(isolated) == 0
