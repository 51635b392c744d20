"""An exact, bounded cache of the first rows of active timelines, kept current by the view's changes.

What a home-timeline page is made of is cached per source (docs/api.md#read-cache): the head of the
user's inbox (``home_timeline``) with the user's pull authors (its static ``pull_authors``, read with
it), and the head of each pull author's own timeline (``author_timeline``); a page is their merge, as
on the uncached path. Every source is filled from Cassandra on a miss and then changed only by the
change topic, so the cache is never older than what Cassandra returned once the stream's changes of
that moment are applied.

On top of the sources, a cached inbox head keeps the encoded responses of its latest pages
(:meth:`ReadCache.page_memo`): a page is merged, hydrated and encoded once, and served as bytes until
one of its sources changes. Every change of a head gives it a new ``stamp``; a memo notes the stamps
of the pull authors' heads it was built from and is used only while each of them is still the
cached head with that stamp (a change of the inbox head itself clears its memos).

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
import itertools
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Hashable

from cachetools import Cache, LRUCache

from feed_service.core.rows import Cursor, Entry
from feed_service.core.view_changes import AuthorChange, PullFollowChange, TimelineChange
from feed_service.server.change_feed import ChangeFeed, Consumed, Positions
from feed_service.store.ports import InboxSlice

#: Rows kept per cached timeline or pull author: two pages of the default size and the row that
#: says whether a next page exists.
DEFAULT_DEPTH = 41
#: Timelines (and pull authors, and pull-author lists) kept per server process.
DEFAULT_MAX_KEYS = 20_000
#: A fill the feed does not confirm within this many seconds is dropped (the feed is lagging).
SETTLE_TIMEOUT_S = 5.0

#: Encoded pages kept per cached inbox head (the first page and the next one, say): bounded memory.
MAX_PAGES_PER_HEAD = 2

CacheKey = tuple[str, str]
"""("home", user) | ("author", author)."""
PageKey = Hashable
"""What identifies an encoded page of one timeline: the request's page token and page size."""
Sources = tuple[tuple[CacheKey, "TimelineHead", int], ...]
"""The pull authors' heads a page was merged from, with their stamps then."""

#: Stamps of heads: unique across the process, so a refilled head never takes an old head's stamp.
_stamps = itertools.count(1)


class TimelineHead:
    """The newest rows of one timeline-shaped table, exact down to the oldest row held (or whole,
    when ``complete``: its read returned fewer rows than it asked for). Kept oldest first, so that
    positions bisect on the cursors ``(created_at, tweet_id)`` themselves. An inbox head also holds
    its user's pull authors (``pull``; None when filled without them) and encoded pages (``pages``)."""

    __slots__ = ("rows", "cursors", "by_id", "complete", "depth", "pull", "stamp", "pages")

    def __init__(self, newest_first: list[Entry], depth: int, pull: set[str] | None = None) -> None:
        self.depth = depth
        self.complete = len(newest_first) < depth
        self.rows = list(reversed(newest_first[:depth]))
        self.cursors = [e.cursor for e in self.rows]
        self.by_id = {e.tweet_id: e for e in self.rows}
        self.pull = pull
        self.stamp = next(_stamps)
        self.pages: dict[PageKey, tuple[Sources, bytes]] = {}

    def changed(self) -> None:
        """Something this head holds changed: a new stamp, and its encoded pages are gone."""
        self.stamp = next(_stamps)
        if self.pages:
            self.pages = {}

    def follow(self, change: PullFollowChange) -> None:
        """A change of the user's pull authors (an inbox head filled with them)."""
        if self.pull is None:
            return
        if change.op == "insert":
            self.pull.add(change.author_id)
        else:
            self.pull.discard(change.author_id)
        self.changed()

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
        self.changed()
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


