"""The streaming job: Kafka changelogs -> validated changes -> stateful join -> Cassandra.

One query, ``timeline-join``, reads the changelog topics (``SOURCE_ROLES``): valid changes, keyed by
join key (a block under both of its users), go through the join engine in the stateful operator
(RocksDB state store); records that fail validation pass through it under a dead-letter route;
``foreachBatch`` writes from the executors, rows to Cassandra and dead letters (reason, source
topic, partition and offset) to the dead-letter topic. (A second query for the dead letters doubled
the fixed cost of every micro-batch on this 2-core machine.)

Its checkpoint lives under ``--checkpoint``; state and Kafka offsets survive restarts, and a batch
replayed after a crash rewrites the same rows with the same timestamps (dead letters are at least
once: a replayed batch can publish a record twice). The write timestamps
of a new checkpoint start at ``clock_start`` (microseconds at its creation, kept in the checkpoint
folder), so a later pipeline's writes supersede an earlier one's on the same keyspace.

Run with ``feedctl stream`` (or ``python -m spark_jobs.stream``; ``spark-submit spark_jobs/stream.py``
works the same when the Kafka connector jars are passed with ``--jars``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from feed_service.errors import CheckpointError, ConfigError, FeedError
from feed_service.settings import Settings
from feed_service.kafka.offsets import SOURCE_ROLES, watermarks
from spark_jobs.checkpoint import CheckpointLock, inspect_checkpoint
from spark_jobs.envelope import parse_changes, routed_changes
from spark_jobs.restarts import Restarts
from spark_jobs.state_stats import PeriodicStats, live_state, stream_stats
from spark_jobs.stream_metrics import (
    DEFAULT_METRICS_HOST, DEFAULT_METRICS_PORT, LAG_TIMEOUT_SECONDS, LagRefresher, StreamMetrics,
)
from spark_jobs.job_cli import job_main, refused
from spark_jobs.timeline_join import INITIAL_STATE_OPERATORS, OPERATORS, JoinConfig, Operator, join_timelines
from spark_jobs.trimming import StreamTrimming

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from spark_jobs.cassandra_sink import PartitionReport

log = logging.getLogger("feed.stream")

DEFAULT_CHECKPOINT = Path(".stack/local/checkpoints/stream")
#: transformWithState (Row API): a micro-batch costs about half of what the pandas operators cost
#: (no pandas frame built per key, in or out; bench/bench_stream.py, docs/streaming.md), and the
#: transformWithState family takes an initial state (backfill bootstrap).
DEFAULT_OPERATOR: Operator = "transformWithState"
#: Bounds a micro-batch after downtime so the first batches after a restart stay short.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 200_000
#: A failed query is restarted from its checkpoint (always safe: replays are idempotent) up to this
#: many times in a row; a batch that completes resets the count (spark_jobs/restarts.py).
MAX_CONSECUTIVE_RESTARTS = 5
RESTART_BACKOFF_SECONDS = 5.0
#: How often the progress file is rewritten.
STATUS_INTERVAL_SECONDS = 1.0
#: Exit codes: the query failed too often in a row; the job was refused before it ran (FeedError).
EXIT_GAVE_UP = 1
#: How often the per-key state size and rows per timeline are computed for the progress record
#: (spark_jobs/state_stats.py; 0 = never): a pass over the whole state, so minutes apart.
DEFAULT_STATE_STATS_INTERVAL = 300.0
#: Timelines whose rows that periodic computation counts (a sample; all of them when there are fewer).
STATE_STATS_TIMELINE_SAMPLE = 1000
#: Completed batches' sink reports kept for the metrics until the supervisor takes them (about once a
#: second); beyond this many the oldest are dropped.
MAX_PENDING_REPORTS = 1000


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """How to run the stream; the view's shape (inbox cap) comes from the settings."""

    checkpoint: Path = DEFAULT_CHECKPOINT
    operator: Operator | None = None
    """None: the operator the checkpoint was created with, or DEFAULT_OPERATOR for a new one."""
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    trigger_seconds: float = 0.0
    starting_offsets: str = "earliest"
    bootstrap_from: Path | None = None
    """A completed backfill's folder (``feedctl backfill --out``) to continue from (new checkpoint only)."""
    settings_changes: Mapping[str, Any] = field(default_factory=dict)
    """Settings given on the command line (``--inbox-cap``): :func:`run_stream` applies them with
    :meth:`Settings.replace` before anything starts; :func:`start_stream` reads only the settings."""
    state_stats_interval: float = DEFAULT_STATE_STATS_INTERVAL
    """Seconds between computations of the state size per key and rows per timeline; 0 = off."""
    until_caught_up: bool = False
    """Spark's availableNow trigger instead of ``trigger_seconds``: finish a pending batch with its logged
    offsets, process what the topics hold at the start, then end with every batch committed (what
    ``feedctl reshard --finish-pending`` needs; docs/streaming.md, "State partitions")."""
    metrics_port: int = 0
    """Port of the Prometheus ``/metrics`` endpoint the driver serves (spark_jobs/stream_metrics.py); 0 = none.
    ``feedctl stream`` defaults to ``FEED_STREAM_METRICS_PORT``, else 9465."""
    metrics_host: str = DEFAULT_METRICS_HOST
    """Address the endpoint listens on (``FEED_STREAM_METRICS_HOST``)."""


