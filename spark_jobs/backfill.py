"""The backfill job: rebuild the timelines from the compacted changelog topics (issue 7).

A Spark batch job, in stages (each reported on stderr, see :class:`Progress`):

1. ``snapshot``: the end offset of every partition of the tweets, follows and profiles topics,
   taken once at start. Everything below reads exactly ``[earliest, snapshot)``; the stream that
   continues after the backfill starts exactly at the snapshot (no event skipped or applied twice).
2. ``read``: Spark's Kafka source in batch mode with explicit ``endingOffsets``; the envelope is
   parsed and validated by :mod:`spark_jobs.envelope` (the stream's own rules). Tombstones (null
   values, left by compaction) are skipped and counted; invalid records are counted by reason
   (``--dead-letters`` also sends them to the dead-letter topic).
3. ``winners``: each entity's winning change, with DataFrame operations and exactly the engine's
   rules (:mod:`feed_service.core.events`): a tweet's highest version upsert (ties: the greater
   :func:`~feed_service.core.events.tweet_payload_digest`), a delete is final; a follow edge's
   highest version (``unfollow`` wins a tie); per profile (user, version) the greatest
   :func:`~feed_service.core.events.profile_rank`.
4. ``join``: each author's newest ``inbox_cap`` live tweets (the rows the engine's per-author state
   retains) joined with the active follow edges on ``author_id = followee_id``: exactly the row set
   the stream writes. Distributed; nothing but counts reaches the driver.
5. ``states``: the engine's own per-key state after those changes, ``step(None, winners of the
   key)`` in ``groupBy("key").applyInPandas``, encoded with
   :func:`~feed_service.core.state.encode_state` and stored as parquet: the stream's initial state.
6. ``write``: timeline rows, tweets (live rows and deletes) and profile versions to Cassandra, in
   place, from the executors, every write ``USING TIMESTAMP backfill_ts`` (docs/backfill.md).
7. ``manifest``: ``manifest.json`` (snapshot offsets, ``backfill_ts``, inbox cap, summary) written
   last, atomically: its presence means the backfill completed. ``feedctl stream --bootstrap-from
   DIR`` reads it.

Run with ``feedctl backfill --out DIR`` (or ``python -m spark_jobs.backfill``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, TextIO

from feed_service.core.join import DEFAULT_INBOX_CAP
from feed_service.settings import Settings
from spark_jobs.envelope import EVENT_COLUMNS, dead_letters, parse_changes

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("feed.backfill")

SOURCE_ROLES = ("tweets", "follows", "profiles")
MANIFEST_NAME = "manifest.json"
STATE_DIR = "state"
MANIFEST_FORMAT = 1
"""Bump when the manifest or the state layout changes; the stream refuses other formats."""

Offsets = dict[str, dict[str, int]]
"""Spark's JSON offsets shape: topic -> partition (as a string) -> offset."""

#: Columns of a timeline row (the DataFrame join's output and the writer's input, minus op and ts).
TIMELINE_COLUMNS = ("timeline_id", "tweet_id", "author_id", "created_at", "version", "text", "profile_version")
STATE_OUTPUT_SCHEMA = "key string, state binary"
#: Spark's console progress bar off: :class:`Progress` reports stages and tasks on stderr itself.
SESSION_CONF = {"spark.ui.showConsoleProgress": "false"}
WRITE_REPORT_SCHEMA = "table string, task int, rows bigint, seconds double"


class BackfillError(RuntimeError):
    """The backfill cannot start or its output cannot be used (bad folder, manifest, topics)."""


# --- snapshot ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Per topic partition, the first offset present and the end offset, at the backfill's start."""

    start: Offsets
    end: Offsets

    def records_expected(self) -> int:
        """Upper bound of records in the snapshot (compaction leaves gaps inside it)."""
        return sum(self.end[t][p] - self.start[t][p] for t in self.end for p in self.end[t])