class _SeenOnce:
    """Users whose inbox was read once recently: the second read of a user fills a head, the first
    reads the store as without the cache. Most users read once in a while would only churn the
    cache (a head built, kept, evicted unread; and the garbage collector's full passes over all of
    them), so a fill waits for the evidence of a repeat. Two generations of at most ``size`` ids
    each: the older is forgotten whole when the newer fills up."""

    __slots__ = ("size", "_new", "_old")

    def __init__(self, size: int) -> None:
        self.size = size
        self._new: set[str] = set()
        self._old: set[str] = set()

    def again(self, key: str) -> bool:
        """Whether ``key`` was seen recently; remembers it either way."""
        if key in self._new:
            return True
        if len(self._new) >= self.size:
            self._old, self._new = self._new, set()
        self._new.add(key)
        return key in self._old


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
        self._seen = _SeenOnce(max(1, 2 * max_keys))
        self._pending: dict[CacheKey, _Fill] = {}
        self._tasks: set[asyncio.Task] = set()
        #: fills whose reads returned, waiting to settle: (key, fill, head, when the read ended)
        self._settling: list[tuple[CacheKey, _Fill, TimelineHead, float]] = []

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

    async def home(self, user_id: str, n: int, before: Cursor | None,
                   read: Callable[[int], Awaitable[InboxSlice]]) -> InboxSlice:
        """The ``n`` newest inbox rows of ``user_id`` older than ``before`` and the user's pull
        authors: from the cached head when it can say, else ``read(limit)`` (one store read, which
        fills the head and its pull authors from the top). Pull authors None: not known (a read
        below a cursor that returned no row).

        A user's first page fills the head on its second miss in a while (:class:`_SeenOnce`); the
        first is read as without the cache. A fill reads the ``n`` rows the page needs, no more: a
        miss costs the read the page would cost without the cache. The head then holds those rows
        (a later, larger first page fills it again); pages below it are read from the store."""
        ck = ("home", user_id)
        head = self._data.get(ck) if self.usable else None
        if head is not None and head.pull is not None:
            rows = head.first(n, before)
            if rows is not None:
                self.hits += 1
                return InboxSlice(rows, sorted(head.pull))
        self.misses += 1
        if (before is not None or n > self.depth or not self.usable or ck in self._pending
                or (head is None and not self._seen.again(user_id))):
            got = await read(n)
            if got.pull_authors is None and head is not None and head.pull is not None:
                return InboxSlice(got.entries, sorted(head.pull))
            return got
        return await self._fill(ck, lambda: read(n), lambda s: TimelineHead(s.entries, n, set(s.pull_authors or ())))

    async def pull_authors(self, user_id: str, read: Callable[[], Awaitable[list[str]]]) -> list[str]:
        """The pull authors ``user_id`` follows: from the cached inbox head, else ``read()``."""
        head = self._data.get(("home", user_id)) if self.usable else None
        if head is not None and head.pull is not None:
            self.hits += 1
            return sorted(head.pull)
        self.misses += 1
        return await read()

    # -- the hit path: no await, no task ----------------------------------------------------
    def home_rows(self, user_id: str, n: int,
                  before: Cursor | None) -> tuple[list[list[Entry]], Sources, int] | None:
        """The ``n`` newest rows older than ``before`` of every source of ``user_id``'s home
        timeline (its inbox first, then each pull author's), newest first, the pull authors' heads
        with their stamps, and the inbox head's stamp; None unless every source is cached and can say."""
        if not self.usable:
            return None
        data = self._data
        head = data.get(("home", user_id))
        if head is None or head.pull is None:
            return None
        inbox = head.first(n, before)
        if inbox is None:
            return None
        sources = [inbox]
        stamps = []
        for author in sorted(head.pull):
            ck = ("author", author)
            author_head = data.get(ck)
            if author_head is None:
                return None
            rows = author_head.first(n, before)
            if rows is None:
                return None
            sources.append(rows)
            stamps.append((ck, author_head, author_head.stamp))
        self.hits += 1 + len(stamps)
        return sources, tuple(stamps), head.stamp

    def page_memo(self, user_id: str, key: PageKey) -> bytes | None:
        """The encoded page ``key`` of ``user_id``'s home timeline, if one is kept and none of its
        sources changed since it was built."""
        if not self.usable:
            return None
        head = self._data.get(("home", user_id))
        if head is None or not head.pages:
            return None
        memo = head.pages.get(key)
        if memo is None:
            return None
        sources, encoded = memo
        data = self._data
        for ck, author_head, stamp in sources:
            if author_head.stamp != stamp or data.get(ck) is not author_head:
                del head.pages[key]
                return None
        self.hits += 1 + len(sources)
        return encoded

    def remember_page(self, user_id: str, key: PageKey, sources: Sources, encoded: bytes, stamp: int) -> None:
        """Keep an encoded page built from the inbox head of stamp ``stamp`` and ``sources``
        (:meth:`home_rows`); nothing if the head changed meanwhile."""
        head = self._data.get(("home", user_id))
        if head is None or head.stamp != stamp:
            return
        pages = head.pages
        if key not in pages and len(pages) >= MAX_PAGES_PER_HEAD:
            del pages[next(iter(pages))]
        pages[key] = (sources, encoded)

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
        # Fills settle together: one task for all those whose reads ended before its watermark
        # read, not a task (and a watermark wait) per fill.
        self._settling.append((ck, fill, build(result), time.monotonic()))
        if not self._tasks:
            task = asyncio.ensure_future(self._settle_all())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return result

    async def _settle_all(self) -> None:
        while self._settling:
            batch, self._settling = self._settling, []
            # high watermarks read after the last read of the batch ended lie after every read of it
            read_done = max(done for *_, done in batch)
            highs: Positions = {}
            try:
                highs = await self.feed.high_watermarks_after(read_done)
                reached = await self.feed.wait_reached(highs, self.settle_timeout_s)
            except Exception:  # noqa: BLE001 - no watermarks (Kafka down): simply do not cache
                reached = False
            for ck, fill, value, _ in batch:
                self._settle(ck, fill, value, highs, reached)

    def _settle(self, ck: CacheKey, fill: _Fill, value: TimelineHead, highs: Positions, reached: bool) -> None:
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
    def _settle_one(head: TimelineHead, change: object, after_read: bool) -> bool:
        if isinstance(change, PullFollowChange):  # a change of the pull authors the read returned
            if not after_read:
                return False  # it may or may not be in the read: the fill is dropped
            head.follow(change)
            return True
        if after_read:
            head.apply(change.op, change.entry)  # type: ignore[union-attr]
            return True
        return head.settles(change.op, change.entry)  # type: ignore[union-attr]

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
                keys = [("home", f) for f in change.follower_ids]
            else:
                continue
            for ck in keys:
                fill = pending.get(ck)
                if fill is not None:
                    fill.changes.append(consumed)
                if ck not in data:
                    continue
                head = Cache.__getitem__(data, ck)  # a change is not a use: no LRU touch
                if isinstance(change, PullFollowChange):
                    head.follow(change)
                    continue
                head.apply(change.op, change.entry)  # type: ignore[union-attr]
                if head.empty_and_unknown:
                    del data[ck]

    def drop_all(self, reason: str = "") -> None:
        """Forget everything (a gap in the changes): the next reads fill again."""
        self._data.clear()
        for fill in self._pending.values():
            fill.dropped = True

