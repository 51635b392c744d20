"""The streaming job end to end on the real stack: Kafka -> Spark stateful join -> Cassandra.

Every test compares Cassandra with the engine's batch reference over the same history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from feed_service.core.reference import reference_timelines
from feed_service.ops.provision import provision
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from spark_jobs.timeline_join import OPERATORS

from .pipeline import GARBAGE, GARBAGE_CODES, StreamProcess, consume_all, publish, read_table, read_timelines


def _isolated(settings: Settings, unique: str) -> Settings:
    """Own topics and keyspace for one test: pipelines of different tests never meet."""
    from dataclasses import replace

    isolated = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}")
    provision(isolated)
    return isolated


def _history(seed: int) -> list[dict]:
    """A history with every kind of change: tweets, edits, deletes, follows, unfollows, profiles."""
    return list(generate(users=30, events=600, seed=seed, mean_following=6, prefix=f"s{seed}-"))


def test_stream_matches_reference_and_dead_letters_bad_records(settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = _isolated(settings, unique)
    events = _history(seed=1)
    kinds = {(e["type"], e.get("op")) for e in events}
    assert {("tweet", "upsert"), ("tweet", "delete"), ("follow", "follow"), ("follow", "unfollow"),
            ("profile", None)} <= kinds
    publish(pipeline, events, GARBAGE)

    stream = StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log").start()
    try:
        stream.wait_caught_up()
        assert read_timelines(pipeline) == reference_timelines(events)

        # The job keeps running after bad input: more garbage and more events are processed too.
        publish(pipeline, [], GARBAGE[:2])
        more = [{**e, "text": "later: " + e["text"], "version": e["version"] + 1000}
                for e in events if e["type"] == "tweet" and e["op"] == "upsert"][:20]
        publish(pipeline, more)
        stream.wait_caught_up()
        assert stream.proc is not None and stream.proc.poll() is None
        assert read_timelines(pipeline) == reference_timelines(events + more)
    finally:
        assert stream.stop() == 0

    letters = consume_all(pipeline, pipeline.topic("dead_letter"), expect=len(GARBAGE) + 2)
    records = [json.loads(m.value()) for m in letters]
    assert len(records) == len(GARBAGE) + 2
    first = sorted(records[: len(GARBAGE)], key=lambda r: (r["source_topic"], r["source_offset"]))
    by_value = {r["value"]: r for r in records}
    for (role, raw), code in zip(GARBAGE, GARBAGE_CODES):
        record = by_value[raw.decode()]
        assert record["reason_code"] == code, record
        assert record["source_topic"] == pipeline.topic(role)
        assert isinstance(record["source_partition"], int) and isinstance(record["source_offset"], int)
    assert first  # every record names its source


@pytest.mark.parametrize("operator", OPERATORS)
def test_stream_survives_kill_and_restart_with_identical_state(
    settings: Settings, unique: str, tmp_path: Path, operator: str
) -> None:
    pipeline = _isolated(settings, unique)
    events = _history(seed=3)
    publish(pipeline, events)

    # Small batches so the kill lands in the middle of the stream.
    args = ["--max-offsets-per-trigger", "60", "--operator", operator]
    checkpoint = tmp_path / "ckpt"
    first = StreamProcess(pipeline, checkpoint, log_file=tmp_path / "run1.log", extra_args=args).start()
    try:
        first.wait_for_batch(2)
    finally:
        first.kill()
    partial = read_timelines(pipeline)

    second = StreamProcess(pipeline, checkpoint, log_file=tmp_path / "run2.log", extra_args=args).start()
    try:
        second.wait_caught_up()
    finally:
        assert second.stop() == 0

    expected = reference_timelines(events)
    assert partial != expected  # the kill really happened mid-stream
    assert read_timelines(pipeline) == expected
    # Dimension tables match too: latest version of each live tweet, every profile version.
    live = {(e["tweet_id"]) for e in events if e["type"] == "tweet"}
    tweets = {r[0]: r[1] for r in read_table(pipeline, "SELECT tweet_id, version FROM tweets")}
    assert set(tweets) <= live
    deleted = {e["tweet_id"] for e in events if e["type"] == "tweet" and e["op"] == "delete"}
    assert not (set(tweets) & deleted)
    profiles = {(e["user_id"], e["version"]) for e in events if e["type"] == "profile"}
    assert set(read_table(pipeline, "SELECT user_id, version FROM profiles")) == profiles