def clock_start_for(checkpoint: Path, initial: int | None = None) -> int:
    """The checkpoint's first write timestamp, fixed on first use: ``initial`` (a backfill's clock)
    or now in µs since epoch. Restarts read it back, so replayed batches reuse their timestamps."""
    path = checkpoint / "clock_start"
    try:
        return int(path.read_text())
    except FileNotFoundError:
        checkpoint.mkdir(parents=True, exist_ok=True)
        value = initial if initial is not None else time.time_ns() // 1000
        tmp = checkpoint / ".clock_start.tmp"
        tmp.write_text(str(value))
        tmp.replace(path)
        return value


def operator_for(checkpoint: Path, requested: Operator | None) -> Operator:
    """The checkpoint's stateful operator, fixed at creation (their state layouts differ);
    :class:`CheckpointError` if ``requested`` is another one."""
    path = checkpoint / "operator"
    try:
        recorded = path.read_text().strip()
    except FileNotFoundError:
        chosen = requested or DEFAULT_OPERATOR
        checkpoint.mkdir(parents=True, exist_ok=True)
        path.write_text(chosen)
        return chosen
    if requested is not None and requested != recorded:
        raise CheckpointError(f"checkpoint {checkpoint} was created with --operator {recorded}; "
                              f"it cannot continue with {requested} (use a new checkpoint)")
    return recorded  # type: ignore[return-value]


KAFKA_API_TIMEOUT_MS = 15_000
KAFKA_REQUEST_TIMEOUT_MS = 10_000


def read_changelogs(spark: "SparkSession", settings: Settings, options: StreamOptions) -> "DataFrame":
    topics = ",".join(settings.topic(role) for role in SOURCE_ROLES)
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
        .option("subscribe", topics)
        .option("startingOffsets", options.starting_offsets)
        .option("maxOffsetsPerTrigger", str(options.max_offsets_per_trigger))
        # Compacted topics have offset gaps by design; they are not data loss.
        .option("failOnDataLoss", "false")
        # An offset lookup stuck on a broker that died waits out the client's API timeout (60 s by
        # default) before Spark retries it with fresh metadata: fail over in seconds (docs/cluster.md).
        .option("kafka.default.api.timeout.ms", str(KAFKA_API_TIMEOUT_MS))
        .option("kafka.request.timeout.ms", str(KAFKA_REQUEST_TIMEOUT_MS))
        .load()
    )


@dataclass
class BatchTimes:
    """Where the last micro-batch's sink time went (ms), for the progress record and the log: the
    Spark job that reads, joins and writes (``job``), the Cassandra and dead-letter writes inside it
    summed over partitions (``writes``, so up to the partitions' count times the job's wall time),
    and the driver's trim pass after it (``trim``)."""

    batch_id: int = -1
    job: float = 0.0
    writes: float = 0.0
    trim: float = 0.0
    completed: "deque[tuple[PartitionReport, int]]" = field(default_factory=lambda: deque(maxlen=MAX_PENDING_REPORTS))
    """What each completed batch wrote (its partitions' reports merged) and the rows its trim pass
    deleted, until the supervisor hands them to the metrics (:meth:`take_completed`)."""

    def record(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "job_ms": round(self.job), "writes_ms": round(self.writes),
                "trim_ms": round(self.trim)}

    def take_completed(self) -> "list[tuple[PartitionReport, int]]":
        """The completed batches' reports not taken yet, oldest first (the foreachBatch thread appends)."""
        out = []
        while True:
            try:
                out.append(self.completed.popleft())
            except IndexError:
                return out


