"""Which stored home timelines are due for a trim: an upper bound of each one's rows (docs/trimming.md).

The stream writes home-timeline rows from its executors and trims on the driver at the end of a
micro-batch. Reading every written partition after every batch would cost a partition read per
write; instead the driver keeps, per timeline, an upper bound of the rows it holds: the rows it
kept at its last trim plus every insert or update written since. Deletes are not subtracted (the
bound stays an upper bound whatever the sink's order or retries did), so a timeline whose bound
stays at or below ``inbox_cap + trim_slack`` certainly holds no more than that, and only the others
are read and trimmed.

The table of bounds is an LRU of ``max_timelines`` entries. A timeline without an entry (a new
process, an evicted one) has an unknown row count, so it is due on its first write: the bound
then comes from what its trim found.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Mapping

DEFAULT_TRACKED_TIMELINES = 500_000
"""Timelines whose bound is remembered: about 150 bytes each with its key (measured), so ~75 MB on the
stream's driver. An evicted timeline costs one extra partition read at its next write."""


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

    def __init__(self, *, inbox_cap: int, trim_slack: int, max_timelines: int = DEFAULT_TRACKED_TIMELINES) -> None:
        if inbox_cap < 1 or trim_slack < 0 or max_timelines < 1:
            raise ValueError(f"bad tracker bounds: cap {inbox_cap}, slack {trim_slack}, size {max_timelines}")
        self.limit = inbox_cap + trim_slack
        """Rows a timeline may hold at the end of a batch."""
        self.max_timelines = max_timelines
        self._bounds: OrderedDict[str, int | None] = OrderedDict()
        """timeline -> upper bound of its rows; None: unknown (never trimmed since it was first seen)."""

    def __len__(self) -> int:
        return len(self._bounds)

    def bound(self, timeline_id: str) -> int | None:
        """The upper bound of ``timeline_id``'s rows, None if unknown (no LRU effect)."""
        return self._bounds.get(timeline_id)

    def record(self, upserts: Mapping[str, int]) -> list[str]:
        """Add the rows inserted or updated per timeline in one batch; return the timelines now due
        (sorted): unknown ones, and those whose bound exceeds ``inbox_cap + trim_slack``."""
        bounds, limit = self._bounds, self.limit
        due: list[str] = []
        for timeline_id, rows in upserts.items():
            if rows <= 0:
                continue
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

    def trimmed(self, kept: Mapping[str, int]) -> None:
        """Record trims: each timeline now holds exactly the ``kept`` rows its trim left."""
        for timeline_id, rows in kept.items():
            self._bounds[timeline_id] = rows
            self._bounds.move_to_end(timeline_id)
        self._evict()

    def forget(self, timeline_ids: Iterable[str]) -> None:
        """Drop what is known of ``timeline_ids`` (e.g. after a failed trim): due at their next write."""
        for timeline_id in timeline_ids:
            self._bounds.pop(timeline_id, None)

    def _evict(self) -> None:
        bounds = self._bounds
        while len(bounds) > self.max_timelines:
            bounds.popitem(last=False)
