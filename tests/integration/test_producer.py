"""The producer against the real broker: round trips, refusals, replay files, delivery failures."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from feed_service.cli.main import main as feedctl
from feed_service.core.events import parse_event
from feed_service.kafka.keys import record_key
from feed_service.kafka.producer import DeliveryFailed, EventProducer, EventRejected
from feed_service.settings import Settings
from feed_service.kafka.topics import ensure_topics
from feed_service.kafka.client_config import client_config
from feed_service.security.roles import ADMIN
from feed_service.workload.generator import generate
from feed_service.workload.sinks import publish_workload

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: cwd of the CLI runs below
ROLES = ("tweets", "follows", "profiles", "blocks_mutes")


@pytest.fixture()
def private(settings: Settings, unique: str) -> Settings:
    """The test stack's settings with topics of this test's own (same specs, unique names)."""
    topics = {role: dataclasses.replace(spec, name=f"{spec.name}.{unique}") for role, spec in settings.topics.items()}
    ensure_topics(settings, topics.values())
    return dataclasses.replace(settings, topics=topics)


def _topics_file(settings: Settings, path: Path) -> Path:
    path.write_text(json.dumps({"topics": {
        role: {"name": s.name, "partitions": s.partitions, "replication_factor": s.replication_factor,
               "config": s.config} for role, s in settings.topics.items()}}))
    return path


def consume_all(settings: Settings, roles=ROLES, expect: int | None = None, timeout: float = 30.0) -> list:
    """Every record of the topics, read from the start: (topic, key, value) tuples."""
    from confluent_kafka import Consumer

    consumer = Consumer(client_config(settings, ADMIN) | {"group.id": f"t-{time.monotonic_ns()}",
                                                          "auto.offset.reset": "earliest", "enable.auto.commit": False})
    topics = [settings.topic(r) for r in roles]
    total = expect if expect is not None else sum(high for _, high in _watermarks(settings, roles).values())
    consumer.subscribe(topics)
    records = []
    deadline = time.monotonic() + timeout
    while len(records) < total and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            records.append((msg.topic(), msg.key().decode(), msg.value()))
    consumer.close()
    return records


def _retry(call, seconds: float = 30.0):
    """Retry a metadata call while a fresh topic's partition leaders are still being elected."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _watermarks(settings: Settings, roles=ROLES) -> dict[tuple[str, int], tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(client_config(settings, ADMIN) | {"group.id": "watermarks"})
    marks = {}
    for role in roles:
        spec = settings.topics[role]
        for p in range(spec.partitions):
            marks[(spec.name, p)] = _retry(lambda: consumer.get_watermark_offsets(TopicPartition(spec.name, p), timeout=10))
    consumer.close()
    return marks


def test_round_trip_of_every_event_type(private: Settings) -> None:
    with EventProducer(private) as producer:
        profile = producer.publish_profile("ann", "Ann", avatar_url="https://a.invalid/ann.png", bio="hi")
        tweet = producer.publish_tweet("ann", "héllo ✓")
        edit = producer.publish_edit(tweet, "hello, edited")
        follow = producer.follow("bob", "ann")
        unfollow = producer.unfollow("bob", "ann")
        delete = producer.publish_delete(tweet.tweet_id, "ann")
        raw = producer.publish_event({"type": "follow", "op": "follow", "follower_id": "cy", "followee_id": "ann",
                                      "version": 5, "source": "raw envelope"})
    sent = [profile, tweet, edit, follow, unfollow, delete, raw]
    records = consume_all(private, expect=len(sent))
    assert producer.stats.delivered == len(sent)
    by_value = {parse_event(value): (topic, key) for topic, key, value in records}
    assert set(by_value) == set(sent)
    for event in sent:
        topic, key = by_value[event]
        assert key == record_key(event)
    assert by_value[tweet][0] == private.topic("tweets") and by_value[follow][0] == private.topic("follows")
    assert by_value[profile][0] == private.topic("profiles")
    # one entity, one partition: all changes of the tweet and of the edge share their key
    assert by_value[tweet][1] == by_value[edit][1] == by_value[delete][1]


def test_blocks_and_mutes_land_on_their_topic_keyed_by_edge(private: Settings) -> None:
    with EventProducer(private) as producer:
        block, mute, unmute = producer.block("ann", "bob"), producer.mute("ann", "bob"), producer.unmute("ann", "bob")
    records = consume_all(private, roles=("blocks_mutes",), expect=3)
    got = {parse_event(value): (topic, key) for topic, key, value in records}
    topic = private.topic("blocks_mutes")
    assert got == {block: (topic, "block|ann|bob"), mute: (topic, "mute|ann|bob"), unmute: (topic, "mute|ann|bob")}
    # the mute and the unmute share a key, hence a partition: the unmute stays after the mute
    assert [parse_event(v) for _, k, v in records if k == "mute|ann|bob"] == [mute, unmute]


