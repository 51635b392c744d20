"""The stream's trimming of home timelines, on the driver: strict at every batch's end, mostly in the background (docs/trimming.md).

The executors write a batch's rows and report, per timeline, how many rows they inserted or
updated; :meth:`StreamTrimming.after_batch` adds those to a
:class:`~feed_service.core.trim_tracker.TrimTracker`. Timelines whose bound exceeds ``inbox_cap +
trim_slack`` (or is unknown) are trimmed before the batch ends, so when a batch commits every
timeline holds at most that. Timelines between ``cap + slack - margin`` and ``cap + slack`` are
handed to one background thread (its own trimmer and session), which trims them while the next
batch runs: in steady state almost all trimming leaves the batch's critical path.

At most one batch's background trims are outstanding: the next batch waits for them before it
classifies its own timelines (so the driver and the worker never trim the same timeline at once,
and a backlog never piles up), and the wait counts as critical-path time.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from feed_service.core.trim_tracker import DEFAULT_TRACKED_TIMELINES, TrimTracker
from feed_service.settings import Settings
from feed_service.store.ports import TimelineTrimmer, TrimResult

log = logging.getLogger("feed.stream")

#: Timelines per background trim call: close() waits for at most one such call, and the worker
#: checks for a close between calls.
BACKGROUND_CHUNK = 256


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


@dataclass
class TrimCounters:
    """What one kind of trim pass did, summed over the stream's life."""

    checked: int = 0
    """Timelines read."""
    trims: int = 0
    """Timelines cut to the cap."""
    rows: int = 0
    """Rows deleted."""
    ms: float = 0.0
    """Wall time of the trim calls."""

    def add(self, checked: int, result: TrimResult, ms: float) -> None:
        self.checked += checked
        self.trims += result.trimmed_timelines
        self.rows += result.trimmed_rows
        self.ms += ms


