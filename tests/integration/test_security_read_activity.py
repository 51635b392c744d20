"""The read-activity topic on the secured stack (docs/security.md, docs/activity.md#read-activity): the
server role writes reports, the stream role reads them in its own group and commits, and the
producer role may not forge any (the topic stays unchanged).

Runs on ``secure_stack_config`` (the cluster topology, or one node with FEED_TEST_SECURE_TOPOLOGY=single).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from feed_service.kafka.acls import apply_acls
from feed_service.kafka.client_config import client_config
from feed_service.kafka.offsets import watermarks
from feed_service.kafka.read_activity import ReadActivityConsumer, ReadActivityProducer, encode_report
from feed_service.kafka.topics import ensure_topics
from feed_service.security.roles import ADMIN, PRODUCER
from feed_service.settings import Settings
from feed_service.stack.config import StackConfig

#: Seconds a refused producer keeps a record queued before reporting it failed (the default is 60 s).
SHORT_TIMEOUT_MS = 4000


@pytest.fixture(scope="module")
def secured(secure_stack_config: StackConfig) -> Settings:
    """The secured stack's settings with topics of this module's own, provisioned as the admin."""
    settings = secure_stack_config.settings(keyspace="feed_sec_reads").with_topic_suffix(f".sec.{uuid.uuid4().hex[:8]}")
    _provision_kafka(settings)
    return settings


def _provision_kafka(settings: Settings) -> None:
    """What ``feedctl provision`` does on Kafka, as the admin: the topics and each role's ACLs. Kafka only:
    the module never touches Cassandra, and a keyspace's schema on the ring costs ~20 s of schema agreement."""
    admin = settings.as_role(ADMIN)
    ensure_topics(admin, admin.topics.values())
    apply_acls(admin)


def _records(settings: Settings) -> int:
    high = watermarks(settings.as_role(ADMIN), ("reads",))[1][settings.topic("reads")]
    return sum(high.values())


def test_the_server_reports_and_the_stream_reads_in_its_group(secured: Settings) -> None:
    delivered = threading.Semaphore(0)
    failed: list[int] = []
    reports = ReadActivityProducer(secured.as_role("server"), on_delivered=delivered.release,
                                   on_failure=lambda: failed.append(1))
    try:
        reports.produce("ann", encode_report("ann", 1_000))
        reports.produce("bob", encode_report("bob", 2_000))
        assert delivered.acquire(timeout=30) and delivered.acquire(timeout=30)
    finally:
        reports.close(5)
    assert failed == [] and _records(secured) == 2
    with ReadActivityConsumer(secured) as consumer:  # the stream role by default
        assert consumer.poll_available(timeout=30) == {"ann": 1_000, "bob": 2_000}
        consumer.commit()  # READ on its feed-read-activity group
    with ReadActivityConsumer(secured) as consumer:
        assert consumer.poll_available(timeout=15) == {} and consumer.caught_up


def test_the_producer_role_may_not_forge_reports(secured: Settings) -> None:
    from confluent_kafka import KafkaError, Producer

    before = _records(secured)
    errors: list[Any] = []
    producer = Producer(client_config(secured.as_role(PRODUCER), PRODUCER) | {
        "message.timeout.ms": SHORT_TIMEOUT_MS, "log_level": 0})
    producer.produce(secured.topic("reads"), key=b"mallory", value=encode_report("mallory", 1),
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(SHORT_TIMEOUT_MS / 1000 + 10)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert _records(secured) == before