def _write_batch(settings: Settings, counter: Any, trimming: "StreamTrimming | None" = None,
                 write_seconds: Any = None, times: BatchTimes | None = None) -> Any:
    """The foreachBatch function: the executors write the rows and each partition hands back its
    :class:`~spark_jobs.cassandra_sink.PartitionReport` (home-timeline upserts per timeline, rows
    written, dead letters, view changes); the driver then trims the timelines that may be over the
    bound, before the batch ends (docs/trimming.md). ``times`` gets the batch's timings and, once the
    call completes, its merged report for the metrics (a failed call adds nothing; its replay does)."""
    from spark_jobs.cassandra_sink import merge_reports, write_partition

    def write(batch_df: "DataFrame", batch_id: int) -> None:
        started = time.perf_counter()
        written_before = write_seconds.value if write_seconds is not None else 0.0
        report = merge_reports(batch_df.rdd.mapPartitions(
            lambda rows: [write_partition(settings, rows, counter, write_seconds)]).collect())
        joined = time.perf_counter()
        trimmed_before = trimming.trimmed_rows if trimming is not None else 0
        if trimming is not None:
            trimming.after_batch(report.upserts)
        if times is not None:
            times.batch_id, times.job, times.trim = batch_id, (joined - started) * 1000, (time.perf_counter() - joined) * 1000
            times.writes = ((write_seconds.value - written_before) * 1000) if write_seconds is not None else 0.0
            times.completed.append((report, (trimming.trimmed_rows if trimming is not None else 0) - trimmed_before))

    return write


@dataclass
class RunningStream:
    """The query's handle, plus the accumulator of timeline rows written and the trimming of home
    timelines (its counters: ``trimming.record()``)."""

    join: "StreamingQuery"
    timeline_rows: Any
    trimming: "StreamTrimming | None" = None
    until_caught_up: bool = False
    times: BatchTimes = field(default_factory=BatchTimes)
    """Where the last batch's sink time went."""
    """The query ends by itself once caught up (availableNow): its end without an error is the goal."""

    def stop(self) -> None:
        try:
            self.join.stop()
        except Exception:  # noqa: BLE001 - stopping a failed query is best effort
            log.exception("stopping %s", self.join.name)
        if self.trimming is not None:
            try:
                self.trimming.close()
            except Exception:  # noqa: BLE001 - closing the trimmer's session is best effort
                log.exception("closing the trimmer")


def start_stream(
    spark: "SparkSession",
    settings: Settings,
    options: StreamOptions,
    *,
    initial_state: "DataFrame | None" = None,
    clock_start: int | None = None,
) -> RunningStream:
    """Start the query; returns at once (it runs in the background of this SparkSession).

    ``initial_state`` (``key``, ``state``) and ``clock_start`` bootstrap a new checkpoint from a
    backfill; ``options.starting_offsets`` then holds the backfill's snapshot offsets.
    """
    parsed = parse_changes(read_changelogs(spark, settings, options))
    config = JoinConfig(inbox_cap=settings.inbox_cap, pull_threshold=settings.pull_threshold,
                        clock_start=clock_start_for(options.checkpoint, clock_start),
                        horizon_ms=settings.retention.horizon_ms)
    outputs = join_timelines(
        routed_changes(parsed),
        config=config,
        operator=operator_for(options.checkpoint, options.operator),
        initial_state=initial_state,
    )
    counter = spark.sparkContext.accumulator(0)
    write_seconds = spark.sparkContext.accumulator(0.0)
    times = BatchTimes()
    trimming = StreamTrimming(settings)  # per start: a restarted query trims what it writes first
    join_query = (
        outputs.writeStream.queryName("timeline-join")
        .outputMode("append")
        .option("checkpointLocation", str(options.checkpoint / "join"))
        .trigger(**trigger_of(options))
        .foreachBatch(_write_batch(settings, counter, trimming, write_seconds, times))
        .start()
    )
    return RunningStream(join_query, counter, trimming, until_caught_up=options.until_caught_up, times=times)


