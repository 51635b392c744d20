"""A consumer of the view's change topic that reads every partition from the end (no consumer group).

The read service's processes each need every change (each pushes to its own watchers and keeps its
own cache), so partitions are assigned, not subscribed, starting at the high watermarks read when
the consumer opens; offsets are never committed. :meth:`ViewChangeConsumer.poll` returns decoded
changes with their partition and offset, and says when changes were lost (offsets out of range, a
message that is not a view change): the consumer then continues from the end.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, NamedTuple

from feed_service.core.view_changes import ChangeDecodeError, ViewChange, decode
from feed_service.kafka.client_config import client_config
from feed_service.security.roles import SERVER
from feed_service.settings import Settings

log = logging.getLogger("feed_service.kafka.view_changes")

Positions = dict[int, int]
"""Partition -> offset (the next one to read or apply, or a high watermark)."""


WATERMARK_RETRY_S = 0.2
"""Pause between watermark reads that failed (a leader moving after a broker crash)."""


class Consumed(NamedTuple):
    """One change with where it was in the topic."""

    partition: int
    offset: int
    change: ViewChange


class Polled(NamedTuple):
    """One poll: the changes read (in order per partition), where each partition now stands, and the
    reason changes were lost ("" when none were), with the number of undecodable messages."""

    changes: list[Consumed]
    positions: Positions
    gap: str
    undecodable: int


class ViewChangeConsumer:
    """Assigned to every partition of ``settings.topic("timeline_changes")`` (blocking calls: run it
    on a thread of its own; :meth:`high_watermarks` may be called from another thread)."""

    def __init__(self, settings: Settings, *, fetch_wait_ms: int = 10) -> None:
        self.settings = settings.as_role(SERVER)
        self.topic = settings.topic("timeline_changes")
        self._fetch_wait_ms = fetch_wait_ms
        self._consumer: Any = None
        self._meta: Any = None
        self._meta_lock = threading.Lock()
        self._partitions: list[int] = []

    def _client(self) -> Any:
        from confluent_kafka import Consumer

        return Consumer(client_config(self.settings, SERVER) | {
            "group.id": "feed-read-service", "enable.auto.commit": False, "auto.offset.reset": "error",
            "fetch.wait.max.ms": self._fetch_wait_ms, "enable.partition.eof": False})

    def open(self, timeout: float = 5.0) -> Positions:
        """Assign every partition at its high watermark; returns those positions. Raises
        RuntimeError when the topic does not exist (not provisioned, or another pipeline's settings)."""
        self._meta = self._client()
        meta = self._meta.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise RuntimeError(f"topic {self.topic!r} not found: {getattr(meta, 'error', None)}")
        self._partitions = sorted(meta.partitions)
        highs = self.high_watermarks(timeout)
        self._consumer = self._client()
        self._assign(highs)
        return highs

    def _assign(self, positions: Positions) -> None:
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(self.topic, p, o) for p, o in positions.items()])

    def high_watermarks(self, timeout: float = 10.0) -> Positions:
        """Every partition's high watermark, read now from the brokers. A partition whose leader just went
        away fails until the client learns the new leader: retried until ``timeout`` (docs/cluster.md)."""
        from confluent_kafka import KafkaException, TopicPartition

        deadline = time.monotonic() + timeout
        while True:
            try:
                with self._meta_lock:
                    return {p: self._meta.get_watermark_offsets(
                                TopicPartition(self.topic, p), timeout=max(0.1, deadline - time.monotonic()))[1]
                            for p in self._partitions}
            except KafkaException:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(WATERMARK_RETRY_S)

    def poll(self, max_messages: int, timeout: float) -> Polled:
        from confluent_kafka import KafkaError

        changes: list[Consumed] = []
        positions: Positions = {}
        gap, undecodable = "", 0
        for m in self._consumer.consume(max_messages, timeout=timeout):
            err = m.error()
            if err is not None:
                if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                    gap = f"offsets no longer available: {err}"
                else:
                    log.warning("view change consumer: %s", err)
                continue
            positions[m.partition()] = m.offset() + 1
            try:
                changes.append(Consumed(m.partition(), m.offset(), decode(m.value())))
            except ChangeDecodeError as exc:
                log.error("undecodable view change at %s/%s: %s", m.partition(), m.offset(), exc)
                undecodable += 1
                gap = gap or f"undecodable change at {m.partition()}/{m.offset()}"
        if gap:  # continue from the end: what was lost is re-read from Cassandra by the caller
            highs = self.high_watermarks()
            self._assign(highs)
            positions.update(highs)
        return Polled(changes, positions, gap, undecodable)

    def close(self) -> None:
        for client in (self._consumer, self._meta):
            if client is not None:
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass
        self._consumer = self._meta = None
