"""Publish the view's own changes to the ``timeline_changes`` topic (docs/view-changes.md).

Used from Spark executors, right after a chunk of a micro-batch's output rows is written to
Cassandra: each change (:mod:`feed_service.core.view_changes`) is split into messages of a bounded
number of ids, keyed by the join key that wrote its rows (so one row's changes stay in one
partition, in write order) and valued by its compact JSON.

Each Python worker keeps one idempotent producer per cluster (acks=all, lz4, a few ms of linger), and
a call returns only once every message is acknowledged: otherwise it raises
:class:`~feed_service.errors.DeliveryFailed`, which fails the micro-batch, and Spark runs it again
from the checkpoint (its messages are then published again with the same contents: at least once).
After a failure the worker's producer is dropped, so the retry starts with a fresh one (an
idempotent producer can be left in a fatal state).
"""

from __future__ import annotations

from typing import Any, Iterable

from feed_service.core.view_changes import ViewChange, encode, message_key, split
from feed_service.errors import DeliveryFailed
from feed_service.settings import Settings

#: The producer's settings besides the bootstrap servers.
PRODUCER_CONFIG: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "compression.type": "lz4",
    "linger.ms": 5,
}

_producers: dict[str, Any] = {}


def _producer(bootstrap: str) -> Any:
    producer = _producers.get(bootstrap)
    if producer is None:
        from confluent_kafka import Producer

        producer = _producers[bootstrap] = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG})
    return producer


def _produce(producer: Any, topic: str, key: bytes, value: bytes, report: Any, deadline_polls: int = 600) -> None:
    """Produce one message, waiting for room in the local queue when it is full."""
    for _ in range(deadline_polls):
        try:
            producer.produce(topic, key=key, value=value, on_delivery=report)
            return
        except BufferError:
            producer.poll(0.1)  # serve delivery reports: frees room in the queue
    producer.produce(topic, key=key, value=value, on_delivery=report)  # raises BufferError if still full


def publish_view_changes(settings: Settings, changes: Iterable[ViewChange], *, timeout: float = 60.0) -> int:
    """Publish ``changes`` (split into messages) to the ``timeline_changes`` topic; returns the
    number of messages, every one acknowledged, else :class:`DeliveryFailed`."""
    producer = _producer(settings.kafka_bootstrap)
    failures: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    topic = settings.topic("timeline_changes")
    sent = 0
    try:
        for change in changes:
            for message in split(change):
                _produce(producer, topic, message_key(message).encode(), encode(message), report)
                sent += 1
                producer.poll(0)
        remaining = producer.flush(timeout) if sent else 0
    except BaseException:
        _producers.pop(settings.kafka_bootstrap, None)
        raise
    if failures or remaining:
        _producers.pop(settings.kafka_bootstrap, None)
        raise DeliveryFailed(f"{len(failures) + remaining} of {sent} view changes not delivered to {topic}: "
                             f"{failures[:1]}", count=len(failures) + remaining)
    return sent
