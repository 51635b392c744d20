"""Display names for timeline entries (their authors', and their reposters'): profile versions by
``(user_id, version)``, cached.

A version's content never changes (the writer only replays identical cells), so a cached row never
goes stale. A version that is not stored (yet) is remembered as missing for ``missing_ttl_s``
seconds, so a page whose authors' profile versions never arrived costs no Cassandra read on every
read; a late-arriving version shows up once that entry expires, or at once when the view's change
topic announces it (:meth:`ProfileCache.forget_missing`).

:class:`EntryHydrator` turns timeline rows into the entry fields of a response, with those names.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Callable, Iterable

from cachetools import TTLCache
from prometheus_client import Counter

from feed_service.core.rows import Entry, ProfileKey, ProfileRow
from feed_service.store.ports import TimelineStore

#: Bounded so that a flood of distinct authors cannot grow memory without limit.
DEFAULT_PROFILE_CACHE_SIZE = 100_000
#: Seconds a profile version found missing is not read again (unless forgotten explicitly).
DEFAULT_MISSING_TTL_S = 5.0
#: Missing versions remembered at most (least recently used dropped first).
DEFAULT_MISSING_SIZE = 10_000


class _NotStored:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_STORED"


#: What :meth:`ProfileCache.lookup` returns for a version read recently and not found.
NOT_STORED = _NotStored()


class ProfileCache:
    """LRU of immutable profile versions by ``(user_id, version)``, plus a bounded TTL set of versions
    known not to be stored. ``hits`` counts lookups answered without Cassandra (a cached row or a
    known-missing version), ``misses`` those that need a read. Used from one event loop only."""

    def __init__(self, capacity: int = DEFAULT_PROFILE_CACHE_SIZE, *, missing_ttl_s: float = DEFAULT_MISSING_TTL_S,
                 missing_size: int = DEFAULT_MISSING_SIZE, timer: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self._data: OrderedDict[ProfileKey, ProfileRow] = OrderedDict()
        #: versions read and not found, until they expire or are forgotten (none when caching is off)
        self._missing: TTLCache | None = (
            TTLCache(min(missing_size, capacity), missing_ttl_s, timer=timer)
            if capacity > 0 and missing_size > 0 and missing_ttl_s > 0 else None)
        #: bumped by every forget_missing: a read that started before cannot mark anything missing
        self._forgets = 0
        self.hits = 0
        self.misses = 0

    def lookup(self, key: ProfileKey) -> ProfileRow | _NotStored | None:
        """The cached row of ``key``; :data:`NOT_STORED` when it was read recently and not found;
        None when it must be read from the store."""
        row = self._data.get(key)
        if row is not None:
            self.hits += 1
            self._data.move_to_end(key)
            return row
        missing = self._missing
        if missing is not None and key in missing:
            self.hits += 1
            return NOT_STORED
        self.misses += 1
        return None

    def holds(self, key: ProfileKey) -> bool:
        """Whether ``key``'s row is cached (no lookup counted, no LRU touch)."""
        return key in self._data

    def put(self, row: ProfileRow) -> None:
        if self.capacity <= 0:
            return
        key = (row.user_id, row.version)
        if self._missing is not None:
            self._missing.pop(key, None)
        self._data[key] = row
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def read_started(self) -> int:
        """A token for :meth:`put_missing`: take it before reading the store."""
        return self._forgets

    def put_missing(self, key: ProfileKey, since: int) -> None:
        """Remember that ``key`` was read and not found, unless a version was forgotten since the
        read began (``since``: :meth:`read_started`), which may then be this one arriving."""
        if self._missing is not None and since == self._forgets:
            self._missing[key] = True

    def forget_missing(self, key: ProfileKey) -> None:
        """``key`` has been written (the view's change topic said so): read it again next time."""
        self._forgets += 1
        if self._missing is not None:
            self._missing.pop(key, None)

    def missing_count(self) -> int:
        """Versions currently remembered as missing (expired ones may still count until touched)."""
        return len(self._missing) if self._missing is not None else 0

    def __len__(self) -> int:
        return len(self._data)


async def hydrate_profiles(
    store: TimelineStore, cache: ProfileCache, keys: Iterable[ProfileKey], *, timeout: float
) -> dict[ProfileKey, ProfileRow]:
    """Profiles for ``keys`` (absent: not stored): from the cache, reading only keys neither cached
    nor known to be missing from ``store``, concurrently; what the read returns is cached, what it
    does not is remembered as missing."""
    found: dict[ProfileKey, ProfileRow] = {}
    unknown: list[ProfileKey] = []
    lookup = cache.lookup
    for key in dict.fromkeys(keys):
        row = lookup(key)
        if row is None:
            unknown.append(key)
        elif row is not NOT_STORED:
            found[key] = row
    if unknown:
        since = cache.read_started()
        fetched = await store.profiles(unknown, timeout=timeout)
        for key in unknown:
            row = fetched.get(key)
            if row is None:
                cache.put_missing(key, since)
            else:
                cache.put(row)
                found[key] = row
    return found


def entry_fields(row: Entry, profile: ProfileRow | None,
                 reposter: ProfileRow | None = None) -> dict[str, Any]:
    """The fields of one ``TimelineEntry``, for a response's constructor (``entries=[...]``): protobuf
    builds the entry in place from them, where a ready message would be built, then copied (about
    twice the cost of a 20-entry page's entries). The reply and repost fields are added only when
    set: a plain entry costs what it cost before they existed."""
    fields = {
        "tweet_id": row.tweet_id, "author_id": row.author_id, "created_at_ms": row.created_at,
        "version": row.version, "text": row.text or "", "profile_version": row.profile_version,
        "author_display_name": (profile.display_name or "") if profile else "",
        "author_avatar_url": (profile.avatar_url or "") if profile else "",
    }
    if row.in_reply_to_tweet_id is not None:
        fields["in_reply_to_tweet_id"] = row.in_reply_to_tweet_id
        fields["in_reply_to_author_id"] = row.in_reply_to_author_id or ""
    if row.reposted_by is not None:
        fields["reposted_by"] = row.reposted_by
        fields["reposted_at_ms"] = row.reposted_at or 0
        fields["reposted_by_display_name"] = (reposter.display_name or "") if reposter else ""
    return fields


def profile_keys(rows: Iterable[Entry]) -> Iterable[ProfileKey]:
    """The profile versions a page shows: each author's, and each reposter's at its repost."""
    for r in rows:
        yield r.author_id, r.profile_version
        if r.reposted_by is not None:
            yield r.reposted_by, r.reposter_profile_version


class EntryHydrator:
    """Timeline rows as response entries with their authors' display names, through one server's
    profile cache; counts the cache's hits and misses in ``lookups`` (``feed_profile_cache_total``)."""

    def __init__(self, cache: ProfileCache, lookups: Counter) -> None:
        self.cache = cache
        self._lookups = lookups

    async def entries(self, store: TimelineStore, rows: list[Entry], budget: float) -> list[dict[str, Any]]:
        """``rows`` as entry fields (:func:`entry_fields`), each with the profile of its version."""
        cache = self.cache
        hits, misses = cache.hits, cache.misses
        profiles = await hydrate_profiles(store, cache, profile_keys(rows), timeout=budget)
        if cache.hits != hits:
            self._lookups.labels("hit").inc(cache.hits - hits)
        if cache.misses != misses:
            self._lookups.labels("miss").inc(cache.misses - misses)
        return [entry_fields(r, profiles.get((r.author_id, r.profile_version)),
                             None if r.reposted_by is None else profiles.get((r.reposted_by, r.reposter_profile_version)))
                for r in rows]
