"""Restart bookkeeping of the streaming query: when to give up, and what the progress file reports.

Two counts, on purpose: failures *in a row* (reset by a completed batch) decide when the job gives
up, because a query that keeps failing without progress needs an operator; restarts *in all* since
the process started, with the last error and its time, go to the progress file, because a query that
restarts now and then is worth seeing even when each restart succeeded. Pure Python, no Spark.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

#: The longest error message kept for the progress file (a Spark error can carry a whole stack).
MAX_ERROR_CHARS = 2000


@dataclass
class Restarts:
    """Failures and restarts of one query over the life of the process."""

    max_consecutive: int
    """Failures in a row that are restarted; one more and :meth:`failed` says give up."""
    backoff_seconds: float
    """Wait before a restart, times the failures in a row."""
    clock: Callable[[], float] = field(default=time.time, repr=False)
    consecutive: int = 0
    total: int = 0
    last_error: str | None = None
    last_error_time: float | None = None

    def failed(self, error: object) -> bool:
        """Record a failure of the query; True if it may be restarted, False to give up."""
        self.consecutive += 1
        self.last_error = str(error)[:MAX_ERROR_CHARS]
        self.last_error_time = self.clock()
        return self.consecutive <= self.max_consecutive

    def backoff(self) -> float:
        """Seconds to wait before the next restart: longer with every failure in a row."""
        return self.backoff_seconds * self.consecutive

    def restarted(self) -> None:
        """The query was started again after a failure."""
        self.total += 1

    def progressed(self) -> None:
        """A batch completed: the failures so far were transient."""
        self.consecutive = 0

    def record(self) -> dict[str, Any]:
        """The progress file's entries: restarts since the process started, failures in a row, last error."""
        last = None if self.last_error is None else {"message": self.last_error, "time": self.last_error_time}
        return {"restarts": self.total, "consecutive_failures": self.consecutive, "last_error": last}
