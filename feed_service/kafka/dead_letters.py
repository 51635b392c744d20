"""Publish dead-letter records (rejected input, with its reason and source coordinates).

Used from Spark executors: each Python worker keeps one idempotent producer per cluster, and a
call returns only once every record is acknowledged, so a batch that fails to publish its dead
letters fails and is retried (dead letters are at least once).
"""

from __future__ import annotations

from typing import Any, Sequence

from feed_service.errors import DeliveryFailed
from feed_service.settings import Settings

_producers: dict[str, Any] = {}


def _producer(bootstrap: str) -> Any:
    producer = _producers.get(bootstrap)
    if producer is None:
        from confluent_kafka import Producer

        producer = _producers[bootstrap] = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
        })
    return producer


def publish_dead_letters(settings: Settings, letters: Sequence[tuple[str, str]], *, timeout: float = 60.0) -> None:
    """Publish (key, value) records to the dead-letter topic; :class:`DeliveryFailed` unless all landed."""
    producer = _producer(settings.kafka_bootstrap)
    failures: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    topic = settings.topic("dead_letter")
    for key, value in letters:
        producer.produce(topic, key=key.encode(), value=value.encode(), on_delivery=report)
        producer.poll(0)
    remaining = producer.flush(timeout)
    if failures or remaining:
        raise DeliveryFailed(f"{len(failures) + remaining} of {len(letters)} dead letters not delivered: "
                             f"{failures[:1]}", count=len(failures) + remaining)
