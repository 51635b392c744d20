"""The stream's publisher (feed_service/kafka/stream_publisher.py) for dead letters: every message
acknowledged or DeliveryFailed, a full local queue waited out, a failed producer dropped (the view
changes' side is checked in test_view_changes.py)."""

from __future__ import annotations

from typing import Any

import pytest

import feed_service.kafka.stream_publisher as publisher
from feed_service.errors import DeliveryFailed
from feed_service.settings import Settings

SETTINGS = Settings(kafka_bootstrap="fake:2").with_topic_suffix(".t")
KEY = publisher.producer_key(SETTINGS)


class QueueFullOnce:
    """A producer whose local queue is full at the first produce; ``fail``: every delivery fails."""

    def __init__(self, fail: bool = False) -> None:
        self.messages: list[tuple[str, bytes, bytes]] = []
        self.pending: list[Any] = []
        self.polls: list[float] = []
        self.full, self.fail = True, fail

    def produce(self, topic: str, *, key: bytes, value: bytes, on_delivery: Any) -> None:
        if self.full:
            self.full = False
            raise BufferError("queue full")
        self.messages.append((topic, key, value))
        self.pending.append(on_delivery)

    def poll(self, timeout: float) -> int:
        self.polls.append(timeout)
        return 0

    def flush(self, timeout: float) -> int:
        for report in self.pending:
            report("broker down" if self.fail else None, None)
        self.pending.clear()
        return 0


@pytest.fixture
def producers() -> Any:
    yield publisher._producers
    publisher._producers.pop(KEY, None)


def test_dead_letters_wait_out_a_full_queue_and_are_all_acknowledged(producers: dict[str, Any]) -> None:
    producer = producers[KEY] = QueueFullOnce()
    assert publisher.publish_dead_letters(SETTINGS, [("k1", "v1"), ("k2", "v2")]) == 2
    assert producer.messages == [("feed.dead-letter.v1.t", b"k1", b"v1"), ("feed.dead-letter.v1.t", b"k2", b"v2")]
    assert 0.1 in producer.polls  # waited for room instead of raising
    assert producers[KEY] is producer  # kept for the next batch


def test_a_failed_dead_letter_drops_the_producer(producers: dict[str, Any]) -> None:
    producers[KEY] = QueueFullOnce(fail=True)
    with pytest.raises(DeliveryFailed, match="1 of 1 dead letters not delivered"):
        publisher.publish_dead_letters(SETTINGS, [("k", "v")])
    assert KEY not in producers  # the retry gets a fresh producer
