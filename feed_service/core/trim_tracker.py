"""Which stored home timelines are due for a trim: an upper bound of each one's rows (docs/trimming.md).

The stream writes home-timeline rows from its executors and trims after every micro-batch. Reading
every written partition after every batch would cost a partition read per write; instead the driver
keeps, per timeline, an upper bound of the rows it holds: the rows it kept at its last trim plus
every insert or update written since. Deletes are not subtracted (the bound stays an upper bound
whatever the sink's order or retries did), so a timeline whose bound stays at or below a threshold
certainly holds no more than that, and only the others are read and trimmed.

Two thresholds: ``limit`` (``inbox_cap + trim_slack``), which no timeline may exceed when a batch
ends, so a timeline above it is trimmed before the batch returns; and ``background_limit``
(``limit - margin``), above which a timeline is trimmed off the batch's critical path, while the
next batch runs. Trims may run while batches record writes (one background thread), so every method
holds a lock, and :meth:`begin` marks a trim as in flight: rows recorded from then on are added on
top of what the trim reports it kept, since the trim's read may have missed them.

The table of bounds is an LRU of ``max_timelines`` entries. A timeline without an entry (a new
process, an evicted one) has an unknown row count, so it is due on its first write: the bound
then comes from what its trim found.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Iterable, Mapping, NamedTuple

DEFAULT_TRACKED_TIMELINES = 500_000
"""Timelines whose bound is remembered: about 150 bytes each with its key (measured), so ~75 MB on the
stream's driver. An evicted timeline costs one extra partition read at its next write."""


def default_margin(trim_slack: int) -> int:
    """Rows below ``cap + slack`` from which a timeline is trimmed in the background: a quarter of
    the slack (50 of 200), so a timeline receiving up to that many rows per batch is always trimmed
    off the critical path, while the space it may hold stays within the slack (docs/trimming.md).

    >>> default_margin(200), default_margin(5), default_margin(0)
    (50, 1, 0)
    """
    return max(0, trim_slack) // 4


class Due(NamedTuple):
    """Timelines due for a trim, each list sorted."""

    now: list[str]
    """Unknown, or above ``limit``: trimmed before the batch ends."""
    background: list[str]
    """Above ``background_limit``, at or below ``limit``, no trim in flight: may wait for the background."""


