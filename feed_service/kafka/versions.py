"""Where versions come from when a caller does not give one: a hybrid logical clock.

The join keeps, per entity (tweet, follow edge, user profile), the change with the highest version,
so versions must increase along each entity's history. :class:`VersionClock` issues

    next = max(last + 1, now_ms * 1000)

from one counter per clock: strictly increasing within a process (hence per entity too, with no
per-entity memory), and after a restart still above what the previous run issued as long as the
wall clock has moved on (the ``* 1000`` leaves room for 1,000 versions per millisecond before the
clock runs ahead of wall time). :meth:`VersionClock.observe` lifts the clock above a version seen
elsewhere (e.g. read back from the topic), so the next change of that entity wins over it.

Versions from two processes for one entity are ordered by their wall clocks; that is
last-writer-wins, which the engine makes deterministic (ties: see ``feed_service.core.events``).
"""

from __future__ import annotations

import time
from typing import Callable

VERSION_TICKS_PER_MS = 1000
"""Versions per millisecond of wall time: the clock can issue this many per ms without running ahead."""


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class VersionClock:
    """Issue strictly increasing versions, seeded from the wall clock so restarts keep increasing.

    The clock is injected, so tests and the workload generator get reproducible versions:

    >>> clock = VersionClock(now_ms=lambda: 5)
    >>> clock.next(), clock.next(), clock.observe(9_999), clock.next()
    (5000, 5001, None, 10000)
    """

    __slots__ = ("_last", "_now_ms")

    def __init__(self, *, now_ms: Callable[[], int] = _wall_ms, floor: int = -1) -> None:
        self._now_ms = now_ms
        self._last = floor

    def next(self) -> int:
        """Return a version above every version this clock issued or observed."""
        candidate = self._now_ms() * VERSION_TICKS_PER_MS
        last = self._last + 1
        self._last = candidate if candidate > last else last
        return self._last

    def observe(self, version: int) -> None:
        """Make every later :meth:`next` return more than ``version`` (a version issued elsewhere)."""
        if version > self._last:
            self._last = version

    def now_ms(self) -> int:
        """The clock's wall time in milliseconds (what ``created_at`` defaults to)."""
        return self._now_ms()

    @property
    def last(self) -> int:
        """The highest version issued or observed so far (-1 before the first)."""
        return self._last
