"""An exact, bounded cache of the first rows of active timelines, kept current by the view's changes.

What a home-timeline page is made of is cached per source (docs/api.md#read-cache): the head of the
user's inbox (``home_timeline``), the user's pull authors (``pull_follows``) and the head of each pull
author's own timeline (``author_timeline``); a page is their merge, as on the uncached path. Every
source is filled from Cassandra on a miss and then changed only by the change topic, so the cache
is never older than what Cassandra returned once the stream's changes of that moment are applied.

A fill races the changes published while its Cassandra read runs: one of them may be in the read
already, or may be an older change of a row the read shows newer (a delete the read already saw,
followed by the re-insert it did not). So a fill notes the feed's position when its read starts and
becomes usable only once the feed has applied everything published before the read ended (high
watermarks read after it); a change in between is applied only when the result cannot be older
than the read (a newer tweet version of a row the read holds, a delete of a row it does not); in any
other case the fill is dropped and the next read tries again. Changes published after the read are
applied in order, as to any cached head. Nothing here blocks the loop or reads Cassandra by itself.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Hashable

from cachetools import Cache, LRUCache

from feed_service.core.rows import Cursor, Entry
from feed_service.core.view_changes import AuthorChange, PullFollowChange, TimelineChange
from feed_service.server.change_feed import ChangeFeed, Consumed, Positions

#: Rows kept per cached timeline or pull author: two pages of the default size and the row that
#: says whether a next page exists.
DEFAULT_DEPTH = 41
#: Timelines (and pull authors, and pull-author lists) kept per server process.
DEFAULT_MAX_KEYS = 20_000
#: A fill the feed does not confirm within this many seconds is dropped (the feed is lagging).
SETTLE_TIMEOUT_S = 5.0

CacheKey = tuple[str, str]
"""("home", user) | ("author", author) | ("pull", user)."""


class TimelineHead:
    """The newest rows of one timeline-shaped table, exact down to the oldest row held (or whole,
    when ``complete``: its read returned fewer rows than it asked for). Kept oldest first, so that
    positions bisect on the cursors ``(created_at, tweet_id)`` themselves."""

    __slots__ = ("rows", "cursors", "by_id", "complete", "depth")

    def __init__(self, newest_first: list[Entry], depth: int) -> None:
        self.depth = depth
        self.complete = len(newest_first) < depth
        self.rows = list(reversed(newest_first[:depth]))
        self.cursors = [e.cursor for e in self.rows]
        self.by_id = {e.tweet_id: e for e in self.rows}

    def first(self, n: int, before: Cursor | None = None) -> list[Entry] | None:
        """The ``n`` newest rows older than ``before``, newest first, or None when the head cannot say."""
        end = len(self.rows) if before is None else bisect.bisect_left(self.cursors, before)
        if end < n and not self.complete:
            return None
        start = max(0, end - n)
        return self.rows[start:end][::-1]

    def newest_first(self) -> list[Entry]:
        return self.rows[::-1]

    def _below(self, cursor: Cursor) -> bool:
        """Whether ``cursor`` lies below what the head knows (older than its oldest row, not complete)."""
        return not self.complete and (not self.cursors or cursor < self.cursors[0])

    def apply(self, op: str, entry: Entry) -> None:
        """One change of one row, in order."""
        old = self.by_id.pop(entry.tweet_id, None)
        if old is not None:
            i = bisect.bisect_left(self.cursors, old.cursor)
            del self.rows[i], self.cursors[i]
        if op == "delete":
            return
        cursor = entry.cursor
        if self._below(cursor):
            return
        i = bisect.bisect_left(self.cursors, cursor)
        self.rows.insert(i, entry)
        self.cursors.insert(i, cursor)
        self.by_id[entry.tweet_id] = entry
        if len(self.rows) > self.depth:
            dropped = self.rows.pop(0)
            self.cursors.pop(0)
            del self.by_id[dropped.tweet_id]
            self.complete = False

    @property
    def empty_and_unknown(self) -> bool:
        """Nothing held and not known to be empty: useless until refilled."""
        return not self.rows and not self.complete

    def settles(self, op: str, entry: Entry) -> bool:
        """Apply a change published while this head's read ran, if its result cannot be older than
        the read; False when it could be (the fill must then be dropped)."""
        old = self.by_id.get(entry.tweet_id)
        if op == "delete":
            return old is None  # deleting a row the read does not hold changes nothing
        if old is not None:
            if entry.version > old.version:
                self.apply(op, entry)  # a newer tweet version than the read's: newer than the read
            return True
        return self._below(entry.cursor)  # outside the head: nothing to decide


@dataclass
class _Fill:
    start: Positions
    changes: list[Consumed] = field(default_factory=list)
    dropped: bool = False


class _Counted(LRUCache):
    """LRU that counts its evictions."""

    def __init__(self, maxsize: int, on_evict: Callable[[], None]) -> None:
        super().__init__(maxsize)
        self._on_evict = on_evict

    def popitem(self):  # type: ignore[override]
        item = super().popitem()
        self._on_evict()
        return item


class ReadCache:
    """The cache of one server process, fed by ``feed`` (its ``on_batch``/``on_gap`` call :meth:`apply`
    and :meth:`drop_all`). ``hits``/``misses``/``evictions`` are cumulative counts."""

    def __init__(self, feed: ChangeFeed, *, depth: int = DEFAULT_DEPTH, max_keys: int = DEFAULT_MAX_KEYS,
                 settle_timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        self.feed = feed
        self.depth = depth
        self.settle_timeout_s = settle_timeout_s
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._data: _Counted = _Counted(max_keys, self._evicted)
        self._pending: dict[CacheKey, _Fill] = {}
        self._tasks: set[asyncio.Task] = set()

    def _evicted(self) -> None:
        self.evictions += 1

    def __len__(self) -> int:
        return len(self._data)

    @property
    def usable(self) -> bool:
        return self.feed.live

    # -- reads -----------------------------------------------------------------------------
    async def rows(self, kind: str, key: str, n: int, before: Cursor | None,
                   read: Callable[[int], Awaitable[list[Entry]]]) -> list[Entry]:
        """The ``n`` newest rows of ``(kind, key)`` older than ``before``: from the cached head when
        it can say, else ``read(limit)`` from the store (which fills the head from the top)."""
        ck = (kind, key)
        head = self._data.get(ck) if self.usable else None
        if head is not None:
            rows = head.first(n, before)
            if rows is not None:
                self.hits += 1
                return rows
        self.misses += 1
        if before is not None or n > self.depth or not self.usable or ck in self._pending:
            return await read(n)
        rows = await self._fill(ck, lambda: read(self.depth), lambda rows: TimelineHead(rows, self.depth))
        return rows[:n]

    async def pull_authors(self, user_id: str, read: Callable[[], Awaitable[list[str]]]) -> list[str]:
        """The pull authors ``user_id`` follows (cached like a head)."""
        ck = ("pull", user_id)
        authors = self._data.get(ck) if self.usable else None
        if authors is not None:
            self.hits += 1
            return sorted(authors)
        self.misses += 1
        if not self.usable or ck in self._pending:
            return await read()
        return await self._fill(ck, read, set)

    def cached(self, kind: str, key: str) -> bool:
        return (kind, key) in self._data

    async def _fill(self, ck: CacheKey, read: Callable[[], Awaitable], build: Callable) -> object:
        fill = _Fill(dict(self.feed.position))
        self._pending[ck] = fill
        try:
            result = await read()
        except BaseException:
            self._pending.pop(ck, None)
            raise
        task = asyncio.ensure_future(self._settle(ck, fill, build(result), time.monotonic()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return result

    async def _settle(self, ck: CacheKey, fill: _Fill, value: object, read_done: float) -> None:
        try:
            highs = await self.feed.high_watermarks_after(read_done)
            reached = await self.feed.wait_reached(highs, self.settle_timeout_s)
        except Exception:  # noqa: BLE001 - no watermarks (Kafka down): simply do not cache
            reached = False
        if self._pending.get(ck) is fill:
            del self._pending[ck]
        if not reached or fill.dropped or not self.usable:
            return
        for c in fill.changes:
            after_read = c.offset >= highs.get(c.partition, 0)
            if not self._settle_one(value, c.change, after_read):
                return
        self._data[ck] = value

    @staticmethod
    def _settle_one(value: object, change: object, after_read: bool) -> bool:
        if isinstance(value, TimelineHead):  # its changes are timeline or author changes (apply routes by kind)
            if after_read:
                value.apply(change.op, change.entry)  # type: ignore[union-attr]
                return True
            return value.settles(change.op, change.entry)  # type: ignore[union-attr]
        assert isinstance(value, set) and isinstance(change, PullFollowChange)
        if not after_read:
            return False
        _apply_follow(value, change)
        return True

    # -- changes ---------------------------------------------------------------------------
    def apply(self, batch: list[Consumed]) -> None:
        """Apply a batch of changes in order to the cached heads (and note them for pending fills)."""
        data, pending = self._data, self._pending
        for consumed in batch:
            change = consumed.change
            if isinstance(change, TimelineChange):
                keys = [("home", t) for t in change.timeline_ids]
            elif isinstance(change, AuthorChange):
                keys = [("author", change.entry.author_id)]
            elif isinstance(change, PullFollowChange):
                keys = [("pull", f) for f in change.follower_ids]
            else:
                continue
            for ck in keys:
                fill = pending.get(ck)
                if fill is not None:
                    fill.changes.append(consumed)
                if ck not in data:
                    continue
                value = Cache.__getitem__(data, ck)  # a change is not a use: no LRU touch
                if isinstance(value, TimelineHead):
                    value.apply(change.op, change.entry)  # type: ignore[union-attr]
                    if value.empty_and_unknown:
                        del data[ck]
                else:
                    _apply_follow(value, change)  # type: ignore[arg-type]

    def drop_all(self, reason: str = "") -> None:
        """Forget everything (a gap in the changes): the next reads fill again."""
        self._data.clear()
        for fill in self._pending.values():
            fill.dropped = True


def _apply_follow(authors: set, change: PullFollowChange) -> None:
    if change.op == "insert":
        authors.add(change.author_id)
    else:
        authors.discard(change.author_id)