def trigger_of(options: StreamOptions) -> dict[str, Any]:
    """The ``DataStreamWriter.trigger`` arguments: a fixed interval (0 = back to back) or, with
    ``until_caught_up``, availableNow. Either one re-runs an uncommitted batch with its logged offsets first."""
    if options.until_caught_up:
        return {"availableNow": True}
    return {"processingTime": f"{options.trigger_seconds} seconds"}


def progress_record(stream: RunningStream, stats: PeriodicStats | None = None) -> dict[str, Any]:
    """What the stream has done: the last batch id and the source end offsets; the state size the
    last batch reported (``state``, cheap) and the latest periodic ``state_stats`` (docs/streaming.md)."""
    record: dict[str, Any] = {"time": time.time(), "timeline_rows_written": stream.timeline_rows.value}
    for query in (stream.join,):
        progress = query.lastProgress
        record[query.name] = {
            "active": query.isActive,
            "batch_id": progress["batchId"] if progress else None,
            "end_offsets": {k: v for s in (progress or {}).get("sources", []) for k, v in _offsets(s).items()},
            "input_rows": progress.get("numInputRows") if progress else None,
            "duration_ms": progress.get("durationMs", {}).get("triggerExecution") if progress else None,
            "state": live_state(progress),
        }
    record["sink"] = stream.times.record()
    if stream.trimming is not None:
        record["trimming"] = stream.trimming.record()
    if stats is not None:
        record["state_stats"] = stats.latest()
    return record


def _offsets(source: dict[str, Any]) -> dict[str, dict[str, int]]:
    end = source.get("endOffset")
    if isinstance(end, str):
        end = json.loads(end)
    return end or {}


def write_status(path: Path, record: dict[str, Any]) -> None:
    """Replace the progress file atomically: a reader never sees half a record."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)


def observe(metrics: StreamMetrics | None, stream: RunningStream) -> None:
    """Hand ``stream``'s completed batches to ``metrics``: the sink reports its foreachBatch calls left
    and the query's new progress. Never raises: metrics must not stop the stream."""
    if metrics is None:
        return
    try:
        for report, trimmed_rows in stream.times.take_completed():
            metrics.batch_written(report, trimmed_rows=trimmed_rows)
        metrics.observe_query(stream.join)
    except Exception:  # noqa: BLE001 - a metrics bug or a query gone away: log, keep streaming
        log.warning("stream metrics not updated", exc_info=True)


def supervise(start: Callable[[], RunningStream], stop: threading.Event, *, status_file: Path,
              restarts: Restarts, stats: PeriodicStats | None = None, metrics: StreamMetrics | None = None) -> int:
    """Keep the query of ``start()`` running until ``stop`` is set, or until it ends by itself without
    an error when started ``until_caught_up``; returns the exit code.

    A query that fails (a Cassandra timeout, a Python worker that did not start in time) is
    restarted from its checkpoint after ``restarts.backoff()``; when ``restarts`` says give up
    (too many failures in a row without a completed batch) it returns :data:`EXIT_GAVE_UP` for the
    supervisor to act. The progress record, with the restart counts, goes to ``status_file``, with
    the latest result of ``stats`` (started here, stopped on the way out) if given; ``metrics`` gets
    every completed batch and every restart (:func:`observe`, once per loop).
    """
    stream = start()
    last_batch = None
    if stats is not None:
        stats.start()
    try:
        while not stop.is_set():
            if not stream.join.isActive:
                observe(metrics, stream)
                error = stream.join.exception()
                if error is None and stream.until_caught_up:  # availableNow ended it: done, not failed
                    log.info("query %s caught up and ended (last batch %s)", stream.join.name,
                             (stream.join.lastProgress or {}).get("batchId"))
                    write_status(status_file, {**progress_record(stream, stats), **restarts.record()})
                    break
                may_restart = restarts.failed(error)
                log.error("query %s failed (%d in a row): %s", stream.join.name, restarts.consecutive, error)
                stream.stop()
                if not may_restart:
                    return EXIT_GAVE_UP
                if stop.wait(restarts.backoff()):
                    break
                stream = start()
                restarts.restarted()
                if metrics is not None:
                    metrics.restarted()
                continue
            observe(metrics, stream)
            record = progress_record(stream, stats)
            batch = record["timeline-join"]["batch_id"]
            if batch is not None and batch != last_batch:
                last_batch = batch
                restarts.progressed()
                p = stream.join.lastProgress or {}
                sink = stream.times.record() if stream.times.batch_id == batch else {}
                log.info("batch %s: %s input rows, %s%s", batch, p.get("numInputRows"),
                         " ".join(f"{k}={v}ms" for k, v in sorted((p.get("durationMs") or {}).items())),
                         "; sink " + " ".join(f"{k}={v}" for k, v in sink.items() if k != "batch_id") if sink else "")
            record.update(restarts.record())
            write_status(status_file, record)
            stop.wait(STATUS_INTERVAL_SECONDS)
        return 0
    finally:
        if stats is not None:
            stats.stop()
        stream.stop()


