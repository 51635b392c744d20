"""The stream's whole run: settings and checkpoint checks, the checkpoint lock, the Spark session,
the metrics endpoint and the supervisor, until SIGTERM/SIGINT or, ``until_caught_up``, until caught up.

What the run reaches outside the process for (the Spark session, the query, the signal handlers)
and its pacing come in one :class:`StreamDependencies`, production's by default, so that a test
passes fakes as an argument.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from feed_service.errors import FeedError
from feed_service.security.roles import STREAM
from feed_service.settings import Settings
from spark_jobs.checkpoint import CheckpointLock
from spark_jobs.fatal import fatal_error
from spark_jobs.job_cli import refused
from spark_jobs.state_stats import stream_stats
from spark_jobs.stream.inputs import InputGuard
from spark_jobs.stream.continuation import continue_from_backfill, seed_per_reader_inputs
from spark_jobs.stream.metrics_endpoint import serve_metrics
from spark_jobs.stream.options import StreamOptions
from spark_jobs.stream.pinned import clock_start_for, per_reader_layout_for, pin_operator, state_partitions_for
from spark_jobs.stream.query import RunningStream, start_stream
from spark_jobs.stream.restarts import Restarts
from spark_jobs.stream.supervisor import STATUS_INTERVAL_SECONDS, supervise
from spark_jobs.stream.warm_workers import WARM_AFTER_SECONDS, WorkerWarmer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("feed.stream")

#: A failed query is restarted from its checkpoint (always safe: replays are idempotent) up to this
#: many times in a row; a batch that completes resets the count (spark_jobs/stream/restarts.py).
MAX_CONSECUTIVE_RESTARTS = 5
RESTART_BACKOFF_SECONDS = 5.0
#: Timelines whose rows the periodic state statistics count (a sample; all of them when there are fewer).
STATE_STATS_TIMELINE_SAMPLE = 1000


def _input_guard(settings: Settings, checkpoint: Path) -> InputGuard:
    """Production's guard of the stream's inputs: it asks the broker as the stream (spark_jobs/stream/inputs.py)."""
    from feed_service.kafka.source_topics import SourceTopics

    return InputGuard(settings, checkpoint, SourceTopics(settings.as_role(STREAM)))


def _build_session(app_name: str, **kwargs: Any) -> "SparkSession":
    """Production's session factory, looked up when called (``feedctl``'s tests replace it to refuse a session)."""
    from spark_jobs.runtime.session import build_session

    return build_session(app_name, **kwargs)


@dataclass(frozen=True)
class StreamDependencies:
    """What :func:`run_stream` reaches outside the process for, and its pacing; production's by default."""

    build_session: Callable[..., "SparkSession"] = _build_session
    """``(app_name, *, extra_conf)`` -> the session the query runs in (stopped at the end of the run)."""
    start: Callable[..., RunningStream] = start_stream
    """``(spark, settings, options, *, input_guard, **bootstrap)`` -> the started query (:func:`start_stream`)."""
    input_guard: Callable[[Settings, Path], InputGuard | None] = _input_guard
    """``(settings, checkpoint)`` -> the guard checked before every start and micro-batch; None: no checks."""
    install_signal: Callable[[int, Any], Any] = signal.signal
    """Installs the SIGTERM/SIGINT handlers that stop the run."""
    max_consecutive_restarts: int = MAX_CONSECUTIVE_RESTARTS
    restart_backoff_seconds: float = RESTART_BACKOFF_SECONDS
    status_interval: float = STATUS_INTERVAL_SECONDS
    warm_after_seconds: float = WARM_AFTER_SECONDS
    """Idle seconds before the Python workers are kept warm (spark_jobs/stream/warm_workers.py); 0: never."""