def snapshot_offsets(settings: Settings, *, timeout: float = 30.0) -> Snapshot:
    """Low and high watermarks of every partition of the three changelog topics, read now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "feed-backfill-snapshot",
                         "enable.auto.commit": False})
    try:
        start: Offsets = {}
        end: Offsets = {}
        for role in SOURCE_ROLES:
            topic = settings.topic(role)
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise BackfillError(f"topic {topic!r} ({role}) not found: {getattr(meta, 'error', None)}")
            start[topic], end[topic] = {}, {}
            for p in sorted(meta.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                start[topic][str(p)], end[topic][str(p)] = low, high
        return Snapshot(start, end)
    finally:
        consumer.close()


# --- read -------------------------------------------------------------------------------------


def read_snapshot(spark: "SparkSession", settings: Settings, snapshot: Snapshot) -> "DataFrame":
    """The Kafka records of the snapshot: every assigned partition from earliest to its end offset."""
    assign = {topic: [int(p) for p in parts] for topic, parts in snapshot.end.items()}
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", json.dumps(snapshot.end))
        # Compacted topics have offset gaps by design; they are not data loss.
        .option("failOnDataLoss", "false")
        .load()
    )


def classify(parsed: "DataFrame") -> "DataFrame":
    """Add ``tombstone`` (null value: a compaction delete marker, not an event) to parsed rows."""
    from pyspark.sql import functions as F

    return parsed.withColumn("tombstone", F.col("raw").isNull())


def valid_events(parsed: "DataFrame") -> "DataFrame":
    """Valid change events: ``key`` and the typed event columns (tombstones and rejects dropped)."""
    from pyspark.sql import functions as F

    return parsed.where(F.col("reject_code").isNull() & ~F.col("tombstone")).select(
        "key", *(name for name, _ in EVENT_COLUMNS))


# --- winners: each entity's winning change, by the engine's rules ------------------------------


def payload_digest_hex(created_at: "pd.Series", text: "pd.Series", profile_version: "pd.Series") -> "pd.Series":
    """:func:`~feed_service.core.events.tweet_payload_digest` as 16 hex digits (string order = unsigned order).

    >>> import pandas as pd
    >>> from feed_service.core.events import tweet_payload_digest
    >>> payload_digest_hex(pd.Series([5]), pd.Series(["hi"]), pd.Series([2]))[0] == f"{tweet_payload_digest(5, 'hi', 2):016x}"
    True
    """
    import pandas as pd

    from feed_service.core.events import tweet_payload_digest

    return pd.Series([f"{tweet_payload_digest(int(c), t, int(p)):016x}"
                      for c, t, p in zip(created_at, text, profile_version)], dtype=object)


@dataclass
class Winners:
    """The final source tables, one row per entity (DataFrames; persisted by the job)."""

    live_tweets: "DataFrame"
    """author_id, tweet_id, version, created_at, text, profile_version: winning upsert, not deleted."""
    deleted_tweets: "DataFrame"
    """author_id, tweet_id, version (highest delete version): deleted for good."""
    edges: "DataFrame"
    """follower_id, followee_id, version, op: the winning change of every edge ever seen."""
    profiles: "DataFrame"
    """user_id, version, display_name, avatar_url, bio: the winning payload per (user, version)."""


def winning_changes(events: "DataFrame") -> Winners:
    """Fold valid events into each entity's winning change, with the rules of :mod:`feed_service.core.events`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tweet = F.col("type") == "tweet"
    ups = events.where(tweet & (F.col("op") == "upsert")).select(
        "author_id", "tweet_id", "version", "created_at", "text", "profile_version")
    dels = (events.where(tweet & (F.col("op") == "delete"))
            .groupBy("author_id", "tweet_id").agg(F.max("version").alias("version")))

    # Highest version; among different payloads at that version, the greatest digest (content_beats).
    by_tweet = Window.partitionBy("author_id", "tweet_id")
    top = (ups.withColumn("top", F.max("version").over(by_tweet)).where(F.col("version") == F.col("top"))
           .drop("top").dropDuplicates(["author_id", "tweet_id", "created_at", "text", "profile_version"])
           .withColumn("payloads", F.count(F.lit(1)).over(by_tweet)))
    # A scalar pandas UDF (no type hints: they are strings here), evaluated only for ties, which are rare.
    digest = F.pandas_udf(lambda c, t, p: payload_digest_hex(c, t, p), "string")
    tied = (top.where(F.col("payloads") > 1)
            .withColumn("digest", digest("created_at", "text", "profile_version"))
            .withColumn("rank", F.row_number().over(by_tweet.orderBy(F.col("digest").desc())))
            .where(F.col("rank") == 1).drop("digest", "rank"))
    winners = top.where(F.col("payloads") == 1).unionByName(tied).drop("payloads")
    live = winners.join(dels.select("author_id", "tweet_id"), ["author_id", "tweet_id"], "left_anti")

    # Follow edges: highest version, unfollow (inactive) wins a tie (edge_rank).
    by_edge = Window.partitionBy("follower_id", "followee_id").orderBy(
        F.col("version").desc(), (F.col("op") == "follow").asc())
    edges = (events.where(F.col("type") == "follow")
             .select("follower_id", "followee_id", "version", "op")
             .withColumn("rank", F.row_number().over(by_edge)).where(F.col("rank") == 1).drop("rank"))

    # Profiles: per (user, version), the greatest profile_rank (null below every string).
    by_profile = Window.partitionBy("user_id", "version").orderBy(
        F.col("display_name").desc(),
        F.col("avatar_url").isNotNull().desc(), F.coalesce("avatar_url", F.lit("")).desc(),
        F.col("bio").isNotNull().desc(), F.coalesce("bio", F.lit("")).desc())
    profiles = (events.where(F.col("type") == "profile")
                .select("user_id", "version", "display_name", "avatar_url", "bio")
                .withColumn("rank", F.row_number().over(by_profile)).where(F.col("rank") == 1).drop("rank"))
    return Winners(live, dels, edges, profiles)


