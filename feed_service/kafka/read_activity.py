"""The read-activity topic (``reads``, ``feed.reads.v1``): who read their home timeline, and when
(docs/activity.md#read-activity).

One record per report: key the reader id, value ``{"reader_id": str, "read_at": <ms since epoch>}``.
The read service writes them (:class:`ReadActivityProducer`, at most one per reader and interval
per process: :mod:`feed_service.server.activity`); the stream's driver reads them
(:class:`ReadActivityConsumer`) and keeps each reader's newest ``read_at``. Reports may be repeated
or arrive out of order (several processes, retries, a replay after a crash before a commit): the
newest ``read_at`` wins, so applying them is idempotent and order-free.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

from feed_service.kafka.client_config import client_config
from feed_service.security.roles import SERVER, STREAM
from feed_service.settings import Settings

log = logging.getLogger("feed_service.kafka.read_activity")

#: Seconds between two log lines about one kind of failure (every failure is counted).
LOG_EVERY_S = 60.0

#: The read service's producer settings besides how it connects: reports are small, rare and may be
#: lost or repeated (the newest ``read_at`` wins), so no idempotence; a bounded queue, so an outage
#: costs bounded memory (records beyond it are refused and counted); quiet librdkafka logs (its
#: errors reach ``error_cb``, logged throttled).
PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",
    "linger.ms": 50,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 100_000,
    "message.timeout.ms": 60_000,
    "log_level": 2,
}


class BadReport(ValueError):
    """A record of the topic that is not a report; ``reason`` names what is wrong."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def encode_report(reader_id: str, read_at_ms: int) -> bytes:
    """The record value of one report.

    >>> encode_report("ann", 1767225600000)
    b'{"reader_id":"ann","read_at":1767225600000}'
    """
    return json.dumps({"reader_id": reader_id, "read_at": read_at_ms}, separators=(",", ":")).encode()


def decode_report(key: bytes | None, value: bytes | None) -> tuple[str, int]:
    """``(reader_id, read_at)`` of one record, else :class:`BadReport`.

    >>> decode_report(b"ann", b'{"reader_id":"ann","read_at":5}')
    ('ann', 5)
    >>> decode_report(b"ann", b'{"reader_id":"ann","read_at":true}')
    Traceback (most recent call last):
    ...
    feed_service.kafka.read_activity.BadReport: bad_read_at: True
    """
    if value is None:
        raise BadReport("no_value")
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadReport("bad_json", str(exc)) from None
    if not isinstance(doc, dict):
        raise BadReport("not_object", type(doc).__name__)
    reader_id, read_at = doc.get("reader_id"), doc.get("read_at")
    if type(reader_id) is not str or not reader_id:
        raise BadReport("bad_reader_id", repr(reader_id))
    if type(read_at) is not int or read_at < 0:
        raise BadReport("bad_read_at", repr(read_at))
    if key is not None and key != reader_id.encode():
        raise BadReport("key_mismatch", f"key {key!r}, reader {reader_id!r}")
    return reader_id, read_at