def run_stream(settings: Settings, options: StreamOptions, *, status_file: Path | None = None,
               dependencies: StreamDependencies | None = None) -> int:
    """Run the stream until SIGTERM/SIGINT (or, ``until_caught_up``, until it has committed what the
    topics held at its start); writes progress to ``status_file`` every second.

    Returns 0 after a stop or once caught up, :data:`~spark_jobs.stream.supervisor.EXIT_GAVE_UP` if
    the query kept failing (:func:`~spark_jobs.stream.supervisor.supervise`). Settings, checkpoint,
    bootstrap and the topics (spark_jobs/stream/inputs.py) are checked before the Spark session starts,
    so a refusal (a :class:`FeedError`) is quick; a fatal failure of the running query (a missing
    grant, lost input) is raised too, never restarted.
    """
    deps = dependencies or StreamDependencies()
    settings = settings.replace(**options.settings_changes)
    bootstrap_kwargs: dict[str, Any] = {}
    if options.bootstrap_from is not None:
        options, bootstrap_kwargs = continue_from_backfill(settings, options)
    # Held until the stream ends: a second stream or a reshard on this checkpoint is refused meanwhile.
    lock = CheckpointLock.acquire(options.checkpoint, "feedctl stream")
    try:
        pin_operator(options.checkpoint)
        per_reader_layout_for(options.checkpoint)
        partitions = state_partitions_for(options.checkpoint, settings.state_partitions)
        guard = deps.input_guard(settings, options.checkpoint)
        if guard is not None:  # before the session: a refusal is quick (docs/operations.md)
            guard.before_start()
        spark = deps.build_session("feed-stream", extra_conf={"spark.sql.shuffle.partitions": str(partitions)})
    except BaseException:
        lock.release()
        raise
    stop_metrics: Callable[[], None] = lambda: None  # noqa: E731
    try:
        if bootstrap_kwargs:
            bootstrap_kwargs["initial_state"] = spark.read.parquet(str(bootstrap_kwargs.pop("state_path")))
            # The clock the query will run with (fixed now if new): it names the per-reader stages.
            clock_start = clock_start_for(options.checkpoint, bootstrap_kwargs["clock_start"])
            seeded = seed_per_reader_inputs(spark, settings, bootstrap_kwargs.pop("per_reader_path"), clock_start)
            log.info("bootstrap: %d per-reader stage inputs seeded (clock start %d)", seeded, clock_start)
            from spark_jobs.stream.per_reader import list_stage_name

            seeded = seed_per_reader_inputs(spark, settings, bootstrap_kwargs.pop("list_inputs_path"), clock_start,
                                            stage_name=list_stage_name)
            log.info("bootstrap: %d list stage inputs seeded (clock start %d)", seeded, clock_start)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            deps.install_signal(sig, lambda *_: stop.set())
        restarts = Restarts(deps.max_consecutive_restarts, deps.restart_backoff_seconds)
        log.info("stream started: checkpoint %s, %d state partitions", options.checkpoint, partitions)
        stats = (stream_stats(spark, settings, options.checkpoint, options.state_stats_interval,
                              sample=STATE_STATS_TIMELINE_SAMPLE) if options.state_stats_interval > 0 else None)
        metrics, stop_metrics = serve_metrics(settings, options)
        warmer = (WorkerWarmer(spark, settings, tasks=spark.sparkContext.defaultParallelism,
                               after=deps.warm_after_seconds) if deps.warm_after_seconds > 0 else None)
        starts = [0]

        def start() -> RunningStream:
            """The query, its inputs checked again before a restart (a topic may have been re-created meanwhile)."""
            if starts[0] and guard is not None:
                guard.before_start()
            starts[0] += 1
            # Every start gets the same initial state: if batch 0 never committed, a restart still bootstraps it.
            return deps.start(spark, settings, options, input_guard=guard, **bootstrap_kwargs)

        exit_code = supervise(start, stop,
                              status_file=status_file or options.checkpoint / "progress.json", restarts=restarts,
                              stats=stats, metrics=metrics, status_interval=deps.status_interval, warmer=warmer,
                              inputs=guard)
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


def run(settings: Settings, options: StreamOptions, *, status_file: Path | None = None,
        dependencies: StreamDependencies | None = None) -> int:
    """The command (``feedctl stream``, :func:`~spark_jobs.stream.cli.main`): :func:`run_stream`, with a
    :class:`FeedError` or a fatal failure (spark_jobs/fatal.py) turned into its message on stderr and exit code
    :data:`~spark_jobs.job_cli.EXIT_REFUSED`."""
    try:
        return run_stream(settings, options, status_file=status_file, dependencies=dependencies)
    except FeedError as exc:
        return refused("stream", exc)
    except Exception as exc:
        fatal = fatal_error(exc)  # e.g. the driver's own Cassandra session refused for a grant
        if fatal is None:
            raise
        return refused("stream", fatal)
