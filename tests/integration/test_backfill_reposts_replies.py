"""The backfill of a history with reposts, replies and hides on the real stack: Kafka -> the Spark
batch job -> Cassandra, compared entry for entry with the batch reference (home_timeline with
home_extras, author_timeline with user_reposts); then the stream bootstrapped from it, fed more
events, still equals the reference. And the DataFrame join at a small cap against the engine
states it must agree with (retention per class, a reply to X in X's inbox only).

One test does all three on one history (a pipeline, a workload and the Spark jobs over it are the
slow parts): the backfill and the continued stream at the default cap, then a backfill at a cap of 2
(no write) over the same topics, with a second history and ties of a reply's parent added, for the
join against the states.
"""

from __future__ import annotations

import json
from pathlib import Path

from feed_service.core.reference import reference_entries, reference_tables, reference_user_timelines
from feed_service.core.state import decode_state
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from spark_jobs.backfill import BackfillOptions, run_backfill
from spark_jobs.backfill.join import author_timeline_rows, join_timelines_batch, retained_tweets
from spark_jobs.backfill.read import classify, read_snapshot, valid_events
from spark_jobs.backfill.snapshot import Snapshot
from spark_jobs.backfill.states import state_timeline_rows
from spark_jobs.backfill.winners import winning_changes
from spark_jobs.envelope import parse_changes

from tests.support.isolation import isolated
from tests.support.pipeline import StreamProcess, publish, read_table, running
from tests.support.views import read_views


def _history(seed: int, events: int = 900) -> list[dict]:
    return list(generate(users=40, events=events, seed=seed, mean_following=6, prefix=f"br{seed}-",
                         repost_share=0.15, reply_share=0.3, hide_share=0.05))


def _reference(events: list[dict], inbox_cap: int) -> tuple[dict, dict]:
    tables = reference_tables(events)
    home = reference_entries(tables, inbox_cap=inbox_cap)
    assert home and all(len(v) < inbox_cap for v in home.values())  # below the cap: exact
    return home, reference_user_timelines(tables, inbox_cap=inbox_cap)


def _count(settings: Settings, table: str) -> int:
    return read_table(settings, f"SELECT COUNT(*) FROM {table}")[0][0]


def test_backfill_with_reposts_and_replies_equals_the_reference_the_stream_continues_and_the_dataframe_join_is_the_engine_states_at_a_small_cap(
    settings: Settings, spark, unique: str, tmp_path: Path
) -> None:
    pipeline = isolated(settings, unique)
    events = _history(seed=7)
    first, second = events[: len(events) * 2 // 3], events[len(events) * 2 // 3:]
    publish(pipeline, first)
    out = tmp_path / "backfill"
    result = run_backfill(spark, pipeline, BackfillOptions(out=out))
    summary, backfill_ts = result.summary, result.manifest["backfill_ts"]

    home, users = _reference(first, pipeline.inbox_cap)
    got_home, got_users = read_views(pipeline)
    assert any(e.reposted_by for entries in got_home.values() for e in entries)
    assert any(e.in_reply_to_author_id not in (None, e.author_id) for entries in got_home.values() for e in entries)
    assert got_home == home
    assert got_users == users
    for table in ("home_extras", "user_reposts", "reader_visible"):
        assert summary["rows"][table] == _count(pipeline, table) > 0, table
    assert summary["per_reader"]["inputs"] > 0 and summary["per_reader"]["extras_rows"] > 0
    stamps = {r[0] for r in read_table(pipeline, "SELECT writetime(version) FROM home_extras")}
    assert stamps == {backfill_ts}  # the stage's clock started at backfill_ts - 1

    # The stream bootstrapped from it continues exactly: the continuation unreposts, follows and
    # edits what the backfill holds, so it needs the per-reader states the backfill left.
    checkpoint = tmp_path / "ckpt"
    with running(StreamProcess(pipeline, checkpoint, log_file=tmp_path / "stream.log",
                               extra_args=["--bootstrap-from", str(out)])) as stream:
        publish(pipeline, second)
        stream.wait_caught_up()
        assert read_views(pipeline) == _reference(events, pipeline.inbox_cap)
    assert "per-reader stage inputs seeded" in (tmp_path / "stream.log").read_text(errors="replace")
    stamps = [r[0] for r in read_table(pipeline, "SELECT writetime(version) FROM home_extras")]
    assert min(stamps) == backfill_ts and max(stamps) > backfill_ts

    _check_the_dataframe_join_is_the_engine_states_at_a_small_cap(pipeline, spark, events, tmp_path)


def _check_the_dataframe_join_is_the_engine_states_at_a_small_cap(pipeline: Settings, spark, events: list[dict],
                                                                   tmp_path: Path) -> None:
    """At a cap of 2 authors exceed it in every class: the join retains per class and writes a
    reply to X only to X, as the author step does; the winners keep a reply's parent. A backfill
    without writes over the topics ``events`` were published to (the stream is stopped), with a
    second history of users of their own added."""
    from pyspark import StorageLevel

    more = _history(seed=8, events=600)
    # a tie at one version between two parents of one tweet: the digest, parent included, decides
    replies = [e for e in more if e["type"] == "tweet" and e.get("in_reply_to_author_id")]
    more += [{**e, "in_reply_to_author_id": e["author_id"], "in_reply_to_tweet_id": "t-self"} for e in replies[:20]]
    publish(pipeline, more)
    events = events + more
    small = pipeline.replace(inbox_cap=2)
    out = tmp_path / "backfill-cap2"
    manifest = run_backfill(spark, small, BackfillOptions(out=out, write=False)).manifest

    snap = Snapshot(manifest["start_offsets"], manifest["end_offsets"])
    persisted = []

    def keep(df):  # type: ignore[no-untyped-def] - the snapshot is read once for the checks below
        persisted.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    winners = winning_changes(valid_events(classify(parse_changes(read_snapshot(spark, small, snap))))).map(keep)
    try:
        tables = reference_tables(events)
        live = {(r.author_id, r.tweet_id): (r.version, r.created_at, r.text, r.profile_version,
                                            *((r.in_reply_to_tweet_id, r.in_reply_to_author_id)
                                              if r.in_reply_to_tweet_id is not None else ()))
                for r in winners.live_tweets.collect()}
        assert live == tables.tweets

        states = spark.read.parquet(str(out / "state"))
        joined = sorted(tuple(r) for r in join_timelines_batch(winners, 2, small.pull_threshold).collect())
        from_states = sorted(tuple(r) for r in state_timeline_rows(states).collect())
        per_timeline: dict[str, list[tuple]] = {}
        for row in from_states:
            per_timeline.setdefault(row[0], []).append(row)
        newest = sorted(r for rows in per_timeline.values()
                        for r in sorted(rows, key=lambda r: (r[3], r[1], r[2]))[-2:])
        assert joined == newest and manifest["summary"]["rows"]["timeline"] == len(joined)
        assert any(r[8] not in (None, r[2]) for r in joined)  # replies to a third user, in that user's inbox

        retained = {(s.key, tid) for s in (decode_state(bytes(r.state)) for r in states.collect())
                    for tid in s.tweets}
        assert {(r.author_id, r.tweet_id) for r in author_timeline_rows(winners, 2).collect()} == retained
        # per class: more than the newest 2 of some author
        assert retained_tweets(winners.live_tweets, 2).groupBy("author_id").count().where("count > 2").count() > 0
        assert json.loads((out / "manifest.json").read_text())["per_reader_inputs"] == "per_reader"
    finally:
        for df in persisted:
            df.unpersist()
