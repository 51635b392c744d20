"""Inactive readers in the stream's driver (docs/activity.md#the-stream): which inboxes the sink
writes, and the drops and rebuilds as readers go and come back.

Per micro-batch, before its rows are written (:meth:`StreamActivity.before_batch`): the read reports
published since the last batch are taken; a reader without a read for ``FEED_INACTIVE_AFTER_S``
goes (its ``inbox_dropped`` flag is set first, so reads merge its push authors from then on, and the
sink skips its inbox rows from this batch on); a dropped reader who read comes back (the sink writes
its rows from this batch on). After the batch (:meth:`StreamActivity.after_batch`): the rows of the
readers gone are deleted (each at its write time), each returning reader's push authors are asked for
all their rows of its inbox (a refill from the top, answered by the author keys at their clocks in a
later batch), and the flag of a returning reader is cleared once a batch has consumed the refill
topic past its requests: its inbox is then exact, as if it had never left.

A reader the stream writes to for the first time counts as having read then: it is kept for one
window, and goes if nobody reads it. Every step is idempotent; a batch that fails runs again and
repeats them, and a restarted driver asks again for the rebuilds still open.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from feed_service.core.events import REBUILD_LINE, REBUILD_NEED, RefillRequest
from feed_service.settings import Settings

log = logging.getLogger("feed.stream")

ACTIVE, DROPPED, REBUILDING = "active", "dropped", "rebuilding"


class ActivityStore(Protocol):
    """What the driver reads and writes (:class:`feed_service.store.cassandra_activity.CassandraActivity`)."""

    def load(self) -> dict[str, tuple[int, str]]: ...
    def save(self, readers: Mapping[str, tuple[int, str]]) -> None: ...
    def set_dropped(self, readers: Iterable[str], dropped: bool) -> None: ...
    def drop_rows(self, readers: Iterable[str]) -> int: ...
    def push_authors(self, readers: Iterable[str]) -> dict[str, tuple[str, ...]]: ...


class ReadReports(Protocol):
    """The read-activity topic as the driver consumes it (:class:`feed_service.kafka.read_activity.ReadActivityConsumer`)."""

    def poll_available(self, timeout: float = 30.0) -> dict[str, int]: ...
    def commit(self) -> None: ...


@dataclass
class ActivityCounters:
    """What skipping and rebuilding did, summed over the stream's life (the progress record's ``activity``)."""

    skipped_rows: int = 0
    """Inbox row writes the sink left out (their reader was inactive): what skipping saved."""
    dropped_rows: int = 0
    """Inbox rows deleted when their reader went."""
    drops: int = 0
    """Readers gone inactive."""
    rebuilds: int = 0
    """Returning readers whose rebuild was asked for."""
    rebuild_requests: int = 0
    """Refill requests the rebuilds published (one per push author)."""
    ms: float = 0.0
    """Driver time spent on activity (on the batch's critical path)."""


def refill_offsets(offsets_file: Path, topic: str) -> dict[int, int] | None:
    """The end offsets of ``topic`` in a batch's offset log entry (``<checkpoint>/offsets/<batch>``:
    a version line, the batch's metadata, then one line of JSON per source); None if absent."""
    try:
        lines = offsets_file.read_text().splitlines()
    except OSError:
        return None
    for line in lines[2:]:
        try:
            sources = json.loads(line)
        except ValueError:
            continue
        if isinstance(sources, dict) and topic in sources:
            return {int(p): int(o) for p, o in sources[topic].items()}
    return None


def rebuild_requests(push_authors: Mapping[str, Sequence[str]]) -> list[RefillRequest]:
    """A refill from the top by every push author of each returning reader: all its rows of the inbox.

    >>> rebuild_requests({"ann": ("bob",)})  # doctest: +NORMALIZE_WHITESPACE
    [RefillRequest(reader_id='ann', author_id='bob', below_created_at=9223372036854775807,
                   below_tweet_id='~', need=9223372036854775807)]
    """
    return [RefillRequest(reader, author, *REBUILD_LINE, REBUILD_NEED)
            for reader in sorted(push_authors) for author in push_authors[reader]]


class StreamActivity:
    """The driver's view of reader activity (connected at first use); see the module docstring."""

    def __init__(self, settings: Settings, offsets_dir: Path | None, *,
                 store_factory: Callable[[], ActivityStore] | None = None,
                 reports_factory: Callable[[], ReadReports] | None = None,
                 publish: Callable[[Settings, Sequence[RefillRequest]], int] | None = None,
                 refill_watermarks: Callable[[], dict[int, int]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.window_ms = settings.inactive_after_s * 1000
        self.offsets_dir = offsets_dir
        self._store_factory = store_factory or self._connect_store
        self._reports_factory = reports_factory or self._connect_reports
        self._publish = publish or _publish_requests
        self._watermarks = refill_watermarks or self._refill_watermarks
        self._clock = clock
        self._store: ActivityStore | None = None
        self._reports: ReadReports | None = None
        self.readers: dict[str, tuple[int, str]] = {}
        """reader -> (last read in ms, state), every reader the driver knows."""
        self.awaiting: dict[str, dict[int, int]] = {}
        """rebuilding reader -> the refill topic's end offsets once its requests were published."""
        self._gone: set[str] = set()
        self._back: set[str] = set()
        self.counters = ActivityCounters()

    @property
    def enabled(self) -> bool:
        return self.window_ms > 0

    def _connect_store(self) -> ActivityStore:
        from feed_service.store.cassandra_activity import CassandraActivity

        return CassandraActivity.connect(self.settings)

    def _connect_reports(self) -> ReadReports:
        from feed_service.kafka.read_activity import ReadActivityConsumer

        return ReadActivityConsumer(self.settings)

    def _refill_watermarks(self) -> dict[int, int]:
        from feed_service.kafka.offsets import watermarks

        _, high = watermarks(self.settings, ["refills"])
        return {int(p): int(end) for p, end in high[self.settings.topic("refills")].items()}

    def _open(self) -> ActivityStore:
        if self._store is None:
            self._store = self._store_factory()
            self.readers = self._store.load()
            # rebuilds open when the driver stopped: asked again (the requests are idempotent)
            self._back = {r for r, (_, state) in self.readers.items() if state == REBUILDING}
        return self._store

    def skipped(self) -> frozenset[str]:
        """The readers whose inbox rows the sink leaves out: every dropped one."""
        return frozenset(r for r, (_, state) in self.readers.items() if state == DROPPED)

    def before_batch(self) -> frozenset[str]:
        """Take the read reports, let readers go or come back; returns the readers to skip."""
        if not self.enabled:
            return frozenset()
        started = time.perf_counter()
        store = self._open()
        if self._reports is None:
            self._reports = self._reports_factory()
        now = int(self._clock() * 1000)
        reads = self._reports.poll_available(timeout=10.0)
        changed: dict[str, tuple[int, str]] = {}
        for reader, at in reads.items():
            last, state = self.readers.get(reader, (0, ACTIVE))
            if at <= last:
                continue
            if state == DROPPED and at >= now - self.window_ms:
                state = REBUILDING
                self._back.add(reader)
            changed[reader] = (at, state)
        self.readers.update(changed)
        gone = sorted(r for r, (last, state) in self.readers.items()
                      if state != DROPPED and last < now - self.window_ms)
        if gone:
            store.set_dropped(gone, True)  # reads merge from now on, before any write is skipped
            for reader in gone:
                self.readers[reader] = (self.readers[reader][0], DROPPED)
                changed[reader] = self.readers[reader]
                self._back.discard(reader)
                self.awaiting.pop(reader, None)
            self._gone.update(gone)
            self.counters.drops += len(gone)
        store.save(changed)
        self._reports.commit()
        self.counters.ms += (time.perf_counter() - started) * 1000
        return self.skipped()

    def after_batch(self, batch_id: int, written: Iterable[str], skipped_rows: int = 0) -> None:
        """After the batch's rows (and per-reader rows) are written: record readers seen for the first
        time, drop the inboxes of those gone, ask for the rebuilds of those back, and clear the flag of
        rebuilds a batch has answered."""
        if not self.enabled:
            return
        started = time.perf_counter()
        store = self._open()
        c = self.counters
        c.skipped_rows += skipped_rows
        now = int(self._clock() * 1000)
        new = {r: (now, ACTIVE) for r in written if r not in self.readers}
        if new:
            self.readers.update(new)
            store.save(new)
        if self._gone:
            c.dropped_rows += store.drop_rows(sorted(self._gone))
            self._gone.clear()
        done = self._answered(batch_id)
        if done:
            store.set_dropped(done, False)
            finished = {r: (self.readers[r][0], ACTIVE) for r in done}
            self.readers.update(finished)
            store.save(finished)
            for reader in done:
                del self.awaiting[reader]
            log.info("activity: %d rebuilds written, their inboxes read again", len(done))
        if self._back:
            back = sorted(self._back)
            requests = rebuild_requests(store.push_authors(back))
            if requests:
                self._publish(self.settings, requests)
            marks = self._watermarks()
            for reader in back:
                self.awaiting[reader] = marks
            store.save({r: self.readers[r] for r in back})
            self._back.clear()
            c.rebuilds += len(back)
            c.rebuild_requests += len(requests)
            log.info("activity: %d readers back, %d rebuild requests", len(back), len(requests))
        c.ms += (time.perf_counter() - started) * 1000

    def _answered(self, batch_id: int) -> list[str]:
        """The rebuilding readers whose requests this batch consumed (its refill-topic offsets reach
        the end offsets recorded after they were published)."""
        if not self.awaiting or self.offsets_dir is None:
            return []
        consumed = refill_offsets(self.offsets_dir / str(batch_id), self.settings.topic("refills"))
        if consumed is None:
            return []
        return sorted(r for r, marks in self.awaiting.items()
                      if all(consumed.get(p, 0) >= end for p, end in marks.items()))

    def record(self) -> dict[str, int]:
        """Readers by state and the counters, for the progress record."""
        states = [state for _, state in self.readers.values()]
        c = self.counters
        return {"active_readers": states.count(ACTIVE), "inactive_readers": states.count(DROPPED),
                "rebuilding_readers": states.count(REBUILDING), "skipped_rows": c.skipped_rows,
                "dropped_rows": c.dropped_rows, "drops": c.drops, "rebuilds": c.rebuilds,
                "rebuild_requests": c.rebuild_requests, "activity_ms": round(c.ms)}

    def close(self) -> None:
        for part in (self._store, self._reports):
            close = getattr(part, "close", None)
            if close is not None:
                close()
        self._store = self._reports = None


def _publish_requests(settings: Settings, requests: Sequence[RefillRequest]) -> int:
    from feed_service.kafka.stream_publisher import publish_refill_requests

    return publish_refill_requests(settings, requests)
