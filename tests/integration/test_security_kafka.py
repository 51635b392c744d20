"""Kafka on the secured stack (docs/security.md): TLS with SCRAM-SHA-512 logins on the client port, and
each role allowed only what its ACLs say. Every refusal is checked together with its consequence: the
topic the refused client aimed at is unchanged.

Runs on ``secure_stack_config`` (the cluster topology, or one node with FEED_TEST_SECURE_TOPOLOGY=single).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from feed_service.core.rows import Entry
from feed_service.core.view_changes import TimelineChange
from feed_service.errors import DeliveryFailed, PipelineError
from feed_service.kafka.acls import apply_acls
from feed_service.kafka.client_config import client_config, spark_kafka_options
from feed_service.kafka.offsets import watermarks
from feed_service.kafka.producer import EventProducer
from feed_service.kafka.stream_publisher import publish_view_changes
from feed_service.kafka.topics import ensure_topics
from feed_service.kafka.view_change_consumer import ViewChangeConsumer
from feed_service.security.roles import ADMIN, CONSUMER_GROUP_PREFIXES, PRODUCER, ROLES, SERVER, STREAM
from feed_service.security.secrets import ensure_credentials
from feed_service.settings import Settings
from feed_service.stack.config import StackConfig

pytestmark = pytest.mark.integration

#: Seconds a refused producer keeps a record queued before reporting it failed (the default is 60 s).
SHORT_TIMEOUT_MS = 4000


@pytest.fixture(scope="module")
def secured(secure_stack_config: StackConfig) -> Settings:
    """The secured stack's settings with topics of this module's own, provisioned as the admin (topics and
    ACLs); no role chosen, so each client takes its own."""
    import uuid

    settings = secure_stack_config.settings(keyspace="feed_sec_kafka").with_topic_suffix(f".sec.{uuid.uuid4().hex[:8]}")
    _provision_kafka(settings)
    return settings


def _provision_kafka(settings: Settings) -> None:
    """What ``feedctl provision`` does on Kafka, as the admin: the topics and each role's ACLs. Kafka only:
    the module never touches Cassandra, and a keyspace's schema on the ring costs ~20 s of schema agreement."""
    admin = settings.as_role(ADMIN)
    ensure_topics(admin, admin.topics.values())
    apply_acls(admin)


def _ends(settings: Settings, role: str) -> dict[int, int]:
    """Partition -> high watermark of the topic of ``role``, read as the admin."""
    high = watermarks(settings.as_role(ADMIN), (role,))[1][settings.topic(role)]
    return {int(p): end for p, end in high.items()}


def _records(settings: Settings, role: str) -> int:
    return sum(_ends(settings, role).values())


