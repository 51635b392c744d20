"""The streaming job killed (-9) mid-stream and restarted on the real stack: Kafka -> Spark stateful
join -> Cassandra, compared with the engine's batch reference over the same history. (The stream over
the session's world, its dead letters and its metrics: test_world.py.)"""

from __future__ import annotations

from pathlib import Path

from feed_service.core.reference import reference_tables, reference_timelines
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from spark_jobs.state_stats import last_committed_batch
from spark_jobs.stream.pinned import STATE_BUCKETS_FILE

from tests.support.isolation import isolated
from tests.support.pipeline import StreamProcess, publish, read_table, read_timelines, running


def _history(seed: int) -> list[dict]:
    """A history with every kind of change: tweets, edits, deletes, follows, unfollows, profiles."""
    return list(generate(users=30, events=600, seed=seed, mean_following=6, prefix=f"s{seed}-"))


def _reference_below_the_cap(pipeline: Settings, events: list[dict]) -> dict[str, list]:
    """The reference timelines, checked to stay below the inbox cap: there the view is exact
    (docs/join-engine.md), so Cassandra must equal it entry for entry."""
    timelines = reference_timelines(events, inbox_cap=pipeline.inbox_cap)
    assert timelines and all(len(entries) < pipeline.inbox_cap for entries in timelines.values())
    return timelines


def test_stream_survives_kill_and_restart_with_identical_state(settings: Settings, unique: str, tmp_path: Path) -> None:
    """The default layout (state buckets). A checkpoint of one state per key killed in
    a batch and restarted by a release whose default is buckets is test_reshard.py's in-place test."""
    pipeline = isolated(settings, unique)
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
