"""The stream's trimming of home timelines, on the driver at the end of every micro-batch (docs/trimming.md).

The executors write a batch's rows and report, per timeline, how many rows they inserted or
updated; :meth:`StreamTrimming.after_batch` adds those to a
:class:`~feed_service.core.trim_tracker.TrimTracker` and trims the timelines it says are due through
a driver-side :class:`~feed_service.store.cassandra_trimmer.CassandraTrimmer`, before the batch
ends. So when a batch commits, every timeline holds at most ``inbox_cap + trim_slack`` rows.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable, Mapping

from feed_service.core.trim_tracker import DEFAULT_TRACKED_TIMELINES, TrimTracker
from feed_service.settings import Settings
from feed_service.store.ports import TimelineTrimmer

log = logging.getLogger("feed.stream")


def merge_counts(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Sum counts per key (one small dict per executor partition: upserts per timeline, dead letters per reason).

    >>> merge_counts([{"a": 1, "b": 2}, {"a": 3}])
    {'a': 4, 'b': 2}
    """
    out: dict[str, int] = {}
    for part in parts:
        for key, n in part.items():
            out[key] = out.get(key, 0) + n
    return out


class StreamTrimming:
    """Tracker, trimmer (connected at the first trim) and the counters progress reports."""

    def __init__(self, settings: Settings, *, trimmer_factory: Callable[[], TimelineTrimmer] | None = None,
                 max_timelines: int = DEFAULT_TRACKED_TIMELINES) -> None:
        self.settings = settings
        self.tracker = TrimTracker(inbox_cap=settings.inbox_cap, trim_slack=settings.trim_slack,
                                   max_timelines=max_timelines)
        self._factory = trimmer_factory or self._connect
        self._trimmer: TimelineTrimmer | None = None
        self._lock = threading.Lock()
        self.checked = 0
        """Timelines read by a trim (due ones)."""
        self.trims = 0
        """Timelines cut to the cap."""
        self.trimmed_rows = 0
        """Rows deleted by trims."""

    def _connect(self) -> TimelineTrimmer:
        from feed_service.store.cassandra_trimmer import CassandraTrimmer

        return CassandraTrimmer.connect(self.settings)

    def after_batch(self, upserts: Mapping[str, int]) -> None:
        """Record a batch's inserted or updated rows per timeline and trim the due timelines.

        A trim that fails raises (a :class:`~feed_service.errors.StoreError`), which fails the batch:
        Spark replays it, the rows are rewritten with the same timestamps and the timelines come due
        again. Their bounds are forgotten first, so they stay due whatever happens in between.
        """
        due = self.tracker.record(upserts)
        if not due:
            return
        with self._lock:
            if self._trimmer is None:
                self._trimmer = self._factory()
            trimmer = self._trimmer
        try:
            result = trimmer.trim(due)
        except BaseException:
            self.tracker.forget(due)
            raise
        self.tracker.trimmed(result.kept)
        self.checked += len(due)
        self.trims += result.trimmed_timelines
        self.trimmed_rows += result.trimmed_rows
        if result.trimmed_rows:
            log.debug("trimmed %d rows of %d timelines (%d checked)", result.trimmed_rows,
                      result.trimmed_timelines, len(due))

    def record(self) -> dict[str, int]:
        """The counters, for the progress record."""
        return {"trim_checked_timelines": self.checked, "trimmed_timelines": self.trims,
                "trimmed_rows": self.trimmed_rows}

    def close(self) -> None:
        with self._lock:
            trimmer, self._trimmer = self._trimmer, None
        close = getattr(trimmer, "close", None)
        if close is not None:
            close()
