"""The ``foreachBatch`` function of the stream's query (driver side) and where a batch's time went.

The executors write the batch (spark_jobs/stream/sink.py) and each partition hands back a report;
the driver merges them, trims the timelines that may be over the bound before the batch ends and
hands those near it to the background trims (docs/trimming.md), and keeps the merged report for the
metrics until the supervisor takes it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

from feed_service.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_jobs.stream.sink import PartitionReport
    from spark_jobs.stream.activity import StreamActivity
    from spark_jobs.stream.inputs import InputGuard
    from spark_jobs.stream.refill import StreamRefill
    from spark_jobs.stream.trimming import StreamTrimming

#: ``(spark context, settings, batch id, clock start, messages)`` -> what the per-reader stage did.
PerReaderRunner = Callable[[Any, Settings, int, int, Any], Any]

#: ``(settings, rows, counter, write_seconds)`` -> the partition's report: what each executor partition
#: runs (:func:`spark_jobs.stream.sink.write_partition`, or a test's fake).
PartitionWriter = Callable[[Settings, Iterator[Any], Any, Any], "PartitionReport"]

#: Completed batches' sink reports kept for the metrics until the supervisor takes them (about once a
#: second); beyond this many the oldest are dropped.
MAX_PENDING_REPORTS = 1000


@dataclass
class BatchTimes:
    """Where the last micro-batch's sink time went (ms), for the progress record and the log: the
    Spark job that reads, joins and writes (``job``), the Cassandra and dead-letter writes inside it
    summed over partitions (``writes``, so up to the partitions' count times the job's wall time),
    and the driver's trim pass after it (``trim``: the critical path, including any wait for the
    previous batch's background trims). ``trim_background``: the background trims' time since the
    previous batch ended, off the critical path (they overlap this batch's job)."""

    batch_id: int = -1
    job: float = 0.0
    writes: float = 0.0
    trim: float = 0.0
    trim_background: float = 0.0
    background_seen: float = 0.0
    """The background trims' total time when the previous batch ended."""
    per_reader: Any = None
    """The last batch's :class:`~spark_jobs.stream.per_reader.PerReaderReport`, None when it had no
    messages for the per-reader stage."""
    completed: "deque[tuple[PartitionReport, int]]" = field(default_factory=lambda: deque(maxlen=MAX_PENDING_REPORTS))
    """What each completed batch wrote (its partitions' reports merged) and the rows its trim pass
    deleted, until the supervisor hands them to the metrics (:meth:`take_completed`)."""

    def record(self) -> dict[str, Any]:
        out = {"batch_id": self.batch_id, "job_ms": round(self.job), "writes_ms": round(self.writes),
               "trim_ms": round(self.trim), "trim_background_ms": round(self.trim_background)}
        steps = self.per_reader
        if steps is not None:  # the per-reader stage ran in this batch (inside job_ms)
            out["per_reader"] = {"messages": steps.messages, "extras_rows": steps.extras_rows,
                                 "inputs_saved": steps.inputs_saved, "inputs_bytes": steps.inputs_bytes,
                                 "restored": steps.restored,
                                 "step_ms": round(steps.step_seconds * 1000),
                                 "write_ms": round(steps.write_seconds * 1000),
                                 "pull_reposter_rows": steps.counts.pull_reposters,
                                 "hidden_rows": steps.counts.hidden}
        return out

    def take_completed(self) -> "list[tuple[PartitionReport, int]]":
        """The completed batches' reports not taken yet, oldest first (the foreachBatch thread appends)."""
        out = []
        while True:
            try:
                out.append(self.completed.popleft())
            except IndexError:
                return out


def foreach_batch(settings: Settings, counter: Any, trimming: "StreamTrimming | None" = None,
                  write_seconds: Any = None, times: BatchTimes | None = None, *,
                  partition_writer: PartitionWriter | None = None, clock_start: int = 0,
                  per_reader: "PerReaderRunner | None" = None, refill: "StreamRefill | None" = None,
                  activity: "StreamActivity | None" = None, input_guard: "InputGuard | None" = None) -> Any:
    """The foreachBatch function: the executors write the rows and each partition hands back its
    :class:`~spark_jobs.stream.sink.PartitionReport` (home-timeline upserts per timeline, rows
    written, dead letters, view changes); the driver then trims the timelines that may be over the
    bound, before the batch ends, or in the background when they are near it (docs/trimming.md). ``times`` gets the batch's timings and, once the
    call completes, its merged report for the metrics (a failed call adds nothing; its replay does).
    ``partition_writer`` is what each partition runs (default: the sink's ``write_partition``, imported
    here so that the command line does not load the Cassandra and Kafka clients). Once every
    partition's rows are written, the batch's messages to the per-reader stage run through
    ``per_reader`` (default: :func:`spark_jobs.stream.per_reader.run_per_reader`), with
    ``clock_start`` as the first clock of a key new to those steps. After the trims, ``refill`` checks
    the inboxes the batch deleted rows from and asks for the short ones to be refilled
    (docs/trimming.md#refill). ``activity`` decides before the batch whose inbox rows are left out
    (inactive readers) and, after it, drops and rebuilds inboxes (docs/activity.md#the-stream).
    ``input_guard`` first checks that the topics still hold what the batch reads (its rows are read
    after it): lost input fails the batch with a fatal error (docs/streaming.md#data-loss)."""
    from spark_jobs.stream.per_reader import run_per_reader
    from spark_jobs.stream.sink import merge_reports, without_readers, write_partition

    write_rows: PartitionWriter = partition_writer or write_partition
    run_steps: PerReaderRunner = per_reader or run_per_reader

    trimmed_seen: list[int | None] = [None]  # the trims' rows deleted when the last batch completed
    # the readers skipped, as broadcast to the executors (again only when the set changes), and the
    # accumulator of the rows left out
    shipped: dict[str, Any] = {"skip": frozenset(), "broadcast": None, "skipped": None}

    def skipping(sc: Any) -> tuple[Any, Any]:
        skip = activity.before_batch() if activity is not None else frozenset()
        if shipped["skipped"] is None:
            shipped["skipped"] = sc.accumulator(0)
        if skip != shipped["skip"] or (skip and shipped["broadcast"] is None):
            old = shipped["broadcast"]
            shipped["skip"], shipped["broadcast"] = skip, (sc.broadcast(skip) if skip else None)
            if old is not None:
                old.unpersist()
        return shipped["broadcast"], shipped["skipped"]

    def write(batch_df: "DataFrame", batch_id: int) -> None:
        started = time.perf_counter()
        if input_guard is not None:
            input_guard.before_batch(batch_id)
        written_before = write_seconds.value if write_seconds is not None else 0.0
        skip, skipped = skipping(batch_df.sparkSession.sparkContext) if activity is not None else (None, None)
        skipped_before = skipped.value if skipped is not None else 0
        if skip is None:
            report = merge_reports(batch_df.rdd.mapPartitions(
                lambda rows: [write_rows(settings, rows, counter, write_seconds)]).collect())
        else:
            report = merge_reports(batch_df.rdd.mapPartitions(
                lambda rows: [write_rows(settings, without_readers(rows, skip.value, skipped), counter,
                                         write_seconds)]).collect())
        steps = None
        if report.messages:
            steps = run_steps(batch_df.sparkSession.sparkContext, settings, batch_id, clock_start, report.messages)
            report = replace(report, messages=[], counts=report.counts + steps.counts,
                             changes_published=report.changes_published + steps.changes_published)
        if times is not None:
            times.per_reader = steps
        joined = time.perf_counter()
        if trimming is not None:
            if trimmed_seen[0] is None:
                trimmed_seen[0] = trimming.trimmed_rows
            trimming.after_batch(report.upserts)
        if refill is not None and trimming is not None:  # only trimmed inboxes are ever short
            refill.after_batch(report.deletes)
        if activity is not None:
            activity.after_batch(batch_id, report.upserts,
                                 (skipped.value - skipped_before) if skipped is not None else 0)
        if times is not None:
            times.batch_id, times.job, times.trim = batch_id, (joined - started) * 1000, (time.perf_counter() - joined) * 1000
            background = getattr(trimming, "in_background", None)
            background_ms = background.ms if background is not None else 0.0
            times.trim_background, times.background_seen = background_ms - times.background_seen, background_ms
            times.writes = ((write_seconds.value - written_before) * 1000) if write_seconds is not None else 0.0
            # rows deleted since the last completed batch: its own trims and the background's
            trimmed = 0
            if trimming is not None:
                total = trimming.trimmed_rows
                trimmed, trimmed_seen[0] = total - (trimmed_seen[0] or 0), total
            times.completed.append((report, trimmed))

    return write