# --- join ---------------------------------------------------------------------------------------


def retained_tweets(live_tweets: "DataFrame", inbox_cap: int) -> "DataFrame":
    """Each author's newest ``inbox_cap`` live tweets by (created_at, tweet_id): what the engine retains."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    newest = Window.partitionBy("author_id").orderBy(F.col("created_at").desc(), F.col("tweet_id").desc())
    return live_tweets.withColumn("rank", F.row_number().over(newest)).where(F.col("rank") <= inbox_cap).drop("rank")


def join_timelines_batch(winners: Winners, inbox_cap: int) -> "DataFrame":
    """``retained tweets ⋈ active follows`` on author = followee: one row per (timeline, tweet).

    The same rows the stream's engine writes (each author key fans out its retained tweets to its
    active followers), so a timeline read newest-first and cut at ``inbox_cap`` is the reference's.
    """
    from pyspark.sql import functions as F

    active = (winners.edges.where(F.col("op") == "follow")
              .select(F.col("follower_id").alias("timeline_id"), F.col("followee_id").alias("author_id")))
    return retained_tweets(winners.live_tweets, inbox_cap).join(active, "author_id").select(*TIMELINE_COLUMNS)


# --- engine states (the stream's initial state) --------------------------------------------------


def winner_events(winners: Winners) -> "DataFrame":
    """The winners as event rows (``key`` + typed event columns): the deduplicated changelog.

    Folding these into the engine gives the same state as folding every event: per entity the state
    keeps only the winner (a deleted tweet: only that it is deleted).
    """
    from pyspark.sql import functions as F

    def as_events(df: "DataFrame", key: str, **fixed: Any) -> "DataFrame":
        cols = []
        for name, sql_type in EVENT_COLUMNS:
            if name in fixed:
                cols.append(F.lit(fixed[name]).cast(sql_type).alias(name))
            elif name in df.columns:
                cols.append(F.col(name).cast(sql_type))
            else:
                cols.append(F.lit(None).cast(sql_type).alias(name))
        return df.select(F.col(key).alias("key"), *cols)

    return (as_events(winners.live_tweets, "author_id", type="tweet", op="upsert")
            .unionByName(as_events(winners.deleted_tweets, "author_id", type="tweet", op="delete"))
            .unionByName(as_events(winners.edges.withColumn("type", F.lit("follow")), "followee_id"))
            .unionByName(as_events(winners.profiles, "user_id", type="profile")))


def key_state(events_pdf: "pd.DataFrame", *, inbox_cap: int, backfill_ts: int) -> tuple[str, bytes]:
    """One key's engine state after its events, encoded; its clock is ``backfill_ts``.

    ``step`` from an empty state whose clock starts at ``backfill_ts - 1`` stamps the key's outputs
    with ``backfill_ts``, the timestamp the backfill wrote them with; a key without output gets the
    same clock, so every bootstrapped key's next stream write is above every backfill write.
    """
    from feed_service.core.join import step
    from feed_service.core.state import encode_state
    from spark_jobs.timeline_join import events_from_rows

    events = events_from_rows(events_pdf.itertuples(index=False))
    result = step(None, events, inbox_cap=inbox_cap, clock_start=backfill_ts - 1)
    state = result.state if result.state.clock == backfill_ts else replace(result.state, clock=backfill_ts)
    return state.key, encode_state(state)


def engine_states(events: "DataFrame", *, inbox_cap: int, backfill_ts: int) -> "DataFrame":
    """``key, state``: :func:`key_state` of every key, by ``groupBy("key").applyInPandas``."""

    def fn(pdf: "pd.DataFrame") -> "pd.DataFrame":
        import pandas as pd

        key, blob = key_state(pdf, inbox_cap=inbox_cap, backfill_ts=backfill_ts)
        return pd.DataFrame({"key": [key], "state": [blob]})

    return events.groupBy("key").applyInPandas(fn, STATE_OUTPUT_SCHEMA)


def state_timeline_rows(states: "DataFrame") -> "DataFrame":
    """The timeline rows the engine states hold (retained tweets x active followers), for checks."""

    def fn(frames: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd

        from feed_service.core.state import decode_state

        for pdf in frames:
            rows = []
            for blob in pdf["state"]:
                s = decode_state(bytes(blob))
                rows.extend((f, tid, s.key, c[1], c[0], c[2], c[3]) for tid, c in s.tweets.items() for f in s.active)
            yield pd.DataFrame.from_records(rows, columns=list(TIMELINE_COLUMNS))

    schema = ("timeline_id string, tweet_id string, author_id string, created_at bigint, version bigint, "
              "text string, profile_version bigint")
    return states.mapInPandas(fn, schema)


# --- writes -------------------------------------------------------------------------------------


def _ints(series: "pd.Series") -> list[int | None]:
    import pandas as pd

    return [None if pd.isna(v) else int(v) for v in series.tolist()]  # nulls: None, NaN or pd.NA


def _texts(series: "pd.Series") -> list[str | None]:
    import pandas as pd

    return [None if pd.isna(v) else v for v in series.tolist()]


def write_frames(settings: Settings, table: str, ts: int, *, write: bool) -> Callable:
    """``mapInPandas`` function writing one table's rows from an executor; yields one report row per task.

    ``table``: ``timeline`` (:data:`TIMELINE_COLUMNS`), ``tweets`` (+ ``deleted``) or ``profiles``.
    With ``write`` False rows are only counted (``--no-write``).
    """

    def fn(frames: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd
        from pyspark import TaskContext

        writer = None
        if write:
            from spark_jobs.cassandra_sink import writer_for

            writer = writer_for(settings)
        started, count = time.perf_counter(), 0
        for pdf in frames:
            if pdf.empty:
                continue
            count += len(pdf)
            if writer is None:
                continue
            if table == "timeline":
                rows = list(zip(["insert"] * len(pdf), pdf["timeline_id"].tolist(), pdf["tweet_id"].tolist(),
                                pdf["author_id"].tolist(), _ints(pdf["created_at"]), _ints(pdf["version"]),
                                _texts(pdf["text"]), _ints(pdf["profile_version"]), [ts] * len(pdf)))
                writer.write(timeline=rows)
            elif table == "tweets":
                deleted = pdf["deleted"].tolist()
                rows = [(tid, aid, None, None, None, None, ts) if gone else (tid, aid, c, v, t, p, ts)
                        for tid, aid, c, v, t, p, gone in zip(
                            pdf["tweet_id"].tolist(), pdf["author_id"].tolist(), _ints(pdf["created_at"]),
                            _ints(pdf["version"]), _texts(pdf["text"]), _ints(pdf["profile_version"]), deleted)]
                writer.write(tweets=rows)
            else:
                rows = list(zip(pdf["user_id"].tolist(), _ints(pdf["version"]), _texts(pdf["display_name"]),
                                _texts(pdf["avatar_url"]), _texts(pdf["bio"]), [ts] * len(pdf)))
                writer.write(profiles=rows)
        ctx = TaskContext.get()
        yield pd.DataFrame({"table": [table], "task": [ctx.partitionId() if ctx else 0], "rows": [count],
                            "seconds": [time.perf_counter() - started]})

    return fn


def tweet_rows(winners: Winners) -> "DataFrame":
    """Rows of the tweets table: every live tweet's winner, and a delete of every deleted tweet."""
    from pyspark.sql import functions as F

    live = winners.live_tweets.select("tweet_id", "author_id", "created_at", "version", "text", "profile_version",
                                      F.lit(False).alias("deleted"))
    gone = winners.deleted_tweets.select(
        "tweet_id", "author_id", F.lit(None).cast("bigint").alias("created_at"),
        F.lit(None).cast("bigint").alias("version"), F.lit(None).cast("string").alias("text"),
        F.lit(None).cast("bigint").alias("profile_version"), F.lit(True).alias("deleted"))
    return live.unionByName(gone)


