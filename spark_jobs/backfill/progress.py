"""Stage reporting on stderr: stage start and end lines, Spark task progress of long stages, and the
final summary. Spark's own console progress bar is turned off (``SESSION_CONF`` in
:mod:`spark_jobs.backfill.job`) so these lines stay readable.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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

    def elapsed(self) -> float:
        """Seconds since this progress started, rounded for reports."""
        return round(time.monotonic() - self.started, 2)

    def say(self, text: str) -> None:
        print(f"[backfill {time.monotonic() - self.started:7.1f}s] {text}", file=self.out, flush=True)

    def stage(self, name: str) -> "_StageTimer":
        """A context manager around one stage: start and end lines, its duration in :attr:`durations`."""
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


def format_summary(summary: dict[str, Any]) -> str:
    """The final report, one line per figure.

    >>> print(format_summary({"records_read": 10, "tombstones": 1, "invalid": 2, "invalid_by_reason": {"bad_json": 2},
    ...     "entities": {"tweets_live": 3}, "keys": 4, "timelines": 5, "rows": {"timeline": 6}, "written": True,
    ...     "per_reader": {"messages": 9, "inputs": 7, "extras_rows": 3}, "lists": {"lists_live": 2},
    ...     "duration_seconds": 7.5}))
    backfill summary
      records read        10 (tombstones skipped 1, invalid 2: bad_json 2)
      entities            tweets_live 3
      list stage          lists_live 2
      author keys         4
      per-reader stage    messages 9, inputs 7, extras_rows 3
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
        "  list stage          " + ", ".join(f"{k} {v}" for k, v in summary.get("lists", {}).items()),
        f"  author keys         {summary.get('keys', 0)}",
        "  per-reader stage    " + ", ".join(f"{k} {v}" for k, v in summary.get("per_reader", {}).items()),
        f"  timelines           {summary.get('timelines', 0)}",
        f"  rows {'written' if summary.get('written') else 'counted'}        "
        + ", ".join(f"{k} {v}" for k, v in summary.get("rows", {}).items()),
        f"  duration            {summary.get('duration_seconds', 0)} s",
    ]
    return "\n".join(lines)