def test_invalid_events_are_refused_before_sending(private: Settings) -> None:
    bad = [
        {"type": "follow", "op": "follow", "follower_id": "a", "followee_id": "a", "version": 1},
        {"type": "tweet", "op": "upsert", "tweet_id": "t", "author_id": "a", "version": 1, "created_at": 1,
         "text": "x", "profile_version": -2},
        {"type": "profile", "user_id": "u", "version": "7", "display_name": "x"},
        {"type": "tweet", "op": "edit", "tweet_id": "t", "author_id": "a", "version": 1},
    ]
    with EventProducer(private) as producer:
        for envelope in bad:
            with pytest.raises(EventRejected):
                producer.publish_event(envelope)
        with pytest.raises(EventRejected):
            producer.publish_line(b"not json")
    assert producer.stats.rejected == 5 and producer.stats.produced == 0
    assert all(high == 0 for _, high in _watermarks(private).values())


def test_replay_file_with_bad_lines(private: Settings, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    good = [json.dumps(e) for e in generate(users=20, events=200, seed=21)]
    lines = list(good)
    lines.insert(3, "{not json")
    lines.insert(10, json.dumps({"type": "follow", "op": "follow", "follower_id": "x", "followee_id": "x",
                                 "version": 1}))
    lines.insert(11, "")
    lines.insert(50, json.dumps({"type": "tweet", "op": "upsert", "tweet_id": "t"}))
    events_file = tmp_path / "events.jsonl"
    events_file.write_text("\n".join(lines) + "\n")
    config = _topics_file(private, tmp_path / "topics.json")
    code = feedctl(["publish", "--bootstrap", private.kafka_bootstrap, "--config", str(config),
                    "--file", str(events_file)])
    err = capsys.readouterr().err
    assert code == 0
    assert "line 4: bad_json" in err and "line 11: self_follow" in err and "line 51: missing_field" in err
    assert f"{len(good)} sent, 3 rejected of {len(good) + 3} lines" in err
    records = consume_all(private, expect=len(good))
    assert sorted(value.decode() for _, _, value in records) == sorted(good)


def test_replay_from_stdin_with_the_cli(private: Settings, tmp_path: Path) -> None:
    config = _topics_file(private, tmp_path / "topics.json")
    lines = [json.dumps(e) for e in generate(users=10, events=30, seed=2)]
    proc = subprocess.run(
        [sys.executable, "-m", "feed_service", "publish", "--bootstrap", private.kafka_bootstrap, "--config",
         str(config), "--file", "-"], input="\n".join(lines) + "\nbroken\n", capture_output=True, text=True,
        cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(lines)} sent, 1 rejected" in proc.stderr and f"line {len(lines) + 1}: bad_json" in proc.stderr
    assert len(consume_all(private, expect=len(lines))) == len(lines)


def test_single_event_cli(private: Settings, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = _topics_file(private, tmp_path / "topics.json")
    base = ["publish", "--bootstrap", private.kafka_bootstrap, "--config", str(config)]
    assert feedctl(base + ["profile", "--user", "ann", "--display-name", "Ann"]) == 0
    assert feedctl(base + ["tweet", "--author", "ann", "--text", "hi", "--profile-version", "1",
                           "--tweet-id", "t1"]) == 0
    assert feedctl(base + ["follow", "--follower", "bob", "--followee", "ann"]) == 0
    assert feedctl(base + ["unfollow", "--follower", "bob", "--followee", "ann", "--version", "99"]) == 0
    assert feedctl(base + ["delete", "--tweet-id", "t1", "--author", "ann"]) == 0
    assert feedctl(base + ["follow", "--follower", "bob", "--followee", "bob"]) == 2
    out = capsys.readouterr().out.splitlines()
    assert [parse_event(line).__class__.__name__ for line in out] == [
        "ProfileVersion", "TweetUpsert", "FollowChange", "FollowChange", "TweetDelete"]
    assert {parse_event(v) for _, _, v in consume_all(private, expect=5)} == {parse_event(line) for line in out}


def test_failed_delivery_raises(private: Settings, unique: str) -> None:
    spec = dataclasses.replace(private.topics["tweets"], name=f"tiny.{unique}",
                               config={**private.topics["tweets"].config, "max.message.bytes": "1024"})
    ensure_topics(private, [spec])
    tiny = dataclasses.replace(private, topics={**private.topics, "tweets": spec})
    producer = EventProducer(tiny)
    producer.publish_tweet("ann", "ok", profile_version=1)
    producer.publish_tweet("ann", os.urandom(4000).hex(), profile_version=1)  # too large for the topic
    with pytest.raises(DeliveryFailed) as info:
        producer.close()
    assert info.value.count >= 1 and "tiny" in info.value.errors[0].topic
    assert producer.closed


def test_publish_workload_delivers_every_event(private: Settings) -> None:
    events = list(generate(users=200, events=3000, seed=8))
    stats = publish_workload(private, events)
    assert stats.sent == len(events)
    records = consume_all(private, expect=len(events), timeout=60)
    assert len(records) == len(events)
    assert sorted(json.dumps(parse_event(v).__repr__()) for _, _, v in records) == sorted(
        json.dumps(parse_event(e).__repr__()) for e in events)


def test_workload_cli_to_kafka(private: Settings, tmp_path: Path) -> None:
    config = _topics_file(private, tmp_path / "topics.json")
    code = feedctl(["workload", "--users", "50", "--count", "300", "--seed", "4", "--kafka", "--no-progress",
                    "--bootstrap", private.kafka_bootstrap, "--config", str(config)])
    assert code == 0
    expected = list(generate(users=50, events=300, seed=4))
    assert len(consume_all(private, expect=len(expected))) == len(expected)
