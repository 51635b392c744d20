"""The history horizon on the real stack: a history longer than the horizon, late changes on both
sides of it, and what the provisioned topics and tables carry (docs/retention.md).

Event times are Kafka record timestamps, so the test publishes with explicit timestamps: an old
history, then the present, then late changes (a replay of a deleted tweet's upsert from before the
horizon, an unfollow from before it, a tweet from within it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from feed_service.core.events import parse_event
from feed_service.core.reference import reference_timelines
from feed_service.kafka.client_config import client_config
from feed_service.kafka.keys import record_key, topic_role
from feed_service.security.roles import ADMIN, PRODUCER
from feed_service.settings import Settings

from tests.support.pipeline import StreamProcess, consume_all, read_table, read_timelines, running
from tests.support.isolation import isolated

HORIZON_S = 60


def _publish_at(settings: Settings, timed: list[tuple[dict[str, Any], int]]) -> list[tuple[str, int, int]]:
    """Publish each event with its Kafka timestamp (ms); returns (topic, partition, offset) of each."""
    from confluent_kafka import Producer

    producer = Producer(client_config(settings, PRODUCER) | {"enable.idempotence": True})
    delivered: dict[int, tuple[str, int, int]] = {}
    errors: list[Any] = []
    for i, (event, ts) in enumerate(timed):
        parsed = parse_event(json.dumps(event))

        def report(err: Any, msg: Any, i: int = i) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered[i] = (msg.topic(), msg.partition(), msg.offset())

        producer.produce(settings.topic(topic_role(parsed)), key=record_key(parsed).encode(),
                         value=json.dumps(event).encode(), timestamp=ts, on_delivery=report)
        producer.flush(30)  # one at a time: per-key order is the order written here
    assert errors == [], errors
    return [delivered[i] for i in range(len(timed))]


def _tweet(tid: str, author: str, version: int, created_at: int, text: str) -> dict[str, Any]:
    return {"type": "tweet", "op": "upsert", "tweet_id": tid, "author_id": author, "version": version,
            "created_at": created_at, "text": text, "profile_version": 1}


def _follow(follower: str, followee: str, version: int, op: str = "follow") -> dict[str, Any]:
    return {"type": "follow", "op": op, "follower_id": follower, "followee_id": followee, "version": version}


def test_late_changes_on_both_sides_of_the_horizon(settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = isolated(settings, unique, history_horizon_s=HORIZON_S)
    now = int(time.time() * 1000)
    old = now - 10 * 60_000  # ten horizons back
    deleted_upsert = _tweet("t1", "bob", 1, old, "deleted later")
    past = [
        (_follow("ann", "bob", 1), old), (_follow("cat", "bob", 1), old),
        (deleted_upsert, old), (_tweet("t0", "bob", 1, old - 1, "old but live"), old),
        ({"type": "tweet", "op": "delete", "tweet_id": "t1", "author_id": "bob", "version": 2}, old + 1_000),
        ({"type": "profile", "user_id": "bob", "version": 1, "display_name": "Bob"}, old),
    ]
    present = [(_tweet("t2", "bob", 3, now, "now"), now)]
    late = [
        (deleted_upsert, old),                                  # a replay from before the horizon: rejected
        (_follow("cat", "bob", 0, "unfollow"), old - 60_000),   # an old unfollow: rejected
        (_tweet("t3", "bob", 4, now - 30_000, "late but within the horizon"), now - 30_000),  # applied
    ]
    checkpoint = tmp_path / "ckpt"
    with running(StreamProcess(pipeline, checkpoint, log_file=tmp_path / "stream.log")) as stream:
        _publish_at(pipeline, past)
        stream.wait_caught_up()
        _publish_at(pipeline, present)  # bob's watermark jumps ten horizons: t1's tombstone is forgotten
        stream.wait_caught_up()
        late_at = _publish_at(pipeline, late)
        stream.wait_caught_up()

    accepted = [e for e, _ in past + present] + [late[2][0]]
    expected = reference_timelines(accepted, inbox_cap=pipeline.inbox_cap)
    assert read_timelines(pipeline) == expected
    assert [e["tweet_id"] for e in expected["ann"]] == ["t2", "t3", "t0"] and expected["cat"] == expected["ann"]
    assert read_table(pipeline, "SELECT tweet_id FROM tweets WHERE tweet_id = 't1'") == []  # not resurrected

    letters = [json.loads(m.value()) for m in consume_all(pipeline, pipeline.topic("dead_letter"), expect=2)]
    assert sorted((d["source_topic"], d["source_partition"], d["source_offset"], d["reason_code"]) for d in letters) \
        == sorted((*late_at[i], "beyond_horizon") for i in (0, 1))
    assert {json.loads(d["value"])["type"] for d in letters} == {"tweet", "follow"}

    # The topics and tables carry the values derived from the same horizon.
    grace = read_table(pipeline, "SELECT gc_grace_seconds FROM system_schema.tables WHERE keyspace_name = "
                                 f"'{pipeline.keyspace}' AND table_name = 'home_timeline'")
    assert grace == [(HORIZON_S,)]
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, pipeline.topic("tweets"))
    admin = AdminClient(client_config(pipeline, ADMIN))  # kept alive until the answer is in
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["delete.retention.ms"].value == str(HORIZON_S * 1000)