def run_stream(settings: Settings, options: StreamOptions, *, status_file: Path | None = None) -> int:
    """Run the stream until SIGTERM/SIGINT (or, ``until_caught_up``, until it has committed what the
    topics held at its start); writes progress to ``status_file`` every second.

    Returns 0 after a stop or once caught up, :data:`EXIT_GAVE_UP` if the query kept failing (:func:`supervise`).
    Settings, checkpoint and bootstrap are checked before the Spark session starts, so a refusal
    (a :class:`FeedError`) is quick.
    """
    from feed_service.stack.spark import build_session

    settings = settings.replace(**options.settings_changes)
    bootstrap_kwargs: dict[str, Any] = {}
    if options.bootstrap_from is not None:
        options, bootstrap_kwargs = _bootstrap(settings, options)
    # Held until the stream ends: a second stream or a reshard on this checkpoint is refused meanwhile.
    lock = CheckpointLock.acquire(options.checkpoint, "feedctl stream")
    try:
        operator = operator_for(options.checkpoint, options.operator)
        partitions = state_partitions_for(options.checkpoint, settings.state_partitions)
        spark = build_session("feed-stream", extra_conf={"spark.sql.shuffle.partitions": str(partitions)})
    except BaseException:
        lock.release()
        raise
    stop_metrics: Callable[[], None] = lambda: None  # noqa: E731
    try:
        if bootstrap_kwargs:
            bootstrap_kwargs["initial_state"] = spark.read.parquet(str(bootstrap_kwargs.pop("state_path")))
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        restarts = Restarts(MAX_CONSECUTIVE_RESTARTS, RESTART_BACKOFF_SECONDS)
        log.info("stream started: checkpoint %s, operator %s, %d state partitions", options.checkpoint, operator,
                 partitions)
        stats = (stream_stats(spark, settings, options.checkpoint, options.state_stats_interval,
                              sample=STATE_STATS_TIMELINE_SAMPLE) if options.state_stats_interval > 0 else None)
        metrics, stop_metrics = serve_metrics(settings, options)
        # Every start gets the same initial state: if batch 0 never committed, a restart still bootstraps it.
        exit_code = supervise(lambda: start_stream(spark, settings, options, **bootstrap_kwargs), stop,
                              status_file=status_file or options.checkpoint / "progress.json", restarts=restarts,
                              stats=stats, metrics=metrics)
    finally:
        stop_metrics()
        spark.stop()
        lock.release()
    if exit_code == 0:
        log.info("stream stopped after %d restarts", restarts.total)
    else:
        log.error("stream gave up after %d failures in a row (%d restarts in all); last error: %s",
                  restarts.consecutive, restarts.total, restarts.last_error)
    return exit_code


