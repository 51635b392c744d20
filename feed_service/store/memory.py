"""An in-memory :class:`~feed_service.store.ports.TimelineStore` for unit tests of the read service.

Same ordering and cursor semantics as Cassandra; ``fail`` set to a
:class:`~feed_service.errors.StoreError` makes every call raise it (outage simulation). Never a
stand-in for Cassandra in a test of the system: integration tests use the real node.
"""

from __future__ import annotations

from typing import Iterable

from feed_service.core.rows import Cursor, Entry, ProfileKey, ProfileRow
from feed_service.errors import StoreError, StoreUnavailable


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

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    def _older(self, rows: dict[Cursor, Entry], before: Cursor | None, limit: int) -> list[Entry]:
        self._check()
        ordered = sorted(rows.values(), key=lambda r: r.cursor, reverse=True)
        return [r for r in ordered if before is None or r.cursor < before][:limit]

    def _newer(self, rows: dict[Cursor, Entry], after: Cursor | None, limit: int) -> list[Entry]:
        self._check()
        ordered = sorted(rows.values(), key=lambda r: r.cursor)
        return [r for r in ordered if after is None or r.cursor > after][:limit]

    async def page(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        return self._older(self.timelines.get(timeline_id, {}), before, limit)

    async def newer(self, timeline_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        return self._newer(self.timelines.get(timeline_id, {}), after, limit)

    async def author_page(self, author_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        return self._older(self.author_timelines.get(author_id, {}), before, limit)

    async def author_newer(self, author_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        return self._newer(self.author_timelines.get(author_id, {}), after, limit)

    async def pull_authors(self, user_id: str, *, timeout: float) -> list[str]:
        self._check()
        return sorted(self.follows_pull.get(user_id, ()))

    async def tweet(self, tweet_id: str, *, timeout: float) -> Entry | None:
        self._check()
        return self.tweets.get(tweet_id)

    async def profile(self, user_id: str, version: int | None, *, timeout: float) -> ProfileRow | None:
        self._check()
        if version is not None:
            return self.profile_rows.get((user_id, version))
        versions = [v for (u, v) in self.profile_rows if u == user_id]
        return self.profile_rows[(user_id, max(versions))] if versions else None

    async def profiles(self, keys: Iterable[ProfileKey], *, timeout: float) -> dict[ProfileKey, ProfileRow]:
        self._check()
        return {k: self.profile_rows[k] for k in keys if k in self.profile_rows}

    async def blocks(self, blocker_id: str, blocked_id: str, *, timeout: float) -> bool:
        self._check()
        return (blocker_id, blocked_id) in self.blocked

    def close(self) -> None:
        self.fail = StoreUnavailable("store closed")