class TrimTracker:
    """Per-timeline upper bounds of stored rows, LRU-bounded; says which timelines need a trim.

    >>> t = TrimTracker(inbox_cap=3, trim_slack=1)
    >>> t.record({"ann": 2})              # unknown: due at once
    ['ann']
    >>> t.trimmed({"ann": 2})             # its trim found 2 rows and kept them
    >>> t.record({"ann": 2}), t.bound("ann")
    ([], 4)
    >>> t.record({"ann": 1})              # 5 > 3 + 1
    ['ann']
    >>> t.trimmed({"ann": 3}); t.bound("ann")
    3
    """

    def __init__(self, *, inbox_cap: int, trim_slack: int, max_timelines: int = DEFAULT_TRACKED_TIMELINES,
                 margin: int | None = None) -> None:
        if margin is None:
            margin = default_margin(trim_slack)
        if inbox_cap < 1 or trim_slack < 0 or max_timelines < 1 or not 0 <= margin <= trim_slack:
            raise ValueError(f"bad tracker bounds: cap {inbox_cap}, slack {trim_slack}, size {max_timelines},"
                             f" margin {margin}")
        self.inbox_cap = inbox_cap
        self.limit = inbox_cap + trim_slack
        """Rows a timeline may hold at the end of a batch."""
        self.margin = margin
        self.background_limit = self.limit - margin
        """Above this a timeline is due for a background trim."""
        self.max_timelines = max_timelines
        self._bounds: OrderedDict[str, int | None] = OrderedDict()
        """timeline -> upper bound of its rows; None: unknown (never trimmed since it was first seen)."""
        self._in_flight: dict[str, list[int]] = {}
        """timeline -> [trims begun and not ended, rows recorded since the earliest of them began]."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._bounds)

    def bound(self, timeline_id: str) -> int | None:
        """The upper bound of ``timeline_id``'s rows, None if unknown (no LRU effect)."""
        with self._lock:
            return self._bounds.get(timeline_id)

    def bounds(self, timeline_ids: Iterable[str]) -> dict[str, int | None]:
        """The bounds of ``timeline_ids`` (None: unknown), e.g. to bound a trim's read."""
        with self._lock:
            return {tid: self._bounds.get(tid) for tid in timeline_ids}

    def in_flight(self, timeline_id: str) -> bool:
        with self._lock:
            return timeline_id in self._in_flight

    def record(self, upserts: Mapping[str, int]) -> list[str]:
        """Add the rows inserted or updated per timeline in one batch; return the timelines now due
        before the batch ends (sorted): unknown ones, and those whose bound exceeds ``limit``."""
        due: list[str] = []
        with self._lock:
            bounds, limit, flying = self._bounds, self.limit, self._in_flight
            for timeline_id, rows in upserts.items():
                if rows <= 0:
                    continue
                trims = flying.get(timeline_id)
                if trims is not None:
                    trims[1] += rows
                bound = bounds.get(timeline_id)
                if bound is not None:
                    bound += rows
                    bounds[timeline_id] = bound
                    bounds.move_to_end(timeline_id)
                    if bound > limit:
                        due.append(timeline_id)
                else:
                    bounds[timeline_id] = None
                    bounds.move_to_end(timeline_id)
                    due.append(timeline_id)
            self._evict()
        due.sort()
        return due

    def due(self, timeline_ids: Iterable[str]) -> Due:
        """Which of ``timeline_ids`` need a trim now (unknown or above ``limit``) and which may be
        trimmed in the background (above ``background_limit``, no trim of theirs in flight)."""
        now: list[str] = []
        background: list[str] = []
        with self._lock:
            for timeline_id in dict.fromkeys(timeline_ids):
                bound = self._bounds.get(timeline_id)
                if bound is None or bound > self.limit:
                    now.append(timeline_id)
                elif bound > self.background_limit and timeline_id not in self._in_flight:
                    background.append(timeline_id)
        now.sort()
        background.sort()
        return Due(now, background)

    def begin(self, timeline_ids: Iterable[str]) -> None:
        """Trims of ``timeline_ids`` start (call before their read): until each ends with
        :meth:`trimmed` or :meth:`forget`, rows recorded for it are added to what it keeps."""
        with self._lock:
            for timeline_id in timeline_ids:
                trims = self._in_flight.get(timeline_id)
                if trims is None:
                    self._in_flight[timeline_id] = [1, 0]
                else:
                    trims[0] += 1  # the rows counted since the earlier trim began cover this one's too

    def trimmed(self, kept: Mapping[str, int]) -> None:
        """Record trims: each timeline held ``kept`` rows when its trim read and cut it.

        Without :meth:`begin` that is the new bound. After it, the bound is the smaller of two upper
        bounds: ``kept`` plus the rows recorded since the trim began (writes its read may have
        missed), and the bound as it stands (the trim only deleted)."""
        with self._lock:
            bounds = self._bounds
            for timeline_id, rows in kept.items():
                trims = self._in_flight.get(timeline_id)
                if trims is not None:
                    rows += trims[1]
                    current = bounds.get(timeline_id)
                    if current is not None:
                        rows = min(rows, current)
                    self._end(timeline_id, trims)
                bounds[timeline_id] = rows
                bounds.move_to_end(timeline_id)
            self._evict()

    def forget(self, timeline_ids: Iterable[str]) -> None:
        """Drop what is known of ``timeline_ids`` (e.g. after a failed trim, which it also ends):
        due at their next write."""
        with self._lock:
            for timeline_id in timeline_ids:
                self._bounds.pop(timeline_id, None)
                trims = self._in_flight.get(timeline_id)
                if trims is not None:
                    self._end(timeline_id, trims)

    def _end(self, timeline_id: str, trims: list[int]) -> None:
        trims[0] -= 1
        if trims[0] <= 0:
            del self._in_flight[timeline_id]

    def _evict(self) -> None:
        bounds = self._bounds
        while len(bounds) > self.max_timelines:
            bounds.popitem(last=False)