class Throttled:
    """Logs the first failure of a kind, then at most one line per :data:`LOG_EVERY_S` with how many
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


class ReadActivityProducer:
    """The read service's producer of reports, logged in as the server role: :meth:`produce` only
    enqueues (confluent-kafka sends from its own threads); a thread of its own serves the delivery
    reports, counted through ``on_delivered`` and ``on_failure`` (a failure is logged, never raised)."""

    def __init__(self, settings: Settings, *, on_delivered: Callable[[], None] = lambda: None,
                 on_failure: Callable[[], None] = lambda: None) -> None:
        from confluent_kafka import Producer

        self.topic = settings.topic("reads")
        self._on_delivered = on_delivered
        self._on_failure = on_failure
        self._failed = Throttled("read report not delivered")
        self._client_error = Throttled("read report producer error")
        #: True from librdkafka's "all brokers down" until a record is delivered: no flush at close
        self._brokers_down = False
        self._producer = Producer(client_config(settings, SERVER) | PRODUCER_CONFIG | {
            "on_delivery": self._delivered, "error_cb": self._error})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="read-reports", daemon=True)
        self._thread.start()

    def produce(self, reader_id: str, value: bytes) -> None:
        """Enqueue one report; raises (BufferError when the queue is full) for the caller to count."""
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

    def close(self, timeout: float) -> None:
        """Deliver what is queued within ``timeout`` s (none while the brokers are down); the rest is
        dropped and counted as failed."""
        self._stop.set()  # the serving thread ends after its current poll; flush serves reports meanwhile
        left = self._producer.flush(0 if self._brokers_down else timeout)
        if left:
            self._producer.purge()
            self._producer.poll(0)


class ReadActivityConsumer:
    """The stream driver's reader of the topic, in its own consumer group
    (:attr:`Settings.read_activity_group`), logged in as the stream role.

    Each :meth:`poll_available` reads every partition up to the end offsets it finds when called
    and returns ``reader -> newest read_at`` of the records read in that call; :meth:`commit`, called
    once the caller has persisted what the calls so far returned, commits the group's offsets to
    there. So a crash between the two makes the next consumer read those records again, which the
    newest-wins rule absorbs. A record that is not a report is skipped, counted (:attr:`skipped`,
    by reason in :attr:`skipped_by_reason`) and logged; it never stops the consumer. A partition with
    no committed offset starts at its earliest record (the topic keeps 7 days).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings.as_role(STREAM)
        self.topic = settings.topic("reads")
        self.group = settings.read_activity_group
        self.skipped = 0
        self.skipped_by_reason: dict[str, int] = {}
        #: whether the last :meth:`poll_available` reached the end offsets it started with
        self.caught_up = False
        self._consumer: Any = None
        #: partition -> offset of the next record to read (what :meth:`commit` commits)
        self._position: dict[int, int] = {}
        self._committed: dict[int, int] = {}

    def _client(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(client_config(self.settings, STREAM) | {
                "group.id": self.group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "enable.partition.eof": False, "log_level": 2})
        return self._consumer

    def _assign_new_partitions(self, timeout: float) -> None:
        """Assign the topic's partitions not assigned yet, each at the group's committed offset."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        consumer = self._client()
        meta = consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise RuntimeError(f"topic {self.topic!r} not found: {getattr(meta, 'error', None)}")
        new = sorted(set(meta.partitions) - set(self._position))
        if not new:
            return
        committed = consumer.committed([TopicPartition(self.topic, p) for p in new], timeout=timeout)
        starts = {tp.partition: tp.offset for tp in committed}
        for p in new:
            low = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout)[0]
            self._position[p] = max(starts[p], low) if starts[p] >= 0 else low
            if starts[p] >= 0:
                self._committed[p] = starts[p]
        consumer.incremental_assign([TopicPartition(self.topic, p, starts[p] if starts[p] >= 0 else OFFSET_BEGINNING)
                                     for p in new])

    def poll_available(self, timeout: float = 30.0) -> dict[str, int]:
        """``reader_id -> newest read_at`` among the records read by this call: every record up to
        the end offsets at its start (and any that arrived meanwhile), unless ``timeout`` seconds
        pass first (then :attr:`caught_up` is False and the next call goes on from there)."""
        from confluent_kafka import TopicPartition

        deadline = time.monotonic() + timeout
        self._assign_new_partitions(timeout)
        consumer = self._client()
        ends: dict[int, int] = {}
        for p in self._position:
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                       timeout=max(0.1, deadline - time.monotonic()))
            self._position[p] = max(self._position[p], low)  # retention removed what lay below
            ends[p] = high
        newest: dict[str, int] = {}
        skipped: dict[str, int] = {}
        pending = {p for p, end in ends.items() if self._position[p] < end}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for m in consumer.consume(1000, timeout=min(remaining, 0.5)):
                err = m.error()
                if err is not None:
                    log.warning("read activity consumer: %s", err)
                    continue
                self._position[m.partition()] = m.offset() + 1
                try:
                    reader, read_at = decode_report(m.key(), m.value())
                except BadReport as exc:
                    skipped[exc.reason] = skipped.get(exc.reason, 0) + 1
                    if sum(skipped.values()) == 1:
                        log.warning("read activity record skipped", extra={"fields": {
                            "topic": self.topic, "partition": m.partition(), "offset": m.offset(), "error": str(exc)}})
                    continue
                if read_at > newest.get(reader, -1):
                    newest[reader] = read_at
            pending = {p for p in pending if self._position[p] < ends[p]}
        self.caught_up = not pending
        if skipped:
            for reason, n in skipped.items():
                self.skipped_by_reason[reason] = self.skipped_by_reason.get(reason, 0) + n
            self.skipped += sum(skipped.values())
            log.warning("read activity records skipped", extra={"fields": {"topic": self.topic, "by_reason": skipped}})
        return newest

    def commit(self) -> None:
        """Commit the group's offsets to where the calls of :meth:`poll_available` so far have read
        (call it once what they returned is persisted)."""
        from confluent_kafka import TopicPartition

        moved = [TopicPartition(self.topic, p, o) for p, o in sorted(self._position.items())
                 if self._committed.get(p) != o]
        if not moved:
            return
        self._client().commit(offsets=moved, asynchronous=False)
        self._committed.update((tp.partition, tp.offset) for tp in moved)

    def close(self) -> None:
        """Leave without committing (what was not committed is read again by the next consumer)."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()

    def __enter__(self) -> "ReadActivityConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
