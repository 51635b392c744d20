"""The stream's refill of trimmed inboxes, on the driver (docs/trimming.md#refill).

After a batch's writes and trims, the inboxes the batch deleted rows from are checked
(:class:`~feed_service.store.cassandra_refill.CassandraRefillCheck`): one that now holds fewer than
``inbox_cap`` rows at or above its cut line gets one refill request per push author its reader
sees, published to the stream's own ``refills`` topic. A later batch reads them back and each
author key writes its rows again at its own clock, so the refill is exact once the stream has
caught up with that topic too, whatever happened in between (a request is only a hint: the author
key answers with what is true when it steps).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol, Sequence

from feed_service.core.events import RefillRequest
from feed_service.settings import Settings
from feed_service.store.ports import ShortInbox

log = logging.getLogger("feed.stream")


class RefillCheck(Protocol):
    """What the driver asks the store: which of these inboxes are short (and of what)."""

    def short_inboxes(self, timeline_ids: Iterable[str]) -> list[ShortInbox]: ...


@dataclass
class RefillCounters:
    """What the refills did, summed over the stream's life (the progress record reads them)."""

    checked: int = 0
    """Inboxes checked: those a batch deleted rows from."""
    short: int = 0
    """Inboxes found short: a refill asked for."""
    requests: int = 0
    """Refill requests published (one per push author of a short inbox)."""
    ms: float = 0.0
    """Wall time of the checks and the publishing (on the batch's critical path)."""


def requests_of(shorts: Sequence[ShortInbox]) -> list[RefillRequest]:
    """One request per push author of each short inbox, for its shortfall below its line.

    >>> requests_of([ShortInbox("ann", (10, "t9"), 2, ("bob", "cat"))])  # doctest: +NORMALIZE_WHITESPACE
    [RefillRequest(reader_id='ann', author_id='bob', below_created_at=10, below_tweet_id='t9', need=2),
     RefillRequest(reader_id='ann', author_id='cat', below_created_at=10, below_tweet_id='t9', need=2)]
    """
    return [RefillRequest(s.timeline_id, author, s.below[0], s.below[1], s.need)
            for s in shorts for author in s.push_authors]


class StreamRefill:
    """The check (connected at its first use) and the publisher of the requests."""

    def __init__(self, settings: Settings, *, check_factory: Callable[[], RefillCheck] | None = None,
                 publish: Callable[[Settings, Sequence[RefillRequest]], int] | None = None) -> None:
        self.settings = settings
        self._factory = check_factory or self._connect
        self._publish = publish or _publish_requests
        self._check: RefillCheck | None = None
        self.counters = RefillCounters()

    def _connect(self) -> RefillCheck:
        from feed_service.store.cassandra_refill import CassandraRefillCheck

        return CassandraRefillCheck.connect(self.settings)

    def after_batch(self, deletes: Mapping[str, int]) -> int:
        """Check the inboxes with deleted rows and publish the requests of the short ones; returns
        the number published. A failure raises (the batch fails and runs again: its deletes come
        back, so the same inboxes are checked again)."""
        ids = sorted(t for t, n in deletes.items() if n > 0)
        if not ids:
            return 0
        started = time.perf_counter()
        if self._check is None:
            self._check = self._factory()
        shorts = self._check.short_inboxes(ids)
        requests = requests_of(shorts)
        if requests:
            self._publish(self.settings, requests)
        c = self.counters
        c.checked += len(ids)
        c.short += len(shorts)
        c.requests += len(requests)
        c.ms += (time.perf_counter() - started) * 1000
        if shorts:
            log.debug("refill: %d of %d inboxes short, %d requests", len(shorts), len(ids), len(requests))
        return len(requests)

    def record(self) -> dict[str, int]:
        """The counters, for the progress record."""
        c = self.counters
        return {"refill_checked_timelines": c.checked, "refill_short_timelines": c.short,
                "refill_requests": c.requests, "refill_ms": round(c.ms)}

    def close(self) -> None:
        check, self._check = self._check, None
        close = getattr(check, "close", None)
        if close is not None:
            close()


def _publish_requests(settings: Settings, requests: Sequence[RefillRequest]) -> int:
    from feed_service.kafka.stream_publisher import publish_refill_requests

    return publish_refill_requests(settings, requests)
