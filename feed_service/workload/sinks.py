"""Where a workload goes, and how fast: Kafka (:func:`publish_workload`) or a replay file (:func:`write_jsonl`).

Both take any iterable of envelopes (usually :func:`feed_service.workload.generator.generate`) and
pace it with :func:`paced`; the generator itself does no I/O and knows no wall clock.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TextIO

from feed_service.kafka.producer import EventProducer


@dataclass(slots=True)
class WorkloadStats:
    """Events handed to the producer so far, and the seconds taken (the final flush included at the end)."""

    sent: int = 0
    elapsed: float = 0.0

    @property
    def rate(self) -> float:
        return self.sent / self.elapsed if self.elapsed > 0 else 0.0


def paced(
    events: Iterable[dict[str, Any]], *, rate: float = 0.0, duration: float | None = None,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> Iterator[dict[str, Any]]:
    """Yield ``events`` at ``rate`` per second (0: as fast as possible), for at most ``duration`` s.

    The deadline is checked before the next event is pulled, so an event taken from ``events`` is
    always yielded (callers that record what they pull see exactly what was sent).
    """
    started = clock()
    deadline = None if duration is None else started + duration
    iterator = iter(events)
    i = 0
    while True:
        if rate > 0:
            due = started + i / rate
            if deadline is not None and due >= deadline:
                return
        elif deadline is not None and (i & 255) == 0 and clock() >= deadline:
            return
        try:
            event = next(iterator)
        except StopIteration:
            return
        if rate > 0:
            now = clock()
            if due > now:
                sleep(due - now)
        yield event
        i += 1


def publish_workload(
    settings: Any,
    events: Iterable[dict[str, Any]],
    *,
    rate: float = 0.0,
    duration: float | None = None,
    producer: EventProducer | None = None,
    on_tick: Callable[[WorkloadStats], None] | None = None,
) -> WorkloadStats:
    """Publish ``events`` to the topics of ``settings`` at ``rate`` events/s; flush; return counts.

    ``settings`` is a :class:`~feed_service.settings.Settings` (``None``: from the environment); it is
    only handed to :class:`EventProducer`, so this layer does not import the settings module.

    A producer can be passed in: it is flushed after the last event, never closed (on an error it is
    left to its owner). Otherwise one is made and closed here; if publishing fails, closing it can
    fail too (undelivered records), and the first error is the one raised: the producer's context
    manager logs the second and adds it as a note. Raises ``EventRejected`` for an invalid event and
    ``DeliveryFailed`` if the broker refused any.
    """
    stats = WorkloadStats()
    started = time.monotonic()

    def send(to: EventProducer) -> None:
        for event in paced(events, rate=rate, duration=duration):
            to.publish_event(event)
            stats.sent += 1
            if on_tick is not None and (stats.sent & 1023) == 0:
                stats.elapsed = time.monotonic() - started
                on_tick(stats)

    if producer is not None:
        send(producer)
        producer.flush()
    else:
        with EventProducer(settings) as own:
            send(own)
    stats.elapsed = time.monotonic() - started
    return stats


def write_jsonl(events: Iterable[dict[str, Any]], out: TextIO | Path | str, *,
                rate: float = 0.0, duration: float | None = None) -> int:
    """Write ``events`` as one JSON object per line; return how many were written."""
    if not hasattr(out, "write"):
        with open(out, "w", encoding="utf-8") as stream:
            return write_jsonl(events, stream, rate=rate, duration=duration)
    n = 0
    for event in paced(events, rate=rate, duration=duration):
        out.write(json.dumps(event, separators=(",", ":")) + "\n")  # type: ignore[union-attr]
        n += 1
    return n
