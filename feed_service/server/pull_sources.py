"""The pull side of a home-timeline read: which pull authors a user follows, and their newest entries.

A pull author's tweets live only in its author timeline, which every one of its (many) followers
merges into each home-timeline read (docs/fan-out.md). Reading it from Cassandra once per follower
read would multiply the cost of a page by the number of pull authors followed; instead each server
process keeps, for ``ttl_s`` seconds, the head of each pull author's timeline (enough for any page
from the top) and each user's list of pull authors. A page below the cached head, or any read with
``ttl_s`` 0, goes to the store. The cost of staleness is bounded: a new tweet of a pull author, a
follow or an unfollow of one shows at most ``ttl_s`` after the stream wrote it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from cachetools import TTLCache

from feed_service.core.rows import Cursor, Entry
from feed_service.core.timeline_merge import older_than
from feed_service.store.ports import TimelineStore

#: Pull authors' heads and users' pull-author lists kept per process (bounded memory).
DEFAULT_MAX_AUTHORS = 10_000
DEFAULT_MAX_USERS = 200_000


class PullSources:
    """Cached reads of pull authors for one server process (one event loop)."""

    def __init__(self, *, ttl_s: float, head: int, max_authors: int = DEFAULT_MAX_AUTHORS,
                 max_users: int = DEFAULT_MAX_USERS, timer: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.head = head
        self._heads: TTLCache | None = None
        self._authors: TTLCache | None = None
        if ttl_s > 0:
            self._heads = TTLCache(max_authors, ttl_s, timer=timer)
            self._authors = TTLCache(max_users, ttl_s, timer=timer)
        self.hits = 0
        self.misses = 0

    async def authors(self, store: TimelineStore, user_id: str, *, timeout: float) -> list[str]:
        """The pull authors ``user_id`` follows."""
        cache = self._authors
        if cache is not None:
            found = cache.get(user_id)
            if found is not None:
                return found
        authors = await store.pull_authors(user_id, timeout=timeout)
        if cache is not None:
            cache[user_id] = authors
        return authors

    async def page(self, store: TimelineStore, author_id: str, *, before: Cursor | None, limit: int,
                   timeout: float) -> list[Entry]:
        """Up to ``limit`` entries of ``author_id``'s timeline older than ``before``, newest first."""
        cache = self._heads
        if cache is None or limit > self.head:
            return await store.author_page(author_id, before=before, limit=limit, timeout=timeout)
        head = cache.get(author_id)
        if head is None:
            self.misses += 1
            head = await store.author_page(author_id, before=None, limit=self.head, timeout=timeout)
            cache[author_id] = head
        else:
            self.hits += 1
        rows = head if before is None else [e for e in head if older_than(e, before)]
        if len(rows) >= limit or len(head) < self.head:  # enough, or the head is the whole timeline
            return rows[:limit]
        return await store.author_page(author_id, before=before, limit=limit, timeout=timeout)

    async def newer(self, store: TimelineStore, author_id: str, *, after: Cursor | None, limit: int,
                    timeout: float) -> list[Entry]:
        """Up to ``limit`` entries of ``author_id``'s timeline newer than ``after``, oldest first."""
        head = self._heads.get(author_id) if self._heads is not None and after is not None else None
        if head is not None:
            covered = len(head) < self.head or (head and (head[-1].created_at, head[-1].tweet_id) <= after)
            if covered:
                rows = [e for e in reversed(head) if (e.created_at, e.tweet_id) > after]
                return rows[:limit]
        return await store.author_newer(author_id, after=after, limit=limit, timeout=timeout)

    async def pages(self, store: TimelineStore, author_ids: list[str], *, before: Cursor | None, limit: int,
                    timeout: float) -> list[list[Entry]]:
        """:meth:`page` of several authors, concurrently."""
        return list(await asyncio.gather(*(self.page(store, a, before=before, limit=limit, timeout=timeout)
                                           for a in author_ids)))
