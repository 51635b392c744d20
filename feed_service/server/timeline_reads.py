"""Timeline reads of the hybrid fan-out: a home timeline is the user's inbox merged, at read time,
with the author timelines of the pull authors the user follows (docs/fan-out.md).

Each source is read from the read cache while the view's change topic keeps it exact
(docs/api.md#read-cache), else from the store, with pull authors' heads through the process's TTL'd
:class:`.pull_sources.PullSources`. The user's pull authors come with the inbox slice (one read: a
static column of the inbox partition). Pages go newest first (:func:`merge_newest`), a watch's
catch-up oldest first (:func:`merge_oldest`).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Awaitable

from feed_service.core.rows import Cursor, Entry
from feed_service.core.timeline_merge import merge_newest, merge_oldest
from feed_service.server.change_feed import ChangeFeed
from feed_service.server.pull_sources import PullSources
from feed_service.server.read_cache import ReadCache, Sources
from feed_service.store.ports import TimelineStore


class TimelineReads:
    """Home and author timelines of one server, merged from their sources."""

    def __init__(self, pull: PullSources) -> None:
        self.pull = pull
        #: the view's change topic, once consumed (:meth:`attach`), and the exact cache it keeps
        self.feed: ChangeFeed | None = None
        self.read_cache: ReadCache | None = None

    def attach(self, feed: ChangeFeed, read_cache: ReadCache | None) -> None:
        """Read through ``read_cache`` (None: no read cache) while ``feed`` is live."""
        self.feed, self.read_cache = feed, read_cache

    def pushed(self) -> bool:
        """Whether the change topic is live: watches are pushed, and read what they send exactly."""
        return self.feed is not None and self.feed.live

    def live_cache(self) -> ReadCache | None:
        cache = self.read_cache
        return cache if cache is not None and cache.usable else None

    async def pull_authors(self, store: TimelineStore, user_id: str, budget: float, *, exact: bool = False) -> list[str]:
        """The pull authors ``user_id`` merges in: from the exact cache, else the TTL'd pull sources
        (or, ``exact``, the store: what a pushed watch reads must be no older than its subscription)."""
        cache = self.live_cache()
        if cache is not None:
            return await cache.pull_authors(user_id, lambda: store.pull_authors(user_id, timeout=budget))
        if exact:
            return await store.pull_authors(user_id, timeout=budget)
        return await self.pull.authors(store, user_id, timeout=budget)

    def cached_home_page(self, user_id: str, before: Cursor | None,
                         limit: int) -> tuple[list[Entry], Sources, int] | None:
        """:meth:`home_page` when the read cache holds every source: the rows, the pull authors'
        heads they came from and the inbox head's stamp (what an encoded page depends on); no
        await, no task. None when some source is not cached (or no cache is live)."""
        cache = self.live_cache()
        if cache is None:
            return None
        got = cache.home_rows(user_id, limit, before)
        if got is None:
            return None
        sources, authors, stamp = got
        rows = sources[0] if len(sources) == 1 else merge_newest(sources, limit)
        return rows, authors, stamp

    async def home_page(self, store: TimelineStore, user_id: str, before: Cursor | None, limit: int,
                        budget: float) -> list[Entry]:
        """Up to ``limit`` entries of the home timeline older than ``before``, newest first: the
        inbox slice merged with the pull authors the user follows. One store read when the user
        follows no pull author (the slice brings the list), more only for pull authors' heads."""
        cache = self.live_cache()
        if cache is None:
            got = await store.inbox(user_id, before=before, limit=limit, timeout=budget)
            authors = got.pull_authors
            if authors is None:  # nothing below the cursor came back, so neither did the list
                authors = await self.pull.authors(store, user_id, timeout=budget)
            if not authors:
                return got.entries
            pulled = await self.pull.pages(store, authors, before=before, limit=limit, timeout=budget)
            return merge_newest([got.entries, *pulled], limit)
        got = await cache.home(user_id, limit, before,
                               lambda n: store.inbox(user_id, before=before, limit=n, timeout=budget))
        authors = got.pull_authors
        if authors is None:
            authors = await cache.pull_authors(user_id, lambda: store.pull_authors(user_id, timeout=budget))
        if not authors:
            return got.entries
        pulled = [cache.rows("author", a, limit, before,
                             lambda n, a=a: store.author_page(a, before=before, limit=n, timeout=budget))
                  for a in authors]
        return merge_newest([got.entries, *(await asyncio.gather(*pulled))], limit)

    def author_page(self, store: TimelineStore, author_id: str, before: Cursor | None, limit: int,
                    budget: float) -> Awaitable[list[Entry]]:
        """An author's own timeline, newest first: from the read cache or the TTL'd pull sources."""
        cache = self.live_cache()
        if cache is not None:
            return cache.rows("author", author_id, limit, before,
                              lambda n: store.author_page(author_id, before=before, limit=n, timeout=budget))
        return self.pull.page(store, author_id, before=before, limit=limit, timeout=budget)

    async def home_newer(self, store: TimelineStore, user_id: str, after: Cursor | None, limit: int,
                         budget: float) -> list[Entry]:
        """Up to ``limit`` entries of the home timeline newer than ``after``, oldest first: the inbox
        and the pull authors the user follows now."""
        pushed = self.pushed()
        authors = await self.pull_authors(store, user_id, budget, exact=pushed)
        # A pushed watch catches up from the store itself: the TTL'd heads may predate its subscription.
        newer = store.author_newer if pushed else functools.partial(self.pull.newer, store)
        sources = await asyncio.gather(
            store.newer(user_id, after=after, limit=limit, timeout=budget),
            *(newer(a, after=after, limit=limit, timeout=budget) for a in authors))
        return merge_oldest(sources, limit)
