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

Nothing about Kafka ever blocks or fails a read: records are handed to a confluent-kafka producer,
which sends them from its own threads; a record it refuses (full queue, unknown topic) or fails to
deliver is counted in ``feed_read_reports_total{result="failed"}`` and logged (at most one line per
:data:`LOG_EVERY_S`), never raised. A refused record lets the reader's next read try again; a
delivery failure does not (the reader is reported again after the interval, far inside
``FEED_INACTIVE_AFTER_S``, which the settings hold above the interval).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

from cachetools import TTLCache

from feed_service.kafka.client_config import client_config
from feed_service.security.roles import SERVER
from feed_service.settings import Settings

log = logging.getLogger("feed_service.server.activity")

#: Readers one process remembers as reported: ~0.3 KB each (a TTLCache entry and its key), so about
#: 30 MB at most, within the server pod's memory (k8s/server-deployment.yaml).
MAX_TRACKED_READERS = 100_000
#: Seconds between two log lines about failed reports (the failures are all counted).
LOG_EVERY_S = 60.0
#: Seconds the producer gets at shutdown to deliver what it holds (bounded by the shutdown grace).
CLOSE_FLUSH_S = 2.0

#: The producer's settings besides how it connects: reports are small, rare and may be lost or
#: repeated (the driver keeps the newest ``read_at``), so no idempotence; a bounded queue, so an
#: outage costs bounded memory (records beyond it are refused and counted); quiet librdkafka logs
#: (its errors reach :meth:`KafkaReadReports._error`, which logs them throttled).
PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",
    "linger.ms": 50,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 100_000,
    "message.timeout.ms": 60_000,
    "log_level": 2,
}


def encode_report(reader_id: str, read_at_ms: int) -> bytes:
    """The record value of one report.

    >>> encode_report("ann", 1767225600000)
    b'{"reader_id":"ann","read_at":1767225600000}'
    """
    return json.dumps({"reader_id": reader_id, "read_at": read_at_ms}, separators=(",", ":")).encode()


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class _Throttled:
    """Logs the first of a kind of failure, then at most one line per :data:`LOG_EVERY_S` with how many
    there were since (a Kafka outage must not flood the log with one line per reader)."""

    def __init__(self, what: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._what = what
        self._clock = clock
        self._last = float("-inf")
        self._since = 0
        self._lock = threading.Lock()

    def __call__(self, error: object) -> None:
        with self._lock:
            self._since += 1
            now = self._clock()
            if now - self._last < LOG_EVERY_S:
                return
            count, self._since, self._last = self._since, 0, now
        log.warning(self._what, extra={"fields": {"error": str(error), "count": count}})


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
        self._refused = _Throttled("read report refused")

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


class KafkaReadReports:
    """The ``reads`` topic's producer for :class:`ReadReporter` (``produce``), logged in as the server
    role, with a thread serving its delivery reports."""

    def __init__(self, settings: Settings, *, on_delivered: Callable[[], None] = lambda: None,
                 on_failure: Callable[[], None] = lambda: None) -> None:
        from confluent_kafka import Producer

        self.topic = settings.topic("reads")
        self._on_delivered = on_delivered
        self._on_failure = on_failure
        self._failed = _Throttled("read report not delivered")
        self._client_error = _Throttled("read report producer error")
        #: True from librdkafka's "all brokers down" until a record is delivered: no flush at close
        self._brokers_down = False
        self._producer = Producer(client_config(settings, SERVER) | PRODUCER_CONFIG | {
            "on_delivery": self._delivered, "error_cb": self._error})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="read-reports", daemon=True)
        self._thread.start()

    def produce(self, reader_id: str, value: bytes) -> None:
        """Enqueue one report (raises BufferError when the queue is full: the reporter counts it)."""
        self._producer.produce(self.topic, key=reader_id.encode(), value=value)

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.5)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self._brokers_down = False
            self._on_delivered()
            return
        self._on_failure()
        self._failed(err)

    def _error(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._brokers_down = True
        self._client_error(err)

    def close(self, timeout: float = CLOSE_FLUSH_S) -> None:
        """Deliver what is queued within ``timeout`` s (none while the brokers are down), drop the rest."""
        self._stop.set()  # the serving thread ends after its current poll; flush serves reports meanwhile
        left = self._producer.flush(0 if self._brokers_down else timeout)
        if left:
            self._producer.purge()
            self._producer.poll(0)  # the purged records' reports: counted as failures
