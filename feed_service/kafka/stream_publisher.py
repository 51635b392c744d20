"""What the stream publishes: dead letters (rejected input, with its reason and source
coordinates) and the view's own changes on ``timeline_changes`` (docs/view-changes.md) from the
executors, refill requests to its own ``refills`` topic from the driver (docs/trimming.md#refill).

Both are published from Spark executors in the middle of a micro-batch, so both follow one rule.
Each Python worker keeps one idempotent producer per cluster (acks=all, lz4, a few ms of linger),
shared by the two kinds of message; a call returns only once every message it produced is
acknowledged, otherwise it raises :class:`~feed_service.errors.DeliveryFailed`, which fails the
micro-batch, and Spark runs it again from the checkpoint (its messages are then published again
with the same contents: at least once). A full local queue is waited out (delivery reports free
room), not raised. After any failure the worker's producer is dropped, so the retry starts with a
fresh one (an idempotent producer can be left in a fatal state).

View changes (:mod:`feed_service.core.view_changes`) are split into messages of a bounded number of
ids, keyed by the join key that wrote their rows (so one row's changes stay in one partition, in
write order) and valued by their compact JSON.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Sequence

from feed_service.core.events import Event, RefillRequest, event_to_json
from feed_service.core.view_changes import ViewChange, encode, message_key, split
from feed_service.errors import DeliveryFailed
from feed_service.kafka.client_config import client_config
from feed_service.kafka.keys import record_key
from feed_service.security.roles import STREAM
from feed_service.settings import Settings

#: The producer's settings besides how it connects (:func:`~feed_service.kafka.client_config.client_config`).
PRODUCER_CONFIG: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "compression.type": "lz4",
    "linger.ms": 5,
}

#: Polls of 0.1 s a message waits for room in a full local queue before the BufferError is raised.
QUEUE_FULL_POLLS = 600

_producers: dict[tuple[str, str, str], Any] = {}
"""The worker's producers by :func:`producer_key`."""


def producer_key(settings: Settings) -> tuple[str, str, str]:
    """Which of the worker's producers ``settings`` publish with: one per cluster and login (the stream
    role's unless the settings name another)."""
    return settings.kafka_bootstrap, settings.kafka_security_protocol, settings.as_role(STREAM).role


def publish_dead_letters(settings: Settings, letters: Sequence[tuple[str, str]], *, timeout: float = 60.0) -> int:
    """Publish (key, value) records to the dead-letter topic; returns their number, every one
    acknowledged, else :class:`DeliveryFailed`."""
    return _publish(settings, "dead_letter", "dead letters",
                    ((key.encode(), value.encode()) for key, value in letters), timeout)


def publish_view_changes(settings: Settings, changes: Iterable[ViewChange], *, timeout: float = 60.0) -> int:
    """Publish ``changes`` (split into messages) to the ``timeline_changes`` topic; returns the
    number of messages, every one acknowledged, else :class:`DeliveryFailed`."""
    return _publish(settings, "timeline_changes", "view changes", _view_change_messages(changes), timeout)


def publish_refill_requests(settings: Settings, requests: Iterable[RefillRequest], *, timeout: float = 60.0) -> int:
    """Publish refill requests (docs/trimming.md#refill) to the stream's own ``refills`` topic, keyed
    and encoded as any event envelope; returns their number, every one acknowledged, else
    :class:`DeliveryFailed`."""
    return _publish(settings, "refills", "refill requests",
                    ((record_key(r).encode(), json.dumps(event_to_json(r), separators=(",", ":")).encode())
                     for r in requests), timeout)


def publish_list_edges(settings: Settings, edges: Iterable[Event], *, timeout: float = 60.0) -> int:
    """Publish the list stage's derived edges (list follows and exclusions, docs/lists.md#in-the-engine)
    to the stream's own compacted ``list_edges`` topic, keyed and encoded as any event envelope;
    returns their number, every one acknowledged, else :class:`DeliveryFailed`."""
    return _publish(settings, "list_edges", "list edges",
                    ((record_key(e).encode(), json.dumps(event_to_json(e), separators=(",", ":")).encode())
                     for e in edges), timeout)


def _view_change_messages(changes: Iterable[ViewChange]) -> Iterator[tuple[bytes, bytes]]:
    for change in changes:
        for message in split(change):
            yield message_key(message).encode(), encode(message)


def _publish(settings: Settings, role: str, what: str, messages: Iterable[tuple[bytes, bytes]],
             timeout: float) -> int:
    """Produce ``messages`` (key, value) to the topic of ``role`` and wait for every acknowledgement;
    the worker's producer is dropped on any failure."""
    which = producer_key(settings)
    producer = _producer(settings, which)
    failures: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    topic = settings.topic(role)
    sent = 0
    try:
        for key, value in messages:
            _produce(producer, topic, key, value, report)
            sent += 1
            producer.poll(0)
        remaining = producer.flush(timeout) if sent else 0
    except BaseException:
        _producers.pop(which, None)
        raise
    if failures or remaining:
        _producers.pop(which, None)
        raise DeliveryFailed(f"{len(failures) + remaining} of {sent} {what} not delivered to {topic}: "
                             f"{failures[:1]}", count=len(failures) + remaining)
    return sent


def _producer(settings: Settings, key: tuple[str, str, str]) -> Any:
    producer = _producers.get(key)
    if producer is None:
        from confluent_kafka import Producer

        producer = _producers[key] = Producer(client_config(settings, STREAM) | PRODUCER_CONFIG)
    return producer


def _produce(producer: Any, topic: str, key: bytes, value: bytes, report: Any) -> None:
    """Produce one message, waiting for room in the local queue when it is full."""
    for _ in range(QUEUE_FULL_POLLS):
        try:
            producer.produce(topic, key=key, value=value, on_delivery=report)
            return
        except BufferError:
            producer.poll(0.1)  # serve delivery reports: frees room in the queue
    producer.produce(topic, key=key, value=value, on_delivery=report)  # raises BufferError if still full
