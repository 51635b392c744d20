"""Display names for timeline entries: profile versions by ``(user_id, version)``, cached.

A version's content never changes (the writer only replays identical cells), so a cached entry
never goes stale. A missing version is not cached, so a late-arriving profile version fills in on
the next read.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable

from feed_service.core.rows import ProfileKey, ProfileRow
from feed_service.store.ports import TimelineStore

#: Bounded so that a flood of distinct authors cannot grow memory without limit.
DEFAULT_PROFILE_CACHE_SIZE = 100_000


class ProfileCache:
    """LRU of immutable profile versions by ``(user_id, version)``; hits and misses are counted."""

    def __init__(self, capacity: int = DEFAULT_PROFILE_CACHE_SIZE) -> None:
        self.capacity = capacity
        self._data: OrderedDict[ProfileKey, ProfileRow] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: ProfileKey) -> ProfileRow | None:
        row = self._data.get(key)
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        self._data.move_to_end(key)
        return row

    def put(self, row: ProfileRow) -> None:
        if self.capacity <= 0:
            return
        self._data[(row.user_id, row.version)] = row
        self._data.move_to_end((row.user_id, row.version))
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


async def hydrate_profiles(
    store: TimelineStore, cache: ProfileCache, keys: Iterable[ProfileKey], *, timeout: float
) -> dict[ProfileKey, ProfileRow]:
    """Cached profiles for ``keys``, fetching the misses from ``store`` concurrently (and caching them)."""
    found: dict[ProfileKey, ProfileRow] = {}
    missing: list[ProfileKey] = []
    for key in dict.fromkeys(keys):
        row = cache.get(key)
        if row is None:
            missing.append(key)
        else:
            found[key] = row
    if missing:
        fetched = await store.profiles(missing, timeout=timeout)
        for key, row in fetched.items():
            cache.put(row)
            found[key] = row
    return found
