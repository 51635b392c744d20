"""Publish a replay file (one JSON envelope per line), counting what was sent and what was rejected."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, TypeAlias

from feed_service.kafka.producer import EventProducer, EventRejected

Reject: TypeAlias = Callable[[int, str, str], None]
"""Called for each rejected line with (1-based line number, code, reason)."""

TICK_EVERY = 512
"""Lines between progress callbacks."""


@dataclass(slots=True)
class ReplayStats:
    lines: int = 0
    """Records read (blank lines are not records and are not counted)."""
    sent: int = 0
    rejected: int = 0
    elapsed: float = 0.0

    def summary(self) -> str:
        rate = self.sent / self.elapsed if self.elapsed > 0 else 0.0
        return f"{self.sent} sent, {self.rejected} rejected of {self.lines} lines in {self.elapsed:.1f}s ({rate:,.0f} ev/s)"


def publish_lines(
    producer: EventProducer,
    lines: Iterable[bytes | str],
    *,
    on_reject: Reject | None = None,
    on_tick: Callable[[ReplayStats], None] | None = None,
    flush: bool = True,
) -> ReplayStats:
    """Validate and send every line; invalid lines are reported to ``on_reject`` and skipped.

    Each good line is sent as it is, so extra fields and formatting survive. With ``flush`` (the
    default) the producer is flushed at the end: a failed delivery raises
    :class:`~feed_service.kafka.producer.DeliveryFailed` and ``sent`` is then not reliable.
    """
    stats = ReplayStats()
    started = time.monotonic()
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        stats.lines += 1
        try:
            producer.publish_line(line)
        except EventRejected as exc:
            stats.rejected += 1
            if on_reject is not None:
                on_reject(line_no, exc.code, exc.reason)
        else:
            stats.sent += 1
        if on_tick is not None and stats.lines % TICK_EVERY == 0:
            stats.elapsed = time.monotonic() - started
            on_tick(stats)
    if flush:
        producer.flush()
    stats.elapsed = time.monotonic() - started
    return stats