def serve_metrics(settings: Settings, options: StreamOptions) -> tuple[StreamMetrics, Callable[[], None]]:
    """The stream's metrics (spark_jobs/stream_metrics.py) and, unless ``options.metrics_port`` is 0, their
    ``/metrics`` endpoint and the consumer-lag refresher; returns the metrics and what stops both.

    An address that cannot be bound is logged as an error and the stream runs without the endpoint:
    the view matters more than its figures.
    """
    metrics = StreamMetrics()
    if not options.metrics_port:
        return metrics, lambda: None
    try:
        http = metrics.start_http(options.metrics_host, options.metrics_port)
    except OSError as exc:
        log.error("metrics endpoint not started (the stream runs without it): cannot listen on %s:%d: %s",
                  options.metrics_host, options.metrics_port, exc)
        return metrics, lambda: None
    log.info("metrics on http://%s:%d/metrics", options.metrics_host, http.server_port)
    lag = LagRefresher(metrics, lambda: watermarks(settings, timeout=LAG_TIMEOUT_SECONDS)).start()

    def stop() -> None:
        lag.stop()
        http.shutdown()
        http.server_close()

    return metrics, stop


def state_partitions_for(checkpoint: Path, requested: int) -> int:
    """The state partitions the query runs with: ``requested`` for a new checkpoint, else the number
    the checkpoint pinned (Spark takes it from the offset log whatever the session says).

    A difference is logged as a warning naming ``feedctl reshard``, the one way to change it; an
    offset log this cannot read is left to Spark (docs/streaming.md, "State partitions").
    """
    try:
        info = inspect_checkpoint(checkpoint)
    except CheckpointError as exc:
        log.warning("cannot read the pinned state partitions (%s); Spark uses the checkpoint's own", exc)
        return requested
    if info.is_new or info.state_partitions is None:
        log.info("new checkpoint %s: %d state partitions, pinned from its first batch on", checkpoint, requested)
        return requested
    pinned = info.state_partitions
    log.info("checkpoint %s has %d state partitions (pinned in its offset log)", checkpoint, pinned)
    if pinned != requested:
        log.warning("state partitions: %d asked (--state-partitions or FEED_STATE_PARTITIONS) but checkpoint %s"
                    " keeps its %d; to change them stop the stream and run `feedctl reshard --checkpoint %s"
                    " --partitions %d`", requested, checkpoint, pinned, checkpoint, requested)
    return pinned


def run(settings: Settings, options: StreamOptions, *, status_file: Path | None = None) -> int:
    """The command (``feedctl stream``, :func:`main`): :func:`run_stream`, with a :class:`FeedError`
    turned into its message on stderr and exit code :data:`~spark_jobs.job_cli.EXIT_REFUSED`."""
    try:
        return run_stream(settings, options, status_file=status_file)
    except FeedError as exc:
        return refused("stream", exc)


