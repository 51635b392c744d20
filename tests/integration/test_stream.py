"""The streaming job end to end on the real stack: Kafka -> Spark stateful join -> Cassandra.

Every test compares Cassandra with the engine's batch reference over the same history.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from feed_service.core.reference import reference_tables, reference_timelines
from feed_service.ops.provision import provision
from feed_service.settings import Settings
from feed_service.stack.config import free_ports
from feed_service.workload.generator import generate
from spark_jobs.state_stats import last_committed_batch
from spark_jobs.stream.pinned import STATE_BUCKETS_FILE

from tests.support.pipeline import (
    GARBAGE, GARBAGE_CODES, Delivered, StreamProcess, consume_all, publish, read_table, read_timelines, running,
)
from ..dashboard import dashboard_metric_names, exported_names


def _isolated(settings: Settings, unique: str) -> Settings:
    """Own topics and keyspace for one test: pipelines of different tests never meet."""
    from dataclasses import replace

    isolated = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}")
    provision(isolated)
    return isolated


def _history(seed: int) -> list[dict]:
    """A history with every kind of change: tweets, edits, deletes, follows, unfollows, profiles."""
    return list(generate(users=30, events=600, seed=seed, mean_following=6, prefix=f"s{seed}-"))


def _reference_below_the_cap(pipeline: Settings, events: list[dict]) -> dict[str, list]:
    """The reference timelines, checked to stay below the inbox cap: there the view is exact
    (docs/join-engine.md), so Cassandra must equal it entry for entry."""
    timelines = reference_timelines(events, inbox_cap=pipeline.inbox_cap)
    assert timelines and all(len(entries) < pipeline.inbox_cap for entries in timelines.values())
    return timelines


def _dead_letters(pipeline: Settings, expect: int) -> list[tuple[str, str, int, int, bytes, str]]:
    """Every dead letter as (key, source topic, partition, offset, raw value, reason code), sorted."""
    letters = consume_all(pipeline, pipeline.topic("dead_letter"), expect=expect)
    out = []
    for m in letters:
        record = json.loads(m.value())
        out.append((m.key().decode(), record["source_topic"], record["source_partition"], record["source_offset"],
                    record["value"].encode(), record["reason_code"]))
    return sorted(out)


def _check_metrics(stream: StreamProcess, *, records: int, dead_letters: int, timeout: float = 30) -> None:
    """The running stream's /metrics page (spark_jobs/stream/metrics.py), once it has caught up: every
    stream series the Grafana dashboard charts is there, the batches' records and writes are counted,
    and the consumer lag has come down to 0 (it is refreshed every few seconds, hence the wait)."""
    wanted = {name for name in dashboard_metric_names() if name.startswith("feed_stream_")}
    deadline = time.monotonic() + timeout
    while True:
        series = exported_names(stream.metrics_text())
        replayed = series.get("feed_stream_restarts_total", 0) > 0  # a replayed batch counts twice
        done = (wanted <= series.keys() and series["feed_stream_consumer_lag"] == 0
                and series["feed_stream_input_rows_total"] >= records
                and series["feed_stream_dead_letters_total"] >= dead_letters)
        if done or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert wanted <= series.keys(), f"missing: {sorted(wanted - series.keys())}"
    assert series["feed_stream_batches_total"] > 0 and series["feed_stream_rows_written_total"] > 0
    rows_in = series["feed_stream_input_rows_total"]
    assert rows_in == records or (replayed and rows_in > records)
    assert series["feed_stream_dead_letters_total"] == dead_letters or replayed
    assert series["feed_stream_consumer_lag"] == 0
    assert series["feed_stream_state_keys"] > 0 and series["feed_stream_state_bytes"] > 0


def test_stream_matches_reference_and_dead_letters_bad_records(settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = _isolated(settings, unique)
    events = _history(seed=1)
    kinds = {(e["type"], e.get("op")) for e in events}
    assert {("tweet", "upsert"), ("tweet", "delete"), ("follow", "follow"), ("follow", "unfollow"),
            ("profile", None)} <= kinds
    delivered: list[Delivered] = []
    publish(pipeline, events, GARBAGE, delivered=delivered)

    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log",
                               metrics_port=free_ports(1)[0])) as stream:
        stream.wait_caught_up()
        assert read_timelines(pipeline) == _reference_below_the_cap(pipeline, events)
        _check_metrics(stream, records=len(events) + len(GARBAGE), dead_letters=len(GARBAGE))

        # The job keeps running after bad input: more garbage and more events are processed too.
        publish(pipeline, [], GARBAGE[:2], delivered=delivered)
        more = [{**e, "text": "later: " + e["text"], "version": e["version"] + 1000}
                for e in events if e["type"] == "tweet" and e["op"] == "upsert"][:20]
        publish(pipeline, more)
        stream.wait_caught_up()
        assert stream.proc is not None and stream.proc.poll() is None
        assert read_timelines(pipeline) == _reference_below_the_cap(pipeline, events + more)

    # One dead letter per bad record, each naming its exact source record and the reason.
    codes = {raw: code for (_, raw), code in zip(GARBAGE, GARBAGE_CODES)}
    expected = sorted((f"{d.topic}/{d.partition}/{d.offset}", d.topic, d.partition, d.offset, d.value, codes[d.value])
                      for d in delivered)
    assert len(expected) == len(GARBAGE) + 2
    assert _dead_letters(pipeline, expect=len(expected)) == expected


def test_stream_survives_kill_and_restart_with_identical_state(settings: Settings, unique: str, tmp_path: Path) -> None:
    """The default operator and layout (state buckets). A checkpoint of one state per key killed in
    a batch and restarted by a release whose default is buckets is test_reshard.py's in-place test."""
    pipeline = _isolated(settings, unique)
    events = _history(seed=3)
    publish(pipeline, events)

    # Small batches so the kill lands in the middle of the stream.
    checkpoint = tmp_path / "ckpt"
    first = StreamProcess(pipeline, checkpoint, log_file=tmp_path / "run1.log",
                          extra_args=["--max-offsets-per-trigger", "60"]).start()
    try:
        first.wait_for_batch(2)
    finally:
        first.kill()
    partial = read_timelines(pipeline)

    # The restart re-runs a batch the kill interrupted with its logged offsets, then continues in larger
    # batches (the limit is not part of the checkpoint): still several batches on the restored state.
    args = ["--max-offsets-per-trigger", "250"]
    with running(StreamProcess(pipeline, checkpoint, log_file=tmp_path / "run2.log", extra_args=args)) as second:
        second.wait_caught_up()
    assert last_committed_batch(checkpoint / "join") >= 5  # about 640 records left after batch 2: 3 batches
    for log in ("run1.log", "run2.log"):  # the state server's warning per state-less key is held back
        assert "doesn't contain a value" not in (tmp_path / log).read_text()
    layout = int((checkpoint / STATE_BUCKETS_FILE).read_text())
    assert layout == pipeline.state_buckets > 0

    expected = _reference_below_the_cap(pipeline, events)
    assert partial != expected  # the kill really happened mid-stream
    assert read_timelines(pipeline) == expected
    # Dimension tables match too: the latest version of each live tweet (none of the deleted ones),
    # every profile version.
    tables = reference_tables(events)
    live = {tid: (author, c[1], c[0], c[2], c[3]) for (author, tid), c in tables.tweets.items()}
    assert len(live) == len(tables.tweets)  # tweet ids are unique across authors here
    tweets = {r[0]: r[1:] for r in read_table(
        pipeline, "SELECT tweet_id, author_id, created_at, version, text, profile_version FROM tweets")}
    assert tweets == live
    assert tables.deleted and not {tid for _, tid in tables.deleted} & set(tweets)  # deletes happened; none left
    profiles = {(r[0], r[1]): tuple(r[2:]) for r in read_table(
        pipeline, "SELECT user_id, version, display_name, avatar_url, bio FROM profiles")}
    assert profiles == tables.profiles
