"""Keeps the stream's query running: restarts a failed query from its checkpoint (spark_jobs/stream/restarts.py
decides when to give up), rewrites the progress file, hands completed batches to the metrics. A query
that failed with a fatal error (a missing grant, lost input: spark_jobs/fatal.py) is never restarted:
the error ends the run (docs/operations.md#failure-modes-the-streams-inputs-and-grants)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from spark_jobs.fatal import fatal_error
from spark_jobs.state_stats import PeriodicStats
from spark_jobs.stream.metrics import StreamMetrics
from spark_jobs.stream.progress import progress_record, write_status
from spark_jobs.stream.query import RunningStream
from spark_jobs.stream.restarts import Restarts
from spark_jobs.stream.warm_workers import WorkerWarmer

if TYPE_CHECKING:
    from spark_jobs.stream.inputs import InputGuard

log = logging.getLogger("feed.stream")

#: How often the progress file is rewritten.
STATUS_INTERVAL_SECONDS = 1.0
#: Exit codes: the query failed too often in a row (a refusal before the run is job_cli's EXIT_REFUSED).
EXIT_GAVE_UP = 1


def observe(metrics: StreamMetrics | None, stream: RunningStream) -> None:
    """Hand ``stream``'s completed batches to ``metrics``: the sink reports its foreachBatch calls left
    and the query's new progress. Never raises: metrics must not stop the stream."""
    if metrics is None:
        return
    try:
        for report, trimmed_rows in stream.times.take_completed():
            metrics.batch_written(report, trimmed_rows=trimmed_rows)
        metrics.observe_query(stream.join)
        activity = getattr(stream, "activity", None)
        if activity is not None:
            metrics.observe_activity(activity.record())
    except Exception:  # noqa: BLE001 - a metrics bug or a query gone away: log, keep streaming
        log.warning("stream metrics not updated", exc_info=True)


def sight(inputs: "InputGuard") -> None:
    """:meth:`InputGuard.sight`, never raising: a sighting missed (a broker that does not answer) only
    makes a later check stricter, never lets loss through."""
    try:
        inputs.sight()
    except Exception:  # noqa: BLE001 - see the docstring
        log.warning("where the topics end not recorded this time", exc_info=True)


def supervise(start: Callable[[], RunningStream], stop: threading.Event, *, status_file: Path,
              restarts: Restarts, stats: PeriodicStats | None = None, metrics: StreamMetrics | None = None,
              status_interval: float = STATUS_INTERVAL_SECONDS, warmer: WorkerWarmer | None = None,
              inputs: "InputGuard | None" = None) -> int:
    """Keep the query of ``start()`` running until ``stop`` is set, or until it ends by itself without
    an error when started ``until_caught_up``; returns the exit code.

    A query that fails (a Cassandra timeout, a Python worker that did not start in time) is
    restarted from its checkpoint after ``restarts.backoff()``; when ``restarts`` says give up
    (too many failures in a row without a completed batch) it returns :data:`EXIT_GAVE_UP` for the
    supervisor to act. A failure :func:`~spark_jobs.fatal.fatal_error` finds fatal is not restarted:
    it is written to the progress record (``fatal``) and raised (a :class:`~feed_service.errors.FeedError`),
    as is a refusal of ``start()`` itself (the input guard's, before a restart). The progress record,
    with the restart counts, goes to ``status_file``, with the latest result of ``stats`` (started
    here, stopped on the way out) if given; ``metrics`` gets every completed batch and every restart
    (:func:`observe`, once per ``status_interval`` seconds);
    ``warmer`` keeps the Python workers warm while no batch with input runs (stopped on the way out);
    ``inputs`` records where the topics end while the query runs, batches or not (:meth:`InputGuard.sight`).
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
                fatal = fatal_error(error)
                if fatal is not None:
                    log.error("query %s stopped, not restarted: %s: %s", stream.join.name, type(fatal).__name__, fatal)
                    write_status(status_file, {**progress_record(stream, stats), **restarts.record(),
                                               "fatal": {"error": type(fatal).__name__, "message": str(fatal)}})
                    raise fatal
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
                if warmer is not None and record["timeline-join"].get("input_rows"):
                    warmer.batch_ran()
                p = stream.join.lastProgress or {}
                sink = stream.times.record() if stream.times.batch_id == batch else {}
                log.info("batch %s: %s input rows, %s%s", batch, p.get("numInputRows"),
                         " ".join(f"{k}={v}ms" for k, v in sorted((p.get("durationMs") or {}).items())),
                         "; sink " + " ".join(f"{k}={v}" for k, v in sink.items() if k != "batch_id") if sink else "")
            record.update(restarts.record())
            write_status(status_file, record)
            if warmer is not None:
                warmer.tick()
            if inputs is not None:
                sight(inputs)
            stop.wait(status_interval)
        return 0
    finally:
        if warmer is not None:
            warmer.stop()
        if stats is not None:
            stats.stop()
        stream.stop()
