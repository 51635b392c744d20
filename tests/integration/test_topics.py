"""Topic provisioning against the real broker: idempotent creation and the drift report."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from feed_service.cli.main import main as feedctl
from feed_service.settings import Settings, TopicSpec
from feed_service.kafka.client_config import client_config
from feed_service.kafka.topics import describe_topics, ensure_topics
from feed_service.security.roles import ADMIN


def _specs(settings: Settings, unique: str) -> list[TopicSpec]:
    return [dataclasses.replace(s, name=f"{s.name}.{unique}") for s in settings.topics.values()]


def _write(specs: list[TopicSpec], path: Path) -> Path:
    path.write_text(json.dumps({"topics": {s.role: {"name": s.name, "partitions": s.partitions,
                                                    "replication_factor": s.replication_factor,
                                                    "config": s.config} for s in specs}}))
    return path


def _wait_visible(settings: Settings, spec: TopicSpec, seconds: float = 30.0) -> None:
    """Wait until broker metadata lists a just-created topic (it can lag the create call briefly)."""
    deadline = time.monotonic() + seconds
    while describe_topics(settings, [spec])[0].missing:
        assert time.monotonic() < deadline, f"{spec.name} not visible after {seconds}s"
        time.sleep(0.2)


def test_ensure_topics_is_idempotent(settings: Settings, unique: str) -> None:
    specs = _specs(settings, unique)
    first = ensure_topics(settings, specs)
    assert [r.created for r in first] == [True] * len(specs)
    again = ensure_topics(settings, specs)
    assert [(r.created, r.drift, r.fixed) for r in again] == [(False, [], [])] * len(specs)
    described = describe_topics(settings, specs)
    assert all(not r.drift for r in described)
    assert [(r.partitions, r.replication_factor) for r in described] == [(s.partitions, s.replication_factor)
                                                                         for s in specs]


def test_drift_is_reported_and_configs_are_realigned(settings: Settings, unique: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    specs = _specs(settings, unique)
    tweets = specs[0]
    assert tweets.config["cleanup.policy"] == "compact"
    # someone made the topic by hand: wrong partition count and no compaction
    by_hand = dataclasses.replace(tweets, partitions=tweets.partitions + 2, config={"cleanup.policy": "delete"})
    ensure_topics(settings, [by_hand])
    _wait_visible(settings, by_hand)
    config = _write(specs, tmp_path / "topics.json")
    base = ["--bootstrap", settings.kafka_bootstrap, "--config", str(config)]

    assert feedctl(["topics", "describe", *base]) == 1  # tweets drift, the rest missing
    out = capsys.readouterr().out
    assert f"partitions {tweets.partitions + 2} != {tweets.partitions}" in out
    assert "cleanup.policy=delete (want compact)" in out and "missing" in out

    assert feedctl(["topics", "create", "--json", *base]) == 1  # partitions cannot be fixed
    report = {t["name"]: t for t in json.loads(capsys.readouterr().out)["topics"]}
    assert report[tweets.name]["fixed"] == [d for d in report[tweets.name]["drift"] if d.startswith(
        ("cleanup.policy", "min.compaction", "delete.retention", "segment.ms"))]
    assert all(report[s.name]["created"] for s in specs[1:])

    deadline = time.monotonic() + 30  # altered configs reach the broker's metadata a moment later
    while True:
        after = {r.name: r for r in describe_topics(settings, specs)}
        if len(after[tweets.name].drift) == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert after[tweets.name].drift == [f"partitions {tweets.partitions + 2} != {tweets.partitions}"]
    assert all(not after[s.name].drift for s in specs[1:])

    aligned = [s if s is not tweets else by_hand.__class__(**{**dataclasses.asdict(tweets),
                                                               "partitions": tweets.partitions + 2})
               for s in specs]
    config = _write(aligned, tmp_path / "aligned.json")
    assert feedctl(["topics", "describe", "--bootstrap", settings.kafka_bootstrap, "--config", str(config)]) == 0
    assert "0 with drift" in capsys.readouterr().err


def test_dead_letter_topic_gets_retention_not_compaction(settings: Settings, unique: str) -> None:
    spec = dataclasses.replace(settings.topics["dead_letter"], name=f"dlq.{unique}")
    ensure_topics(settings, [spec])
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient(client_config(settings, ADMIN))
    resource = ConfigResource(ResourceType.TOPIC, spec.name)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "delete"
    assert configs["retention.ms"].value == spec.config["retention.ms"]