# --- progress -----------------------------------------------------------------------------------


class Progress:
    """Stage lines on ``out`` (stderr), and a ticker printing Spark's task progress of long stages."""

    def __init__(self, spark: "SparkSession", out: TextIO = sys.stderr, *, tick_seconds: float = 5.0) -> None:
        self.spark = spark
        self.out = out
        self.tick_seconds = tick_seconds
        self.started = time.monotonic()
        self.durations: dict[str, float] = {}
        self._stage: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def say(self, text: str) -> None:
        print(f"[backfill {time.monotonic() - self.started:7.1f}s] {text}", file=self.out, flush=True)

    def stage(self, name: str) -> "_StageTimer":
        return _StageTimer(self, name)

    def _tick(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        while not self._stop.wait(self.tick_seconds):
            stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            parts = [f"spark stage {s.stageId}: {s.numCompletedTasks}/{s.numTasks} tasks done, "
                     f"{s.numActiveTasks} running" for s in stages if s is not None]
            if parts and self._stage:
                self.say(f"  {self._stage} ... " + "; ".join(parts))

    def __enter__(self) -> "Progress":
        self._thread = threading.Thread(target=self._tick, name="backfill-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.tick_seconds + 1)


class _StageTimer:
    def __init__(self, progress: Progress, name: str) -> None:
        self.progress, self.name = progress, name

    def __enter__(self) -> "_StageTimer":
        self.progress._stage = self.name
        self.progress.spark.sparkContext.setJobDescription(f"backfill: {self.name}")
        self.progress.say(f"stage {self.name}: started")
        self._t0 = time.monotonic()
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        elapsed = time.monotonic() - self._t0
        self.progress.durations[self.name] = round(elapsed, 2)
        self.progress._stage = None
        self.progress.say(f"stage {self.name}: {'done' if exc_type is None else 'FAILED'} in {elapsed:.1f}s")


# --- the job ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackfillOptions:
    out: Path
    inbox_cap: int = DEFAULT_INBOX_CAP
    write: bool = True
    dead_letters: bool = False
    backfill_ts: int | None = None
    """Write timestamp of every row (µs since epoch); None = now."""


@dataclass
class BackfillResult:
    manifest: dict[str, Any]
    summary: dict[str, Any] = field(default_factory=dict)


def _check_out(out: Path) -> None:
    if (out / MANIFEST_NAME).exists():
        raise BackfillError(f"{out} already holds a completed backfill ({MANIFEST_NAME}); choose a new --out")
    out.mkdir(parents=True, exist_ok=True)


def run_backfill(spark: "SparkSession", settings: Settings, options: BackfillOptions,
                 *, out: TextIO = sys.stderr) -> BackfillResult:
    """Run every stage (see the module docstring); returns the manifest written to ``options.out``."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    if options.inbox_cap < 1:
        raise BackfillError(f"inbox_cap must be >= 1, got {options.inbox_cap}")
    out_dir = options.out.resolve()
    _check_out(out_dir)
    backfill_ts = options.backfill_ts if options.backfill_ts is not None else time.time_ns() // 1000
    progress = Progress(spark, out)
    persisted: list[DataFrame] = []

    def keep(df: "DataFrame") -> "DataFrame":
        persisted.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    summary: dict[str, Any] = {"backfill_ts": backfill_ts, "inbox_cap": options.inbox_cap}
    with progress:
        try:
            with progress.stage("snapshot"):
                snap = snapshot_offsets(settings)
                for topic in snap.end:
                    parts = ", ".join(f"p{p}: {snap.start[topic][p]}..{snap.end[topic][p]}" for p in snap.end[topic])
                    progress.say(f"  {topic}: {parts}")

            with progress.stage("read"):
                parsed = keep(classify(parse_changes(read_snapshot(spark, settings, snap))))
                per_partition = (parsed.groupBy("topic", "partition").agg(
                    F.count(F.lit(1)).alias("records"),
                    F.sum(F.col("tombstone").cast("int")).alias("tombstones"),
                    F.sum((F.col("reject_code").isNotNull() & ~F.col("tombstone")).cast("int")).alias("invalid"),
                ).orderBy("topic", "partition").collect())
                records = tombstones = invalid = 0
                summary["partitions"] = {}
                for r in per_partition:
                    progress.say(f"  {r.topic} p{r.partition}: {r.records} records read, {r.tombstones} tombstones,"
                                 f" {r.invalid} invalid")
                    summary["partitions"][f"{r.topic}/{r.partition}"] = {
                        "records": r.records, "tombstones": r.tombstones, "invalid": r.invalid}
                    records, tombstones, invalid = records + r.records, tombstones + r.tombstones, invalid + r.invalid
                reasons = {r.reject_code: r["count"] for r in parsed.where(
                    F.col("reject_code").isNotNull() & ~F.col("tombstone")).groupBy("reject_code").count().collect()}
                summary.update(records_read=records, tombstones=tombstones, invalid=invalid,
                               invalid_by_reason=dict(sorted(reasons.items())))
                if options.dead_letters and invalid:
                    (dead_letters(parsed.where(~F.col("tombstone"))).write.format("kafka")
                     .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
                     .option("topic", settings.topic("dead_letter")).save())
                    progress.say(f"  {invalid} invalid records sent to {settings.topic('dead_letter')}")

            with progress.stage("winners"):
                events = valid_events(parsed)
                w = winning_changes(events)
                winners = Winners(keep(w.live_tweets), keep(w.deleted_tweets), keep(w.edges), keep(w.profiles))
                active = winners.edges.where(F.col("op") == "follow")
                entities = {
                    "tweets_live": winners.live_tweets.count(),
                    "tweets_deleted": winners.deleted_tweets.count(),
                    "follow_edges": winners.edges.count(),
                    "follow_edges_active": active.count(),
                    "profile_versions": winners.profiles.count(),
                }
                summary["entities"] = entities
                progress.say("  " + ", ".join(f"{k} {v}" for k, v in entities.items()))

            with progress.stage("states"):
                states = engine_states(winner_events(winners), inbox_cap=options.inbox_cap, backfill_ts=backfill_ts)
                state_path = out_dir / STATE_DIR
                states.write.mode("overwrite").parquet(str(state_path))
                summary["keys"] = spark.read.parquet(str(state_path)).count()
                progress.say(f"  {summary['keys']} author keys -> {state_path}")

            with progress.stage("join"):
                timelines = join_timelines_batch(winners, options.inbox_cap)
                retained = retained_tweets(winners.live_tweets, options.inbox_cap)
                summary["timelines"] = (active.join(retained.select(F.col("author_id").alias("followee_id")).distinct(),
                                                    "followee_id").select("follower_id").distinct().count())
                progress.say(f"  {summary['timelines']} non-empty timelines")

            with progress.stage("write" if options.write else "count (--no-write)"):
                reports = []
                # Round robin: the join's partitions follow author keys, so a celebrity's fan-out would
                # leave one writer working alone (seen in bench/bench_backfill.py).
                writers = max(2, spark.sparkContext.defaultParallelism)
                for table, df in (("timeline", timelines.repartition(writers)), ("tweets", tweet_rows(winners)),
                                  ("profiles", winners.profiles)):
                    t0 = time.monotonic()
                    rows = df.mapInPandas(write_frames(settings, table, backfill_ts, write=options.write),
                                          WRITE_REPORT_SCHEMA).collect()
                    elapsed = time.monotonic() - t0
                    n = sum(r.rows for r in rows)
                    tasks = ", ".join(f"task {r.task}: {r.rows}" for r in sorted(rows, key=lambda r: r.task))
                    progress.say(f"  {table}: {n} rows {'written' if options.write else 'counted'} in {elapsed:.1f}s"
                                 f" ({n / elapsed if elapsed else 0:,.0f}/s) [{tasks}]")
                    reports.append((table, n, elapsed))
                summary["rows"] = {t: n for t, n, _ in reports}
                summary["write_seconds"] = {t: round(s, 2) for t, _, s in reports}
                summary["written"] = options.write

            with progress.stage("manifest"):
                summary["stage_seconds"] = dict(progress.durations)
                summary["duration_seconds"] = round(time.monotonic() - progress.started, 2)
                manifest = {
                    "format": MANIFEST_FORMAT,
                    "completed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "backfill_ts": backfill_ts,
                    "stream_clock_start": backfill_ts,
                    "inbox_cap": options.inbox_cap,
                    "topics": {role: settings.topic(role) for role in SOURCE_ROLES},
                    "keyspace": settings.keyspace,
                    "start_offsets": snap.start,
                    "end_offsets": snap.end,
                    "state": STATE_DIR,
                    "summary": summary,
                }
                tmp = out_dir / f".{MANIFEST_NAME}.tmp"
                tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
                tmp.replace(out_dir / MANIFEST_NAME)
        finally:
            for df in persisted:
                df.unpersist()
    summary["duration_seconds"] = round(time.monotonic() - progress.started, 2)
    print(format_summary(summary), file=out, flush=True)
    return BackfillResult(manifest, summary)


def format_summary(summary: dict[str, Any]) -> str:
    """The final report, one line per figure.

    >>> print(format_summary({"records_read": 10, "tombstones": 1, "invalid": 2, "invalid_by_reason": {"bad_json": 2},
    ...     "entities": {"tweets_live": 3}, "keys": 4, "timelines": 5, "rows": {"timeline": 6}, "written": True,
    ...     "duration_seconds": 7.5}))
    backfill summary
      records read        10 (tombstones skipped 1, invalid 2: bad_json 2)
      entities            tweets_live 3
      author keys         4
      timelines           5
      rows written        timeline 6
      duration            7.5 s
    """
    reasons = ", ".join(f"{k} {v}" for k, v in summary.get("invalid_by_reason", {}).items())
    lines = [
        "backfill summary",
        f"  records read        {summary.get('records_read', 0)} (tombstones skipped {summary.get('tombstones', 0)},"
        f" invalid {summary.get('invalid', 0)}{': ' + reasons if reasons else ''})",
        "  entities            " + ", ".join(f"{k} {v}" for k, v in summary.get("entities", {}).items()),
        f"  author keys         {summary.get('keys', 0)}",
        f"  timelines           {summary.get('timelines', 0)}",
        f"  rows {'written' if summary.get('written') else 'counted'}        "
        + ", ".join(f"{k} {v}" for k, v in summary.get("rows", {}).items()),
        f"  duration            {summary.get('duration_seconds', 0)} s",
    ]
    return "\n".join(lines)


# --- bootstrap of the stream ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """What a stream needs to continue after a backfill: offsets, clock and the state folder."""

    folder: Path
    starting_offsets: str
    """Spark JSON offsets: the backfill's snapshot end offsets."""
    clock_start: int
    inbox_cap: int
    state_path: Path


def load_bootstrap(folder: Path, settings: Settings) -> Bootstrap:
    """Read and check a completed backfill's manifest; raises :class:`BackfillError` if unusable."""
    folder = folder.resolve()
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
    except FileNotFoundError:
        raise BackfillError(f"{folder} holds no completed backfill (no {MANIFEST_NAME})") from None
    except ValueError as exc:
        raise BackfillError(f"{folder / MANIFEST_NAME}: not JSON: {exc}") from None
    if manifest.get("format") != MANIFEST_FORMAT:
        raise BackfillError(f"{folder}: manifest format {manifest.get('format')!r}, expected {MANIFEST_FORMAT}")
    topics = {role: settings.topic(role) for role in SOURCE_ROLES}
    if manifest["topics"] != topics:
        raise BackfillError(f"{folder}: backfill of topics {manifest['topics']}, but the stream reads {topics}")
    state_path = folder / manifest["state"]
    if not state_path.is_dir():
        raise BackfillError(f"{folder}: state folder {state_path} missing")
    return Bootstrap(folder, json.dumps(manifest["end_offsets"]), int(manifest["stream_clock_start"]),
                     int(manifest["inbox_cap"]), state_path)


# --- command line ---------------------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True,
                        help="output folder (engine states, manifest.json); must not hold a completed backfill")
    parser.add_argument("--inbox-cap", type=_positive, default=DEFAULT_INBOX_CAP,
                        help=f"entries kept per timeline and tweets per author (default {DEFAULT_INBOX_CAP});"
                             " the bootstrapped stream must use the same")
    parser.add_argument("--no-write", action="store_true",
                        help="compute and count everything, write the states and manifest, but not Cassandra")
    parser.add_argument("--dead-letters", action="store_true",
                        help="also send invalid records to the dead-letter topic (tombstones are never sent)")


def options_from_args(args: argparse.Namespace) -> BackfillOptions:
    return BackfillOptions(out=args.out, inbox_cap=args.inbox_cap, write=not args.no_write,
                           dead_letters=args.dead_letters)


def run(settings: Settings, options: BackfillOptions) -> int:
    """Build a session, run the backfill, print the summary; exit code 0, or 2 if it cannot start."""
    from feed_service.stack.spark import build_session

    try:
        _check_out(options.out.resolve())
        spark = build_session("feed-backfill", shuffle_partitions=4, extra_conf=SESSION_CONF)
    except BackfillError as exc:
        print(f"feedctl backfill: {exc}", file=sys.stderr)
        return 2
    try:
        run_backfill(spark, settings, options)
    except BackfillError as exc:
        print(f"feedctl backfill: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="backfill", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(Settings.from_env(), options_from_args(args))


if __name__ == "__main__":
    sys.exit(main())
