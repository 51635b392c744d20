"""The read service's subscription to the view's change topic (docs/view-changes.md).

One :class:`ChangeFeed` per server process: a Kafka consumer on a thread of its own, assigned every
partition of ``timeline_changes`` at the high watermark read when it starts (no consumer group: every
process needs every change), hands each polled batch to the event loop in one hop, where the read
cache and the watch hub apply it. Nothing on the loop blocks on Kafka.

Positions are what the exactness of the read cache rests on (docs/api.md#read-cache): ``position``
is, per partition, the offset of the next change the loop will apply, and
:meth:`high_watermarks_after` gives the partitions' high watermarks read after a given moment, so
a cache fill can tell the changes published before its Cassandra read from those published after.

A gap (offsets the consumer can no longer read, a message it cannot decode) is reported to
``on_gap``: the cache drops everything and the watchers re-read from Cassandra.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Callable

from feed_service.kafka.view_change_consumer import Consumed, Polled, Positions, ViewChangeConsumer
from feed_service.settings import Settings

__all__ = ["ChangeFeed", "Consumed", "Positions"]

log = logging.getLogger("feed_service.server.changes")

#: Messages per poll: one hop to the loop carries up to this many.
POLL_BATCH = 1000
POLL_TIMEOUT_S = 0.05
#: Reads of the high watermarks for cache fills start at most this often (a fill waits for the
#: next one: it is the cache that waits, not the read that filled it).
SNAPSHOT_INTERVAL_S = 0.05


class ChangeFeed:
    """The change topic, consumed on a thread and applied on the loop by ``on_batch``."""

    def __init__(self, settings: Settings, *, on_batch: Callable[[list[Consumed]], None],
                 on_gap: Callable[[str], None], on_undecodable: Callable[[int], None] = lambda n: None) -> None:
        self.settings = settings
        self._on_batch = on_batch
        self._on_gap = on_gap
        self._on_undecodable = on_undecodable
        self.position: Positions = {}
        self.live = False
        """True once assigned: from then on every change published is applied, in order."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumer = ViewChangeConsumer(settings)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._waiters: list[tuple[Positions, asyncio.Future]] = []
        self._snapshot: tuple[float, Positions] | None = None
        self._snapshot_task: asyncio.Future | None = None
        self._snapshot_started = 0.0

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Assign every partition at its current high watermark and start consuming (raises when the
        topic cannot be read: the caller runs without the feed, i.e. polling and no cache)."""
        self._loop = asyncio.get_running_loop()
        started = time.monotonic()
        highs = await asyncio.to_thread(self._consumer.open)
        self.position = dict(highs)
        self._snapshot = (started, dict(highs))
        self._thread = threading.Thread(target=self._run, name="view-changes", daemon=True)
        self._thread.start()
        self.live = True
        log.info("view changes consumed", extra={"fields": {"topic": self._consumer.topic, "from": highs}})

    def close(self) -> None:
        self.live = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._consumer.close()
        for _, future in self._waiters:
            if not future.done():
                future.cancel()
        self._waiters.clear()

    # -- the consumer thread -----------------------------------------------------------------
    def _run(self) -> None:
        loop = self._loop
        while not self._stop.is_set():
            try:
                polled = self._consumer.poll(POLL_BATCH, POLL_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - Kafka unreachable for a while, or closed at shutdown
                if not self._stop.is_set():
                    log.warning("view change poll failed: %s", exc)
                    self._stop.wait(0.5)
                continue
            if polled.changes or polled.positions or polled.gap:
                try:
                    loop.call_soon_threadsafe(self._deliver, polled)
                except RuntimeError:  # the loop closed: the server is gone
                    return

    # -- on the loop -------------------------------------------------------------------------
    def _deliver(self, polled: Polled) -> None:
        self.position.update(polled.positions)
        if polled.changes:
            self._on_batch(polled.changes)
        if polled.undecodable:
            self._on_undecodable(polled.undecodable)
        if polled.gap:
            log.warning("view change gap: %s; caches dropped, watchers re-read", polled.gap)
            self._on_gap(polled.gap)
        self._wake()

    def _wake(self) -> None:
        if not self._waiters:
            return
        still = []
        for target, future in self._waiters:
            if future.done():
                continue
            if self.reached(target):
                future.set_result(None)
            else:
                still.append((target, future))
        self._waiters = still

    def reached(self, target: Positions) -> bool:
        """Whether every change before ``target`` has been applied."""
        position = self.position
        return all(position.get(p, 0) >= o for p, o in target.items())

    async def wait_reached(self, target: Positions, timeout: float) -> bool:
        """Wait until :meth:`reached` (True) or ``timeout`` seconds (False)."""
        if self.reached(target):
            return True
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except (asyncio.TimeoutError, asyncio.CancelledError):
            return False

    async def high_watermarks_after(self, moment: float) -> Positions:
        """High watermarks read after ``moment`` (``time.monotonic()``): every change published
        before ``moment`` lies below them. Callers share reads: one is in flight at a time, and they
        start at most every :data:`SNAPSHOT_INTERVAL_S` (each is a request per partition to the
        brokers; under a stream of cache misses they would otherwise run back to back)."""
        while True:
            snapshot = self._snapshot
            if snapshot is not None and snapshot[0] >= moment:
                return snapshot[1]
            task = self._snapshot_task
            if task is None or task.done() or self._snapshot_started < moment:
                if task is not None and not task.done():
                    await asyncio.shield(task)
                    continue
                wait = self._snapshot_started + SNAPSHOT_INTERVAL_S - time.monotonic()
                self._snapshot_started = time.monotonic() + max(0.0, wait)
                task = self._snapshot_task = asyncio.ensure_future(
                    self._take_snapshot(self._snapshot_started, max(0.0, wait)))
            await asyncio.shield(task)

    async def _take_snapshot(self, started: float, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        highs = await asyncio.to_thread(self._consumer.high_watermarks)
        if self._snapshot is None or self._snapshot[0] < started:
            self._snapshot = (started, highs)