def _bootstrap(settings: Settings, options: StreamOptions) -> tuple[StreamOptions, dict[str, Any]]:
    """Options and start_stream arguments to continue from a backfill (spark_jobs/bootstrap.py).

    Refuses a checkpoint that already committed a batch (:class:`CheckpointError`: its state and
    offsets are the truth then), an unusable backfill (:class:`BootstrapError`) and an inbox cap
    other than the backfill's (:class:`ConfigError`).
    """
    from dataclasses import replace

    from spark_jobs.bootstrap import load_bootstrap

    assert options.bootstrap_from is not None
    commits = options.checkpoint / "join" / "commits"
    if commits.is_dir() and any(not f.name.startswith(".") for f in commits.iterdir()):
        raise CheckpointError(f"--bootstrap-from needs a new checkpoint; {options.checkpoint} already has"
                              " committed batches (restart it without --bootstrap-from)")
    boot = load_bootstrap(options.bootstrap_from, settings)
    if settings.inbox_cap != boot.inbox_cap:
        raise ConfigError(f"inbox cap {settings.inbox_cap} (--inbox-cap or FEED_INBOX_CAP) differs from the"
                          f" backfill's {boot.inbox_cap}")
    operator = options.operator if options.operator in INITIAL_STATE_OPERATORS else DEFAULT_OPERATOR
    options = replace(options, starting_offsets=boot.starting_offsets, operator=operator)
    log.info("bootstrapping from backfill %s: clock start %d, offsets %s", boot.folder, boot.clock_start,
             boot.starting_offsets)
    return options, {"state_path": boot.state_path, "clock_start": boot.clock_start}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT,
                        help=f"checkpoint folder (state, offsets); default {DEFAULT_CHECKPOINT}")
    parser.add_argument("--inbox-cap", type=int, default=None,
                        help="entries per timeline and tweets per author (default: FEED_INBOX_CAP, else 800);"
                             " a bootstrapped stream must use the backfill's")
    parser.add_argument("--pull-threshold", type=int, default=None,
                        help="active followers from which an author is merged in at read time instead of pushed"
                             " to inboxes (default: FEED_PULL_THRESHOLD, else 2000); a change takes effect per"
                             " author at its next batch (docs/fan-out.md)")
    parser.add_argument("--state-partitions", type=int, default=None,
                        help="state partitions of a new checkpoint (default: FEED_STATE_PARTITIONS, else 2); an"
                             " existing checkpoint keeps its own until `feedctl reshard` (docs/streaming.md)")
    parser.add_argument("--operator", choices=OPERATORS, default=None,
                        help=f"stateful operator of a new checkpoint (default {DEFAULT_OPERATOR}); "
                             "an existing checkpoint keeps its own")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=DEFAULT_MAX_OFFSETS_PER_TRIGGER)
    parser.add_argument("--trigger-seconds", type=float, default=0.0,
                        help="micro-batch interval; 0 = start the next batch as soon as one ends")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="for a new checkpoint: earliest, latest or Spark's JSON offsets")
    parser.add_argument("--bootstrap-from", type=Path, default=None, metavar="BACKFILL_DIR",
                        help="new checkpoint only: start from a backfill's snapshot offsets and engine states"
                             " (feedctl backfill --out); needs an operator of the transformWithState family")
    parser.add_argument("--status-file", type=Path, default=None,
                        help="progress JSON, rewritten every second (default CHECKPOINT/progress.json)")
    parser.add_argument("--state-stats-interval", type=_seconds, default=DEFAULT_STATE_STATS_INTERVAL,
                        metavar="SECONDS",
                        help="how often the progress JSON's state size per key and rows per timeline are computed"
                             f" (default {DEFAULT_STATE_STATS_INTERVAL:g}; 0 = never; docs/streaming.md)")
    parser.add_argument("--until-caught-up", action="store_true",
                        help="finish an interrupted batch, process what the topics hold now, then exit 0 with every"
                             " batch committed (Spark's availableNow trigger, instead of --trigger-seconds); what"
                             " `feedctl reshard --finish-pending` runs (docs/streaming.md)")
    parser.add_argument("--metrics-port", type=_port, metavar="PORT",
                        default=os.environ.get("FEED_STREAM_METRICS_PORT", str(DEFAULT_METRICS_PORT)),
                        help="Prometheus /metrics of the stream (spark_jobs/stream_metrics.py); 0 = none"
                             f" (default: FEED_STREAM_METRICS_PORT, else {DEFAULT_METRICS_PORT})")
    parser.add_argument("--metrics-host", metavar="HOST",
                        default=os.environ.get("FEED_STREAM_METRICS_HOST", DEFAULT_METRICS_HOST),
                        help=f"address of the metrics endpoint (default: FEED_STREAM_METRICS_HOST, else"
                             f" {DEFAULT_METRICS_HOST})")


def _port(text: str) -> int:
    """A TCP port argument, 0 included (the metrics port: 0 = no endpoint). A string default (an
    environment variable) goes through here too, so a bad FEED_STREAM_METRICS_PORT is refused by name."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {text!r} (--metrics-port or FEED_STREAM_METRICS_PORT)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value} (--metrics-port or FEED_STREAM_METRICS_PORT)")
    return value


def _seconds(text: str) -> float:
    """A duration argument: a number of seconds, not negative."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text}")
    return value


def options_from_args(args: argparse.Namespace) -> StreamOptions:
    return StreamOptions(
        checkpoint=args.checkpoint.resolve(),
        operator=args.operator,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        trigger_seconds=args.trigger_seconds,
        starting_offsets=args.starting_offsets,
        bootstrap_from=args.bootstrap_from,
        state_stats_interval=args.state_stats_interval,
        until_caught_up=args.until_caught_up,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        settings_changes={name: value for name, value in (("inbox_cap", args.inbox_cap),
                                                          ("pull_threshold", args.pull_threshold),
                                                          ("state_partitions", args.state_partitions))
                          if value is not None},
    )


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("stream", __doc__.splitlines()[0], add_arguments,
                    lambda settings, args: run(settings, options_from_args(args), status_file=args.status_file), argv)


if __name__ == "__main__":
    sys.exit(main())
