"""Read activity: each read-service process tells the stream's driver which readers read their home
timeline (docs/activity.md#read-activity), so that inboxes are kept for active readers only.

A home read (GetHomeTimeline, any page) or the start of a WatchHomeTimeline calls
:meth:`ReadReporter.read` with the timeline's user. The first read of a reader in an interval
(``FEED_READ_REPORT_INTERVAL_S``) produces one record to the ``reads`` topic, key the reader, value
``{"reader_id": ..., "read_at": <ms since epoch>}``; every later read of that reader within the
interval is a membership test of a TTL'd set and nothing more. So one process writes at most
``distinct readers / interval`` records per second, and its set holds at most :data:`MAX_TRACKED_READERS`
readers (the oldest, the soonest to expire anyway, go first when it is full: such a reader is
reported again at its next read, which only costs a record).

Nothing about Kafka ever blocks or fails a read: records are handed to a confluent-kafka producer
(:class:`~feed_service.kafka.read_activity.ReadActivityProducer`), which sends them from its own
threads; a record it refuses (full queue, unknown topic) or fails to deliver is counted in
``feed_read_reports_total{result="failed"}`` and logged (at most one line a minute), never raised. A refused record lets the reader's next read try again; a
delivery failure does not (the reader is reported again after the interval, far inside
``FEED_INACTIVE_AFTER_S``, which the settings hold above the interval).
"""

from __future__ import annotations

import time
from typing import Callable

from cachetools import TTLCache

from feed_service.kafka.read_activity import Throttled, encode_report

#: Readers one process remembers as reported: ~0.3 KB each (a TTLCache entry and its key), so about
#: 30 MB at most, within the server pod's memory (k8s/server-deployment.yaml).
MAX_TRACKED_READERS = 100_000
#: Seconds the producer gets at shutdown to deliver what it holds (bounded by the shutdown grace).
CLOSE_FLUSH_S = 2.0


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class ReadReporter:
    """Reports each reader at most once per ``interval_s`` through ``produce(reader_id, value)``, which
    must not block (it only enqueues); what it raises is counted through ``on_failure``, logged, and
    lets the reader's next read try again."""

    def __init__(self, produce: Callable[[str, bytes], None], *, interval_s: float,
                 max_readers: int = MAX_TRACKED_READERS, on_failure: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic, wall_ms: Callable[[], int] = _wall_ms) -> None:
        if interval_s <= 0 or max_readers < 1:
            raise ValueError("interval_s must be > 0 and max_readers >= 1")
        self._produce = produce
        self._on_failure = on_failure
        self._wall_ms = wall_ms
        #: reader -> True while reported within the interval; TTLCache evicts the least recently
        #: reported when full (membership tests do not refresh an entry)
        self._reported: TTLCache = TTLCache(maxsize=max_readers, ttl=interval_s, timer=clock)
        self._refused = Throttled("read report refused")

    def read(self, reader_id: str) -> None:
        """``reader_id`` read its home timeline now (on the event loop; never raises)."""
        if reader_id in self._reported:
            return
        self._reported[reader_id] = True
        try:
            self._produce(reader_id, encode_report(reader_id, self._wall_ms()))
        except Exception as exc:  # noqa: BLE001 - a report is never worth a failed read
            self._reported.pop(reader_id, None)
            self._on_failure()
            self._refused(exc)

    def __len__(self) -> int:
        """Readers remembered as reported (expired ones until the set next changes)."""
        return len(self._reported)
