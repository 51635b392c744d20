"""Keeps the executors' Python workers, and their Cassandra sessions, alive while the stream idles.

Spark stops every idle Python worker of an executor once none has been used for a minute
(``PythonWorkerFactory``'s idle timeout, fixed in Spark 4.2). The first batch after a longer pause
then forks new workers, which import the project and connect to Cassandra before writing: seconds
on top of a steady batch (docs/streaming.md, "After an idle period"). While no batch has run for
:data:`WARM_AFTER_SECONDS`, :class:`WorkerWarmer` runs a job of one small task per core every
:data:`WARM_AFTER_SECONDS`; each task takes a pooled worker (so none has been idle for a minute)
and connects the worker's writer if it has none yet.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

from feed_service.security.roles import STREAM
from feed_service.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("feed.stream")

#: Seconds without a batch before the first warming job, and between two of them: well inside
#: Spark's one-minute idle timeout, and a job of a few milliseconds a core each time.
WARM_AFTER_SECONDS = 25.0
#: Spark job group of the warming jobs, so that stopping the stream can cancel one.
JOB_GROUP = "feed-warm-workers"


def warm_partition(settings: Settings, _rows: Iterator[Any]) -> list[int]:
    """What each warming task runs in its Python worker: the worker's writer, connected once."""
    from spark_jobs.cassandra_writers import writer_for

    writer_for(settings.as_role(STREAM))  # the sink's writer (spark_jobs/stream/sink.py)
    return [os.getpid()]


class WorkerWarmer:
    """Runs a warming job when the stream has been idle for ``after`` seconds, then every ``after``
    seconds while it stays idle; :meth:`batch_ran` marks activity. The job runs on a thread of its
    own, one at a time, so the supervisor's loop never waits for it; a failed job is logged."""

    def __init__(self, spark: "SparkSession", settings: Settings, *, tasks: int, after: float = WARM_AFTER_SECONDS,
                 clock: Any = time.monotonic) -> None:
        self.spark, self.settings, self.tasks, self.after, self.clock = spark, settings, tasks, after, clock
        self._last = clock()
        self._thread: threading.Thread | None = None
        self.jobs = 0
        """Warming jobs completed."""
        self.failures = 0
        """Warming jobs that failed (logged; the stream goes on)."""

    def batch_ran(self) -> None:
        self._last = self.clock()

    def tick(self) -> None:
        """Called from the supervisor's loop: start a warming job if one is due and none is running."""
        if self.clock() - self._last < self.after or (self._thread is not None and self._thread.is_alive()):
            return
        self._last = self.clock()
        self._thread = threading.Thread(target=self._warm, name="warm-workers", daemon=True)
        self._thread.start()

    def _warm(self) -> None:
        settings = self.settings
        try:
            sc = self.spark.sparkContext
            sc.setJobGroup(JOB_GROUP, "keep the Python workers warm while the stream idles", interruptOnCancel=True)
            pids = sc.parallelize(range(self.tasks), self.tasks).mapPartitions(
                lambda rows: warm_partition(settings, rows)).collect()
            self.jobs += 1
            log.debug("warmed Python workers %s", sorted(set(pids)))
        except Exception:  # noqa: BLE001 - warming is an optimisation: never stop the stream for it
            self.failures += 1
            log.warning("warming the Python workers failed", exc_info=True)

    def stop(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            return
        try:
            self.spark.sparkContext.cancelJobGroup(JOB_GROUP)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
        self._thread.join(timeout=10)
