"""The stream refuses input it would lose, on the real stack
(docs/operations.md#failure-modes-the-streams-inputs-and-grants): records deleted before it read them
(a changelog topic given time retention, its unread records deleted as retention deletes them:
``deleteRecords`` moves the earliest offset exactly so), and a topic deleted and created again under
its checkpoint. One stream run makes the checkpoint; the refusals come before any Spark session, so
each costs a process start, not a stream start."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from feed_service.kafka.client_config import client_config
from feed_service.kafka.offsets import SOURCE_ROLES, watermarks
from feed_service.kafka.source_topics import SourceTopics
from feed_service.ops.provision import provision
from feed_service.security.roles import ADMIN
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from spark_jobs.stream.inputs import next_offsets, recorded_topic_ids

from tests.support.pipeline import StreamProcess, publish, running
from tests.support.isolation import isolated

ADMIN_TIMEOUT = 30.0


@pytest.fixture()
def pipeline(settings: Settings, unique: str) -> Settings:
    """Own topics and keyspace: this test deletes records and a topic."""
    return isolated(settings, unique)


def _admin(settings: Settings) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(settings, ADMIN) | {"log_level": 4})


def _retain_by_time_and_delete_up_to(settings: Settings, topic: str, partition: int, offset: int) -> None:
    """Give ``topic`` time retention next to compaction, then delete its records below ``offset`` on
    ``partition`` as the broker's retention would (Kafka deletes records only where the policy has ``delete``)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = _admin(settings)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact,delete", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(ADMIN_TIMEOUT)
    for future in admin.delete_records([TopicPartition(topic, partition, offset)],
                                       request_timeout=ADMIN_TIMEOUT).values():
        assert future.result(ADMIN_TIMEOUT).low_watermark == offset


def _recreate(settings: Settings, topic: str) -> None:
    """Delete ``topic``, wait until the broker forgot it, and provision it again (a new topic id)."""
    admin = _admin(settings)
    admin.delete_topics([topic], operation_timeout=ADMIN_TIMEOUT)[topic].result(ADMIN_TIMEOUT)
    deadline = time.monotonic() + ADMIN_TIMEOUT
    while topic in admin.list_topics(timeout=ADMIN_TIMEOUT).topics:
        assert time.monotonic() < deadline, f"{topic} still listed"
        time.sleep(0.2)
    provision(settings)


def _refusal(pipeline: Settings, checkpoint: Path, log_file: Path) -> str:
    """Start the stream on ``checkpoint``; it must end by itself with exit code 2: its log's text."""
    stream = StreamProcess(pipeline, checkpoint, log_file=log_file).start()
    try:
        code = stream.wait_exited(timeout=120)
    finally:
        stream.stop()
    text = log_file.read_text(errors="replace")
    assert code == 2, f"exit code {code}; log:\n{text[-4000:]}"
    return text


def test_the_stream_refuses_records_deleted_unread_and_a_recreated_topic(pipeline: Settings, tmp_path: Path) -> None:
    publish(pipeline, generate(users=20, events=150, seed=11, mean_following=4, prefix="in-"))
    checkpoint = tmp_path / "ckpt"
    with running(StreamProcess(pipeline, checkpoint, log_file=tmp_path / "run1.log")) as first:
        first.wait_caught_up()
    topics = [pipeline.topic(role) for role in SOURCE_ROLES]
    assert recorded_topic_ids(checkpoint) == SourceTopics(pipeline).topic_ids(topics)

    # Records written while the stream is stopped, then deleted before it reads them.
    tweets = pipeline.topic("tweets")
    publish(pipeline, [], [("tweets", b"unread")] * 5)
    committed = next_offsets(checkpoint)[tweets]
    high = watermarks(pipeline)[1][tweets]
    partition = next(p for p in high if high[p] > committed[p])
    _retain_by_time_and_delete_up_to(pipeline, tweets, int(partition), high[partition])
    text = _refusal(pipeline, checkpoint, tmp_path / "run2.log")
    refusal = next(line for line in text.splitlines() if line.startswith("feedctl stream: "))
    assert "records the stream had not read were deleted" in refusal
    assert f"{tweets}[{partition}] offsets {committed[partition]}..{high[partition] - 1}" in refusal
    assert "feedctl backfill" in refusal and "--checkpoint NEW" in refusal
    assert "SparkSession" not in text  # refused before any session
    assert next_offsets(checkpoint)[tweets] == committed  # the refusal left the checkpoint as it was

    # A topic deleted and created again under the checkpoint: refused by name, before its offsets.
    follows = pipeline.topic("follows")
    recorded = recorded_topic_ids(checkpoint)[follows]
    _recreate(pipeline, follows)
    text = _refusal(pipeline, checkpoint, tmp_path / "run3.log")
    refusal = next(line for line in text.splitlines() if line.startswith("feedctl stream: "))
    assert f"topic {follows} was deleted and created again" in refusal and recorded in refusal
    assert "feedctl backfill" in refusal
    assert recorded_topic_ids(checkpoint)[follows] == recorded
