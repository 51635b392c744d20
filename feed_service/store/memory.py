"""An in-memory :class:`~feed_service.store.ports.TimelineStore` for unit tests of the read service.

Same ordering and cursor semantics as Cassandra; ``fail`` set to a
:class:`~feed_service.errors.StoreError` makes every call raise it (outage simulation). Never a
stand-in for Cassandra in a test of the system: integration tests use the real node.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from feed_service.core.rows import Cursor, Entry, ProfileKey, ProfileRow
from feed_service.errors import StoreError, StoreUnavailable
from feed_service.store.ports import InboxSlice


class MemoryStore:
    """In-memory :class:`TimelineStore` for unit tests: same ordering and cursor semantics.

    ``fail`` set to a :class:`StoreError` makes every call raise it (outage simulation).
    """

    def __init__(self) -> None:
        self.timelines: dict[str, dict[Cursor, Entry]] = {}
        self.tweets: dict[str, Entry] = {}
        self.profile_rows: dict[ProfileKey, ProfileRow] = {}
        self.author_timelines: dict[str, dict[Cursor, Entry]] = {}
        self.follows_pull: dict[str, set[str]] = {}
        self.blocked: set[tuple[str, str]] = set()
        """(blocker_id, blocked_id) of every block in force: the rows of the ``blocks`` table."""
        self.fail: StoreError | None = None
        self.calls: Counter[str] = Counter()
        """Calls per method: what Cassandra would have been asked, one single-partition read each
        (``inbox`` counts a ``page`` too: it reads through it, so a test's faulty ``page`` reaches it)."""

    def add_entry(self, timeline_id: str, row: Entry) -> None:
        self.timelines.setdefault(timeline_id, {})[row.cursor] = row

    def add_author_entry(self, row: Entry) -> None:
        self.author_timelines.setdefault(row.author_id, {})[row.cursor] = row

    def add_pull_follow(self, follower_id: str, author_id: str) -> None:
        self.follows_pull.setdefault(follower_id, set()).add(author_id)

    def add_block(self, blocker_id: str, blocked_id: str) -> None:
        self.blocked.add((blocker_id, blocked_id))

    def add_profile(self, row: ProfileRow) -> None:
        self.profile_rows[(row.user_id, row.version)] = row

    def _check(self, method: str = "") -> None:
        self.calls[method] += 1
        if self.fail is not None:
            raise self.fail

    def _older(self, rows: dict[Cursor, Entry], before: Cursor | None, limit: int) -> list[Entry]:
        ordered = sorted(rows.values(), key=lambda r: r.cursor, reverse=True)
        return [r for r in ordered if before is None or r.cursor < before][:limit]

    def _newer(self, rows: dict[Cursor, Entry], after: Cursor | None, limit: int) -> list[Entry]:
        ordered = sorted(rows.values(), key=lambda r: r.cursor)
        return [r for r in ordered if after is None or r.cursor > after][:limit]

    async def page(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        self._check("page")
        return self._older(self.timelines.get(timeline_id, {}), before, limit)

    async def inbox(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> InboxSlice:
        self._check("inbox")
        entries = await self.page(timeline_id, before=before, limit=limit, timeout=timeout)  # its faults too
        pull = sorted(self.follows_pull.get(timeline_id, ()))
        # as Cassandra: below a cursor, the static column comes only with a row
        return InboxSlice(entries, pull if before is None or entries else None)

    async def newer(self, timeline_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        self._check("newer")
        return self._newer(self.timelines.get(timeline_id, {}), after, limit)

    async def author_page(self, author_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        self._check("author_page")
        return self._older(self.author_timelines.get(author_id, {}), before, limit)

    async def author_newer(self, author_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        self._check("author_newer")
        return self._newer(self.author_timelines.get(author_id, {}), after, limit)

    async def pull_authors(self, user_id: str, *, timeout: float) -> list[str]:
        self._check("pull_authors")
        return sorted(self.follows_pull.get(user_id, ()))

    async def tweet(self, tweet_id: str, *, timeout: float) -> Entry | None:
        self._check("tweet")
        return self.tweets.get(tweet_id)

    async def profile(self, user_id: str, version: int | None, *, timeout: float) -> ProfileRow | None:
        self._check("profile")
        if version is not None:
            return self.profile_rows.get((user_id, version))
        versions = [v for (u, v) in self.profile_rows if u == user_id]
        return self.profile_rows[(user_id, max(versions))] if versions else None

    async def profiles(self, keys: Iterable[ProfileKey], *, timeout: float) -> dict[ProfileKey, ProfileRow]:
        self._check("profiles")
        return {k: self.profile_rows[k] for k in keys if k in self.profile_rows}

    async def blocks(self, blocker_id: str, blocked_id: str, *, timeout: float) -> bool:
        self._check("blocks")
        return (blocker_id, blocked_id) in self.blocked

    def close(self) -> None:
        self.fail = StoreUnavailable("store closed")
