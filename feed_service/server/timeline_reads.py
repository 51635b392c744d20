"""Timeline reads of the hybrid fan-out: a home timeline is the user's inbox merged, at read time,
with the author timelines of the pull authors the user follows (docs/fan-out.md).

Each source is read from the read cache while the view's change topic keeps it exact
(docs/api.md#read-cache), else from the store, with pull authors through the process's TTL'd
:class:`.pull_sources.PullSources`. Pages go newest first (:func:`merge_newest`), a watch's catch-up
oldest first (:func:`merge_oldest`).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Awaitable

from feed_service.core.rows import Cursor, Entry
from feed_service.core.timeline_merge import merge_newest, merge_oldest
from feed_service.server.change_feed import ChangeFeed
from feed_service.server.pull_sources import PullSources
from feed_service.server.read_cache import ReadCache
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

    async def home_page(self, store: TimelineStore, user_id: str, before: Cursor | None, limit: int,
                        budget: float) -> list[Entry]:
        """Up to ``limit`` entries of the home timeline older than ``before``, newest first: the
        inbox slice merged with the pull authors the user follows."""
        authors = await self.pull_authors(store, user_id, budget)
        cache = self.live_cache()
        if cache is None:
            inbox = store.page(user_id, before=before, limit=limit, timeout=budget)
            if not authors:
                return await inbox
            sources = await asyncio.gather(inbox, self.pull.pages(store, authors, before=before, limit=limit,
                                                                  timeout=budget))
            return merge_newest([sources[0], *sources[1]], limit)
        inbox = cache.rows("home", user_id, limit, before,
                           lambda n: store.page(user_id, before=before, limit=n, timeout=budget))
        if not authors:
            return await inbox
        pulled = (cache.rows("author", a, limit, before,
                             lambda n, a=a: store.author_page(a, before=before, limit=n, timeout=budget))
                  for a in authors)
        return merge_newest(list(await asyncio.gather(inbox, *pulled)), limit)

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
