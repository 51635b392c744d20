"""The event producer without a broker: an in-memory client in place of confluent_kafka's Producer
(tests/unit/test_producer_units.py, test_repost_reply_events.py)."""

from __future__ import annotations

from typing import Any

from feed_service.kafka.producer import EventProducer
from feed_service.kafka.versions import VersionClock
from feed_service.settings import Settings


class FakeMessage:
    """The message a delivery callback gets: its topic and key."""

    def __init__(self, topic: str, key: str) -> None:
        self._topic, self._key = topic, key

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes:
        return self._key.encode()


class FakeClient:
    """In-memory stand-in for confluent_kafka.Producer: records produce calls, fails keys on request."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.sent: list[tuple[str, bytes, str]] = []
        self.pending: list[tuple[str, bytes, str]] = []
        self.fail_keys: set[str] = set()
        self.full_once = False

    def produce(self, topic: str, value: bytes, key: str) -> None:
        if self.full_once:
            self.full_once = False
            raise BufferError("queue full")
        self.pending.append((topic, value, key))

    def poll(self, timeout: float = 0.0) -> int:
        served = len(self.pending)
        for topic, value, key in self.pending:
            if key in self.fail_keys:
                self.config["on_delivery"]("MSG_SIZE_TOO_LARGE", FakeMessage(topic, key))
            else:
                self.sent.append((topic, value, key))
        self.pending.clear()
        return served

    def flush(self, timeout: float = 0.0) -> int:
        self.poll()
        return 0


def make_producer(**kwargs: Any) -> tuple[EventProducer, list[FakeClient]]:
    """An :class:`EventProducer` of default settings over :class:`FakeClient` objects (the list
    fills as the producer makes clients), its version clock ticking by 1 ms from 1,000 unless
    ``clock`` is given; other ``kwargs`` go to the producer."""
    clients: list[FakeClient] = []

    def factory(config: dict[str, Any]) -> FakeClient:
        clients.append(FakeClient(config))
        return clients[-1]

    ticks = iter(range(1_000, 10**9))
    clock = kwargs.pop("clock", VersionClock(now_ms=lambda: next(ticks)))
    producer = EventProducer(Settings(), client_factory=factory, clock=clock, **kwargs)
    return producer, clients