class StreamTrimming:
    """Tracker, trimmers (connected at their first trim) and the counters progress reports.

    ``background=False`` trims every due timeline before the batch ends, at ``cap + slack`` (the
    behaviour before background trims; benchmarks compare the two). ``margin`` defaults to
    :func:`~feed_service.core.trim_tracker.default_margin`. ``bounded_reads`` passes the tracker's
    bounds to the trimmer, which then stops its reads before the old tombstones.
    """

    def __init__(self, settings: Settings, *, trimmer_factory: Callable[[], TimelineTrimmer] | None = None,
                 max_timelines: int = DEFAULT_TRACKED_TIMELINES, background: bool = True,
                 margin: int | None = None, bounded_reads: bool = True) -> None:
        self.settings = settings
        self.tracker = TrimTracker(inbox_cap=settings.inbox_cap, trim_slack=settings.trim_slack,
                                   max_timelines=max_timelines, margin=margin if background else 0)
        self.background = background
        self.bounded_reads = bounded_reads
        self._factory = trimmer_factory or self._connect
        self._trimmer: TimelineTrimmer | None = None
        self._background_trimmer: TimelineTrimmer | None = None
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        self._closing = threading.Event()
        self.critical = TrimCounters()
        """Trims before a batch ends (its critical path)."""
        self.in_background = TrimCounters()
        """Trims by the background worker."""
        self.background_failures = 0
        """Background trim calls that failed (their timelines forgotten: due again at their next write)."""
        self.waited_ms = 0.0
        """Time batches waited for the previous batch's background trims (critical path)."""

    # totals, as before background trims (the progress record and the metrics read them)
    @property
    def checked(self) -> int:
        return self.critical.checked + self.in_background.checked

    @property
    def trims(self) -> int:
        return self.critical.trims + self.in_background.trims

    @property
    def trimmed_rows(self) -> int:
        return self.critical.rows + self.in_background.rows

    def _connect(self) -> TimelineTrimmer:
        from feed_service.store.cassandra_trimmer import CassandraTrimmer

        return CassandraTrimmer.connect(self.settings)

    def after_batch(self, upserts: Mapping[str, int]) -> None:
        """Record a batch's inserted or updated rows per timeline, wait for the previous batch's
        background trims, trim the timelines above ``cap + slack`` (or unknown) now and hand those
        above the background threshold to the worker.

        A trim that fails now raises (a :class:`~feed_service.errors.StoreError`), which fails the
        batch: Spark replays it, the rows are rewritten with the same timestamps and the timelines
        come due again. Their bounds are forgotten first, so they stay due whatever happens in between.
        """
        self.tracker.record(upserts)
        self._wait_background()
        due = self.tracker.due(t for t, n in upserts.items() if n > 0)
        if due.now:
            self._trim_now(due.now)
        if due.background and not self._closing.is_set():
            self._submit(due.background)

    def _trim_now(self, ids: list[str]) -> None:
        with self._lock:
            if self._trimmer is None:
                self._trimmer = self._factory()
            trimmer = self._trimmer
        started = time.perf_counter()
        result = self._trim(trimmer, ids, self.tracker.limit)  # raises after forgetting ids
        with self._lock:
            self.critical.add(len(ids), result, (time.perf_counter() - started) * 1000)
        if result.trimmed_rows:
            log.debug("trimmed %d rows of %d timelines (%d checked)", result.trimmed_rows,
                      result.trimmed_timelines, len(ids))

    def _trim(self, trimmer: TimelineTrimmer, ids: list[str], limit: int) -> TrimResult:
        """One trim call, bracketed in the tracker: its bounds stay upper bounds whatever is
        recorded meanwhile, and a failure forgets the timelines."""
        bounds = self.tracker.bounds(ids) if self.bounded_reads else None
        self.tracker.begin(ids)
        try:
            result = trimmer.trim(ids, bounds=bounds, limit=limit)
        except BaseException:
            self.tracker.forget(ids)
            raise
        self.tracker.trimmed(result.kept)
        missing = [tid for tid in ids if tid not in result.kept]
        if missing:  # a trimmer must report every timeline; if not, it is unknown again
            self.tracker.forget(missing)
        return result

    # -- the background worker -----------------------------------------------------------------

    def _submit(self, ids: list[str]) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trim-background")
        self._pending = self._executor.submit(self._run_background, ids)

    def _wait_background(self) -> None:
        """Wait for the outstanding background trims (at most one batch's), counted as waiting."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        started = time.perf_counter()
        pending.result()  # _run_background never raises
        waited = (time.perf_counter() - started) * 1000
        with self._lock:
            self.waited_ms += waited

    def _run_background(self, ids: list[str]) -> None:
        """Trim ``ids`` at the background threshold, a chunk at a time, until done or closed. A
        failure is logged and counted, its chunk's bounds forgotten (due again at their next write,
        then before that batch ends), and the rest of the job dropped: those timelines are within
        cap + slack already and come due again at their next write. Never raises."""
        for start in range(0, len(ids), BACKGROUND_CHUNK):
            if self._closing.is_set():
                return
            chunk = ids[start : start + BACKGROUND_CHUNK]
            started = time.perf_counter()
            try:
                if self._background_trimmer is None:
                    try:
                        self._background_trimmer = self._factory()
                    except BaseException:
                        self.tracker.forget(chunk)  # as a failed trim does (_trim forgets its own)
                        raise
                result = self._trim(self._background_trimmer, chunk, self.tracker.background_limit)
            except Exception as exc:  # noqa: BLE001 - a failed background trim must not stop the stream
                with self._lock:
                    self.background_failures += 1
                    self.in_background.ms += (time.perf_counter() - started) * 1000
                log.warning("background trim of %d timelines failed (due again at their next write): %r",
                            len(chunk), exc)
                return
            with self._lock:
                self.in_background.add(len(chunk), result, (time.perf_counter() - started) * 1000)

    def record(self) -> dict[str, int]:
        """The counters, for the progress record: totals, then critical-path (before a batch
        ends) and background trims apart, and the time batches waited for the background."""
        with self._lock:
            c, b = self.critical, self.in_background
            return {"trim_checked_timelines": c.checked + b.checked, "trimmed_timelines": c.trims + b.trims,
                    "trimmed_rows": c.rows + b.rows,
                    "trim_critical_timelines": c.trims, "trim_critical_rows": c.rows, "trim_critical_ms": round(c.ms),
                    "trim_background_timelines": b.trims, "trim_background_rows": b.rows,
                    "trim_background_ms": round(b.ms), "trim_background_failures": self.background_failures,
                    "trim_wait_ms": round(self.waited_ms)}

    def close(self) -> None:
        """Stop the background worker (the trim call in progress completes, the rest of its job is
        dropped: those timelines are within cap + slack) and close both trimmers' sessions."""
        self._closing.set()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self._pending = None
        with self._lock:
            trimmers = [self._trimmer, self._background_trimmer]
            self._trimmer = self._background_trimmer = None
        for trimmer in trimmers:
            close = getattr(trimmer, "close", None)
            if close is not None:
                close()