def _read_all(settings: Settings, role: str, as_role: str, *, expect: int, timeout: float = 30) -> tuple[list[Any], list[Any]]:
    """(messages, errors) of the topic of ``role`` read from the start by a consumer logged in as
    ``as_role`` (subscribed: a refused topic is reported as an error; no offsets committed)."""
    from confluent_kafka import Consumer

    topic = settings.topic(role)
    # a group the role may use, so that only the topic can be what is refused
    group = f"{CONSUMER_GROUP_PREFIXES[as_role][0]}security-test-{time.time_ns()}"
    consumer = Consumer(client_config(settings.as_role(as_role), as_role) | {
        "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 0})
    consumer.subscribe([topic])
    messages: list[Any] = []
    errors: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(messages) < expect and not errors and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=0.5):
                (errors if m.error() is not None else messages).append(m.error() or m)
        return messages, errors
    finally:
        consumer.close()


@pytest.fixture()
def wrong_password(secured: Settings, tmp_path: Path) -> Settings:
    """The settings with a credentials folder of the right names but other passwords."""
    ensure_credentials(tmp_path / "credentials", ROLES, ("kafka",))
    return secured.replace(credentials_dir=str(tmp_path / "credentials"))


def test_a_wrong_scram_password_is_refused_and_nothing_is_written(wrong_password: Settings, secured: Settings,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    before = _records(secured, "tweets")
    producer = EventProducer(wrong_password, config={"message.timeout.ms": SHORT_TIMEOUT_MS})
    with caplog.at_level(logging.WARNING, logger="feed_service.kafka.producer"):
        producer.publish_tweet("mallory", "let me in", profile_version=1)
        with pytest.raises(DeliveryFailed):
            producer.close(timeout=SHORT_TIMEOUT_MS / 1000 + 10)
    assert "Authentication failed" in caplog.text or "SASL authentication error" in caplog.text, caplog.text
    assert _records(secured, "tweets") == before


def test_a_plaintext_client_on_the_tls_port_gets_nothing(secured: Settings) -> None:
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    plain = {"bootstrap.servers": secured.kafka_bootstrap, "log_level": 0}
    with pytest.raises(KafkaException):
        AdminClient(plain).list_topics(timeout=5)
    before = _records(secured, "tweets")
    producer = Producer(plain | {"message.timeout.ms": SHORT_TIMEOUT_MS})
    producer.produce(secured.topic("tweets"), b"plain")
    assert producer.flush(SHORT_TIMEOUT_MS / 1000 + 10) == 0  # reported failed, not delivered
    assert _records(secured, "tweets") == before


def test_the_producer_role_may_not_write_the_view_change_topic(secured: Settings) -> None:
    from confluent_kafka import KafkaError, Producer

    reports: list[Any] = []
    producer = Producer(client_config(secured.as_role(PRODUCER), PRODUCER) | {
        "message.timeout.ms": SHORT_TIMEOUT_MS, "log_level": 0})
    producer.produce(secured.topic("timeline_changes"), b"forged change", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(SHORT_TIMEOUT_MS / 1000 + 10)
    assert [e.code() for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert _records(secured, "timeline_changes") == 0


def test_the_server_role_reads_view_changes_but_not_the_changelogs(secured: Settings) -> None:
    from confluent_kafka import KafkaError

    with EventProducer(secured) as producer:  # the producer role
        producer.publish_profile("ann", "Ann")
    changelog_before = _records(secured, "profiles")
    assert changelog_before >= 1
    server = secured.as_role(SERVER)
    with pytest.raises(PipelineError, match="TOPIC_AUTHORIZATION_FAILED"):
        watermarks(server, ("profiles",))
    messages, errors = _read_all(secured, "profiles", SERVER, expect=1, timeout=15)
    assert messages == [] and [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert _records(secured, "profiles") == changelog_before

    consumer = ViewChangeConsumer(secured)  # the server role by default
    try:
        consumer.open()
        change = TimelineChange("insert", Entry("t1", "ann", 10, 2, "hi", 1), ("bob",), 5, 9)
        assert publish_view_changes(secured, [change]) == 1  # the stream role writes them
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = consumer.poll(10, 0.5).changes
        assert [c.change for c in got] == [change]
    finally:
        consumer.close()


def test_tweets_go_from_the_producer_role_to_the_stream_role(secured: Settings) -> None:
    before = _records(secured, "tweets")
    with EventProducer(secured) as producer:
        producer.publish_profile("cat", "Cat")
        sent = {producer.publish_tweet("cat", f"tweet {i}").tweet_id for i in range(5)}
    messages, errors = _read_all(secured, "tweets", STREAM, expect=before + 5)
    assert errors == []

    assert sent <= {json.loads(m.value())["tweet_id"] for m in messages}
    assert _records(secured, "tweets") == before + 5


@pytest.fixture(scope="module")
def spark(secure_stack_config: StackConfig) -> Iterator[Any]:
    from spark_jobs.runtime.session import build_session

    session = build_session("feed-security-tests", cache_dir=secure_stack_config.cache_dir, master="local[1]")
    yield session
    session.stop()


def test_spark_reads_as_its_role_and_hides_the_login_in_plans(secured: Settings, spark: Any) -> None:
    from feed_service.security.roles import BACKFILL
    from feed_service.security.secrets import login

    with EventProducer(secured) as producer:
        producer.publish_profile("dan", "Dan")
    options = spark_kafka_options(secured, BACKFILL)
    frame = (spark.read.format("kafka").options(**options).option("subscribe", secured.topic("profiles"))
             .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    assert frame.count() == _records(secured, "profiles") >= 1
    _, password = login(secured.credentials_dir, BACKFILL, "kafka")
    streaming = (spark.readStream.format("kafka").options(**options).option("subscribe", secured.topic("profiles"))
                 .load())
    plans = [frame._jdf.queryExecution().toString(), streaming._jdf.queryExecution().toString()]
    assert all(password not in plan for plan in plans)
    # what Spark shows of a source's or sink's options (plans, the UI's SQL tab, event logs)
    jvm = spark._jvm
    shown = spark._jsparkSession.sessionState().conf().redactOptions(
        jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(dict(options))).toString()
    assert password not in shown and "kafka.sasl.jaas.config" in shown and secured.kafka_bootstrap in shown
    # and the server role may not: Spark's batch read fails on the authorization error
    refused = (spark.read.format("kafka").options(**spark_kafka_options(secured.as_role(SERVER), SERVER))
               .option("subscribe", secured.topic("profiles")).load())
    with pytest.raises(Exception, match="(?i)authoriz"):
        refused.count()
