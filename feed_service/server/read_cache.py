"""An exact, bounded cache of the first rows of active timelines, kept current by the view's changes.

What a home-timeline page is made of is cached per source (docs/api.md#read-cache): the head of the
user's inbox (``home_timeline``) with the user's pull authors (its static ``pull_authors``, read with
it) and the head of the user's per-reader entries (``home_extras``, read beside it), and the head of
each pull author's own timeline (``author_timeline``); a page is their merge, as on the uncached
path. A pull author's reply to a third user is decided by whether the reader sees that user: the
inbox head keeps the memberships of the reader's visible set it was asked about, each replaced by
the change of its row. A user's own reposts (``user_reposts``) have heads of their own, for
GetUserTimeline. Every source is filled from Cassandra on a miss and then changed only by the
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
other case the fill is dropped and the next read tries again (a per-reader row's content can
change without a new tweet version, so its change settles a fill only if the read shows that very
content). Changes published after the read are applied in order, as to any cached head. Rows are
identified by position, as in Cassandra, so the two changes of a move apply in either order.
Nothing here blocks the loop or reads Cassandra by itself.

A reader whose inbox is not kept (the static ``inbox_dropped``, read with every inbox slice:
docs/activity.md) gets no inbox head: its fill is not kept, so each of its pages is computed from
its authors' timelines (the author heads serve those). The flag is written by the stream's driver
and is not on the change topic, so a head is filled only from a read that saw it false and is
trusted for :data:`FLAG_RECHECK_S` after that read; a head older than that is filled again on its
next read (which reads the flag again). The driver sets the flag only for a reader that has not
read for far longer than that, and every hit is such a read (docs/activity.md).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Collection

from cachetools import Cache

from feed_service.core.list_readers import list_reader
from feed_service.core.per_reader.pull_reposts import ListRule
from feed_service.core.rows import Cursor, Entry
from feed_service.core.view_changes import (
    AuthorChange,
    ExtrasChange,
    ListChange,
    PullFollowChange,
    PullReposterChange,
    TimelineChange,
    UserRepostChange,
    VisibleChange,
)
from feed_service.server.cache_policy import CountedLRU, SeenOnce
from feed_service.server.change_feed import ChangeFeed, Consumed, Positions
from feed_service.server.pull_replies import first_shown, has_replies
from feed_service.server.timeline_head import (
    CacheKey,
    HomeSlice,
    PageKey,
    Sources,
    TimelineHead,
    newer_content,
)
from feed_service.store.ports import InboxSlice

__all__ = ["CacheKey", "HomeSlice", "PageKey", "ReadCache", "Sources", "TimelineHead", "newer_content"]

#: Rows kept per cached timeline or pull author: two pages of the default size and the row that
#: says whether a next page exists.
DEFAULT_DEPTH = 41
#: Timelines (and pull authors, and pull-author lists) kept per server process.
DEFAULT_MAX_KEYS = 20_000
#: A fill the feed does not confirm within this many seconds is dropped (the feed is lagging).
SETTLE_TIMEOUT_S = 5.0

#: Encoded pages kept per cached inbox head (the first page and the next one, say): bounded memory.
MAX_PAGES_PER_HEAD = 2

#: Seconds a cached inbox head is served after the read that saw its ``inbox_dropped`` false; then
#: its next read fills it again, reading the flag (docs/activity.md#exact-reads-without-an-inbox).
FLAG_RECHECK_S = 30.0


@dataclass
class _Fill:
    start: Positions
    changes: list[Consumed] = field(default_factory=list)
    dropped: bool = False


class ReadCache:
    """The cache of one server process, fed by ``feed`` (its ``on_batch``/``on_gap`` call :meth:`apply`
    and :meth:`drop_all`). ``hits``/``misses``/``evictions`` are cumulative counts."""

    def __init__(self, feed: ChangeFeed, *, depth: int = DEFAULT_DEPTH, max_keys: int = DEFAULT_MAX_KEYS,
                 settle_timeout_s: float = SETTLE_TIMEOUT_S, flag_recheck_s: float = FLAG_RECHECK_S,
                 timer: Callable[[], float] = time.monotonic) -> None:
        self.feed = feed
        self.flag_recheck_s = flag_recheck_s
        self.timer = timer
        self.depth = depth
        self.settle_timeout_s = settle_timeout_s
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._data: CountedLRU = CountedLRU(max_keys, self._evicted)
        self._seen = SeenOnce(max(1, 2 * max_keys))
        self._pending: dict[CacheKey, _Fill] = {}
        self._tasks: set[asyncio.Task] = set()
        #: fills whose reads returned, waiting to settle: (key, fill, head, when the read ended)
        self._settling: list[tuple[CacheKey, _Fill, TimelineHead, float]] = []
        #: a list's reader -> its list's rule (None: no live list), kept by the lists' changes
        self._list_rules: CountedLRU = CountedLRU(max_keys, self._evicted)
        #: the lists' changes applied so far: a rule read while one arrived is not kept
        self._list_changes = 0

    def _evicted(self) -> None:
        self.evictions += 1

    def __len__(self) -> int:
        return len(self._data)

    @property
    def usable(self) -> bool:
        return self.feed.live

    def _kept(self, head: TimelineHead) -> bool:
        """Whether an inbox head may be served: its reader's inbox was kept when its flag was last
        read, and that was less than ``flag_recheck_s`` ago (the flag is not on the change topic)."""
        return self.timer() - head.checked < self.flag_recheck_s

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
                   read: Callable[[int], Awaitable[HomeSlice]]) -> HomeSlice:
        """The ``n`` newest inbox rows of ``user_id`` older than ``before``, the user's pull authors
        and the ``n`` newest rows of its ``home_extras``: from the cached head when it can say, else
        ``read(limit)`` (the store's reads of both partitions, which fill the head, its pull authors
        and its extras from the top). Pull authors None: not known (a read below a cursor that
        returned no inbox row).

        A user's first page fills the head on its second miss in a while (:class:`~.cache_policy.SeenOnce`); the
        first is read as without the cache. A fill reads the ``n`` rows the page needs, no more: a
        miss costs the read the page would cost without the cache. The head then holds those rows
        (a later, larger first page fills it again); pages below it are read from the store."""
        ck = ("home", user_id)
        head = self._data.get(ck) if self.usable else None
        kept = head is not None and self._kept(head)
        if head is not None and kept and head.pull is not None and head.reposters is not None:
            rows = head.first(n, before)
            extras = head.extras.first(n, before) if rows is not None and head.extras is not None else None
            if rows is not None and extras is not None:
                self.hits += 1
                return HomeSlice(InboxSlice(rows, sorted(head.pull), sorted(head.reposters), False), extras)
        self.misses += 1
        started = self.timer()
        if (before is not None or n > self.depth or not self.usable or ck in self._pending
                or (head is None and not self._seen.again(user_id))):
            got = await read(n)
            if head is None or self._data.get(ck) is not head:
                return got
            if got.inbox.inbox_dropped:
                del self._data[ck]  # the inbox is no longer kept: its head is no use
                return got
            if got.inbox.inbox_dropped is False:  # this read saw the flag too
                head.checked = max(head.checked, started)
                kept = self._kept(head)
            if got.inbox.pull_authors is None and kept and head.pull is not None and head.reposters is not None:
                return HomeSlice(InboxSlice(got.inbox.entries, sorted(head.pull), sorted(head.reposters), False),
                                 got.extras)
            return got

        def build(s: HomeSlice) -> TimelineHead | None:  # no head of an inbox not kept
            if s.inbox.inbox_dropped is not False:
                return None
            return TimelineHead(s.inbox.entries, n, set(s.inbox.pull_authors or ()), TimelineHead(s.extras, n),
                                set(s.inbox.pull_reposters or ()), started)
        return await self._fill(ck, lambda: read(n), build)  # type: ignore[return-value]

    async def sees(self, user_id: str, users: Collection[str],
                   read: Callable[[Collection[str]], Awaitable[set[str]]]) -> set[str]:
        """Those of ``users`` that ``user_id`` sees: from the memberships its cached inbox head holds,
        reading the others with ``read`` (and keeping them, unless a change of the reader's visible
        set arrived while the read ran: a membership is a whole row, so every change replaces it, and
        one consumed before the read started is in what the read returns)."""
        head = self._data.get(("home", user_id)) if self.usable else None
        if head is None:
            return await read(users)
        known = head.sees
        if known is None:
            known = head.sees = {}
        unknown = [u for u in users if u not in known]
        seen = {u for u in users if known.get(u)}
        if not unknown:
            self.hits += 1
            return seen
        self.misses += 1
        epoch = head.sees_epoch
        got = await read(unknown)
        if head.sees_epoch == epoch and self._data.get(("home", user_id)) is head and self.usable:
            for u in unknown:
                known[u] = u in got
        return seen | (got & set(unknown))

    async def list_rule(self, reader: str, read: Callable[[], Awaitable[ListRule | None]]) -> ListRule | None:
        """The rule of the list whose reader is ``reader`` (None: the list does not exist): kept from
        ``read()`` (its reader's statics) and then by the lists' own changes (``ListChange``), so a
        list's page checks its owner without a store read (docs/api.md#lists). A read during which a
        list's change arrived is not kept: it may predate that change."""
        if self.usable and reader in self._list_rules:
            self.hits += 1
            return self._list_rules[reader]
        self.misses += 1
        changes = self._list_changes
        rule = await read()
        if self.usable and changes == self._list_changes:
            self._list_rules[reader] = rule
        return rule

    async def pull_authors(self, user_id: str, read: Callable[[], Awaitable[list[str]]]) -> list[str]:
        """The pull authors ``user_id`` follows: from the cached inbox head, else ``read()``."""
        head = self._data.get(("home", user_id)) if self.usable else None
        if head is not None and head.pull is not None:
            self.hits += 1
            return sorted(head.pull)
        self.misses += 1
        return await read()

    async def pull_reposters(self, user_id: str, read: Callable[[], Awaitable[list[str]]]) -> list[str]:
        """The pull reposters ``user_id`` merges in: from the cached inbox head, else ``read()``."""
        head = self._data.get(("home", user_id)) if self.usable else None
        if head is not None and head.reposters is not None:
            self.hits += 1
            return sorted(head.reposters)
        self.misses += 1
        return await read()

    # -- the hit path: no await, no task ----------------------------------------------------
    def home_rows(self, user_id: str, n: int, before: Cursor | None, *,
                  pull_authors: bool = True) -> tuple[list[list[Entry]], Sources, int] | None:
        """The ``n`` newest rows older than ``before`` of every source of ``user_id``'s home
        timeline (its inbox first, then each pull author's), newest first, the pull authors' heads
        with their stamps, and the inbox head's stamp; None unless every source is cached and can say.
        ``pull_authors`` False: None too when the reader merges a pull author in (a list's reader,
        whose pull authors' replies its list's rule decides, docs/lists.md)."""
        if not self.usable:
            return None
        data = self._data
        head = data.get(("home", user_id))
        if head is None or not self._kept(head):
            return None
        plan = head.home_plan(user_id)
        if plan is None or not plan.cacheable or (plan.pull_authors and not pull_authors):
            return None  # a reader merging pull reposters in: its repost rows are decided with lookups
        inbox = head.first(n, before)
        if inbox is None:
            return None
        sources = [inbox]
        extras = head.extras
        if extras is None:
            return None
        if extras.rows or not extras.complete:  # a timeline without extras pays one test for them
            rows = extras.first(n, before)
            if rows is None:
                return None
            if rows:
                sources.append(rows)
        stamps = []
        for author in plan.pull_authors:
            ck = ("author", author)
            author_head = data.get(ck)
            if author_head is None:
                return None
            rows = author_head.first(n, before)
            if rows is None:
                return None
            if author_head.replies and has_replies(rows):  # a reply to a third user: shown if the reader sees that user
                rows = first_shown(author_head.below(before), user_id, head.sees, n)
                if rows is None or (len(rows) < n and not author_head.complete):
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
        if head is None or not head.pages or not self._kept(head):
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
        head = build(result)
        if head is None:  # nothing to keep (a reader whose inbox is not kept), nor any head kept before
            if self._pending.get(ck) is fill:
                del self._pending[ck]
            self._data.pop(ck, None)
            return result
        # Fills settle together: one task for all those whose reads ended before its watermark
        # read, not a task (and a watermark wait) per fill.
        self._settling.append((ck, fill, head, time.monotonic()))
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
        if isinstance(change, PullReposterChange):  # as for the pull authors
            if not after_read:
                return False
            head.follow_reposter(change)
            return True
        if isinstance(change, VisibleChange):
            head.see(change)  # a new head holds no membership yet: nothing to settle
            return True
        versioned = True
        if isinstance(change, ExtrasChange):
            if head.extras is None:  # a head filled without them (a plain timeline-shaped read)
                return True
            head = head.extras
            versioned = False
        elif isinstance(change, UserRepostChange):
            versioned = False
        if after_read:
            head.apply(change.op, change.entry)  # type: ignore[union-attr]
            return True
        return head.settles(change.op, change.entry, versioned=versioned)  # type: ignore[union-attr]

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
            elif isinstance(change, ExtrasChange):
                keys = [("home", change.timeline_id)]
            elif isinstance(change, UserRepostChange):
                keys = [("reposts", change.entry.reposted_by)]  # type: ignore[list-item]
            elif isinstance(change, VisibleChange):
                keys = [("home", change.reader_id)]
            elif isinstance(change, PullReposterChange):
                keys = [("home", change.timeline_id)]
            elif isinstance(change, ListChange):
                self._list_changes += 1
                reader = list_reader(change.list_id)
                if reader in self._list_rules:  # a move is a delete then an upsert: the last one stays
                    self._list_rules[reader] = (ListRule(change.owner_id, change.replies_policy or "list")
                                                if change.op == "upsert" else None)
                continue
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
                if isinstance(change, VisibleChange):
                    head.see(change)
                    continue
                if isinstance(change, PullReposterChange):
                    head.follow_reposter(change)
                    continue
                if isinstance(change, ExtrasChange):
                    extras = head.extras
                    if extras is not None:
                        head.changed()  # its pages show the extras too
                        extras.apply(change.op, change.entry)
                        if extras.empty_and_unknown:
                            del data[ck]
                    continue
                head.apply(change.op, change.entry)  # type: ignore[union-attr]
                if head.empty_and_unknown:
                    del data[ck]

    def drop_all(self, reason: str = "") -> None:
        """Forget everything (a gap in the changes): the next reads fill again."""
        self._data.clear()
        self._list_rules.clear()
        self._list_changes += 1
        for fill in self._pending.values():
            fill.dropped = True

