"""Read side of the view: timeline pages, tweets and versioned profiles from Cassandra, for asyncio.

:class:`TimelineStore` is the port the gRPC service reads through; :class:`CassandraReader` is its
adapter and :class:`MemoryStore` (tests) an in-memory one. Every query is one prepared,
single-partition statement, run with the driver's ``execute_async`` and awaited through a future
bridge, so the event loop never blocks on Cassandra.

Queries (``home_timeline`` clusters by ``(created_at DESC, tweet_id DESC)``):

=================  ==================================================================================
``page``           ``WHERE timeline_id = ? [AND (created_at, tweet_id) < (?, ?)] LIMIT ?``: newest first
``newer``          ``WHERE timeline_id = ? [AND (created_at, tweet_id) > (?, ?)] ORDER BY ... ASC LIMIT ?``
``tweet``          ``tweets WHERE tweet_id = ?``
``profile``        ``profiles WHERE user_id = ? AND version = ?`` (or ``LIMIT 1``: the latest)
=================  ==================================================================================

Errors: driver exceptions are translated here, once, into :class:`StoreError`'s tree::

    StoreError
    ├── StoreUnavailable   no connection, no replica, coordinator overloaded, session closed
    └── StoreTimeout       the per-call timeout (the caller's deadline) ran out

Profiles are cached by ``(user_id, version)``: a version's content never changes (the writer only
replays identical cells), so a cached entry never goes stale. A missing version is not cached, so
a late-arriving profile version fills in on the next read.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Protocol, Sequence, TypeAlias

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

    from feed_service.settings import Settings

Cursor: TypeAlias = tuple[int, str]
"""A position in a timeline: the clustering key ``(created_at, tweet_id)`` of an entry."""

ProfileKey: TypeAlias = tuple[str, int]
"""``(user_id, version)``: the versioned key of one immutable profile version."""

#: Bounded so that a flood of distinct authors cannot grow memory without limit.
DEFAULT_PROFILE_CACHE_SIZE = 100_000


class StoreError(Exception):
    """A read failed; the subclasses say whether it may succeed on retry."""


class StoreUnavailable(StoreError):
    """Cassandra cannot serve the read now (down, unreachable, overloaded, session closed)."""


class StoreTimeout(StoreError):
    """The read did not complete within its timeout."""


@dataclass(frozen=True, slots=True)
class EntryRow:
    """One ``home_timeline`` row: a tweet as materialized into the inbox."""

    tweet_id: str
    author_id: str
    created_at: int
    version: int
    text: str
    profile_version: int

    @property
    def cursor(self) -> Cursor:
        return (self.created_at, self.tweet_id)


@dataclass(frozen=True, slots=True)
class TweetRow:
    tweet_id: str
    author_id: str
    created_at: int
    version: int
    text: str
    profile_version: int


@dataclass(frozen=True, slots=True)
class ProfileRow:
    user_id: str
    version: int
    display_name: str
    avatar_url: str | None
    bio: str | None


class TimelineStore(Protocol):
    """The reads the service needs. Every method raises only :class:`StoreError` subclasses.

    ``timeout`` is in seconds and bounds the whole call (the service passes the gRPC deadline).
    """

    async def page(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[EntryRow]:
        """Up to ``limit`` entries strictly older than ``before`` (all if None), newest first."""

    async def newer(self, timeline_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[EntryRow]:
        """Up to ``limit`` entries strictly newer than ``after`` (from the oldest if None), oldest first."""

    async def tweet(self, tweet_id: str, *, timeout: float) -> TweetRow | None:
        """The latest version of a tweet; None when unknown or deleted."""

    async def profile(self, user_id: str, version: int | None, *, timeout: float) -> ProfileRow | None:
        """A profile at ``version`` (the latest if None); None when that version is not stored."""

    async def profiles(self, keys: Iterable[ProfileKey], *, timeout: float) -> dict[ProfileKey, ProfileRow]:
        """The stored profiles among ``keys`` (missing keys are absent from the result)."""

    def close(self) -> None:
        """Release connections; later calls raise :class:`StoreUnavailable`."""


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


def _translate(exc: BaseException) -> StoreError:
    """Map a driver exception to the store's tree (the only place that knows driver types)."""
    from cassandra import DriverException, OperationTimedOut, ReadTimeout, RequestExecutionException
    from cassandra.cluster import NoHostAvailable

    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, (OperationTimedOut, ReadTimeout, asyncio.TimeoutError, TimeoutError)):
        return StoreTimeout(f"cassandra read timed out: {exc}")
    if isinstance(exc, (NoHostAvailable, RequestExecutionException, DriverException, ConnectionError, OSError)):
        return StoreUnavailable(f"cassandra unavailable: {type(exc).__name__}: {exc}")
    if isinstance(exc, RuntimeError) and "shutdown" in str(exc).lower():  # session/cluster shut down
        return StoreUnavailable(f"cassandra session closed: {exc}")
    return StoreUnavailable(f"cassandra read failed: {type(exc).__name__}: {exc}")


_ENTRY_COLUMNS = "tweet_id, author_id, created_at, version, text, profile_version"


class CassandraReader:
    """:class:`TimelineStore` on a cassandra-driver session (prepared statements, async execution).

    Construct with :meth:`connect` (owns its cluster) or around an existing session (the caller
    keeps ownership). Statements are prepared in the constructor, which therefore blocks: build it
    off the event loop (``asyncio.to_thread``).
    """

    def __init__(self, session: "Session", keyspace: str, *, cluster: "Cluster | None" = None) -> None:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT
        from cassandra.query import tuple_factory

        self.session = session
        self.cluster = cluster
        # the session's default profile with plain tuples: rows are read by position (cheapest factory)
        self._profile = session.execution_profile_clone_update(EXEC_PROFILE_DEFAULT, row_factory=tuple_factory)
        ks = keyspace
        p = session.prepare
        table = f"{ks}.home_timeline"
        self._page_first = p(f"SELECT {_ENTRY_COLUMNS} FROM {table} WHERE timeline_id = ? LIMIT ?")
        self._page_before = p(
            f"SELECT {_ENTRY_COLUMNS} FROM {table} WHERE timeline_id = ? AND (created_at, tweet_id) < (?, ?) LIMIT ?"
        )
        asc = "ORDER BY created_at ASC, tweet_id ASC"
        self._newer_all = p(f"SELECT {_ENTRY_COLUMNS} FROM {table} WHERE timeline_id = ? {asc} LIMIT ?")
        self._newer_after = p(
            f"SELECT {_ENTRY_COLUMNS} FROM {table} WHERE timeline_id = ? AND (created_at, tweet_id) > (?, ?)"
            f" {asc} LIMIT ?"
        )
        self._tweet = p(f"SELECT {_ENTRY_COLUMNS} FROM {ks}.tweets WHERE tweet_id = ?")
        profile_columns = "user_id, version, display_name, avatar_url, bio"
        self._profile_at = p(f"SELECT {profile_columns} FROM {ks}.profiles WHERE user_id = ? AND version = ?")
        self._profile_latest = p(f"SELECT {profile_columns} FROM {ks}.profiles WHERE user_id = ? LIMIT 1")
        self._closed = False

    @classmethod
    def connect(cls, settings: "Settings") -> "CassandraReader":
        """Connect to ``settings``' cluster and prepare the statements (blocking)."""
        from feed_service.store.session import connect

        try:
            cluster, session = connect(settings)
        except Exception as exc:
            raise _translate(exc) from exc
        try:
            return cls(session, settings.keyspace, cluster=cluster)
        except Exception as exc:
            cluster.shutdown()
            raise _translate(exc) from exc

    # -- the future bridge -----------------------------------------------------------------
    def _execute(self, statement: Any, params: Sequence[Any], timeout: float) -> "asyncio.Future[list]":
        """Run a statement; the returned asyncio future resolves with its rows (one page)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list] = loop.create_future()
        if self._closed:
            future.set_exception(StoreUnavailable("cassandra reader is closed"))
            return future
        if timeout <= 0:
            future.set_exception(StoreTimeout("no time left for the read"))
            return future
        try:
            response = self.session.execute_async(
                statement, params, timeout=timeout, execution_profile=self._profile
            )
        except Exception as exc:  # session shut down, no connection pool...
            future.set_exception(_translate(exc))
            return future

        def resolve(rows: Any) -> None:
            if not future.done():
                future.set_result(list(rows) if rows is not None else [])

        def fail(exc: BaseException) -> None:
            if not future.done():
                future.set_exception(_translate(exc))

        def hand_over(fn: Any, value: Any) -> None:  # runs on the driver's I/O thread
            try:
                loop.call_soon_threadsafe(fn, value)
            except RuntimeError:  # the loop closed while the query was in flight: nobody awaits it
                pass

        response.add_callbacks(lambda rows: hand_over(resolve, rows), lambda exc: hand_over(fail, exc))
        return future

    # -- TimelineStore ---------------------------------------------------------------------
    async def page(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[EntryRow]:
        if before is None:
            rows = await self._execute(self._page_first, (timeline_id, limit), timeout)
        else:
            rows = await self._execute(self._page_before, (timeline_id, before[0], before[1], limit), timeout)
        return [EntryRow(*r) for r in rows]

    async def newer(self, timeline_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[EntryRow]:
        if after is None:
            rows = await self._execute(self._newer_all, (timeline_id, limit), timeout)
        else:
            rows = await self._execute(self._newer_after, (timeline_id, after[0], after[1], limit), timeout)
        return [EntryRow(*r) for r in rows]

    async def tweet(self, tweet_id: str, *, timeout: float) -> TweetRow | None:
        rows = await self._execute(self._tweet, (tweet_id,), timeout)
        # a deleted tweet is a row tombstone: no row; a row without version was never fully written
        return TweetRow(*rows[0]) if rows and rows[0][3] is not None else None

    async def profile(self, user_id: str, version: int | None, *, timeout: float) -> ProfileRow | None:
        if version is None:
            rows = await self._execute(self._profile_latest, (user_id,), timeout)
        else:
            rows = await self._execute(self._profile_at, (user_id, version), timeout)
        return ProfileRow(*rows[0]) if rows else None

    async def profiles(self, keys: Iterable[ProfileKey], *, timeout: float) -> dict[ProfileKey, ProfileRow]:
        keys = list(keys)
        results = await asyncio.gather(*(self._execute(self._profile_at, key, timeout) for key in keys))
        return {key: ProfileRow(*rows[0]) for key, rows in zip(keys, results) if rows}

    def close(self) -> None:
        self._closed = True
        if self.cluster is not None:
            self.cluster.shutdown()


class MemoryStore:
    """In-memory :class:`TimelineStore` for unit tests: same ordering and cursor semantics.

    ``fail`` set to a :class:`StoreError` makes every call raise it (outage simulation).
    """

    def __init__(self) -> None:
        self.timelines: dict[str, dict[Cursor, EntryRow]] = {}
        self.tweets: dict[str, TweetRow] = {}
        self.profile_rows: dict[ProfileKey, ProfileRow] = {}
        self.fail: StoreError | None = None
        self.calls = 0

    def add_entry(self, timeline_id: str, row: EntryRow) -> None:
        self.timelines.setdefault(timeline_id, {})[row.cursor] = row

    def add_profile(self, row: ProfileRow) -> None:
        self.profile_rows[(row.user_id, row.version)] = row

    def _check(self) -> None:
        self.calls += 1
        if self.fail is not None:
            raise self.fail

    async def page(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[EntryRow]:
        self._check()
        rows = sorted(self.timelines.get(timeline_id, {}).values(), key=lambda r: r.cursor, reverse=True)
        return [r for r in rows if before is None or r.cursor < before][:limit]

    async def newer(self, timeline_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[EntryRow]:
        self._check()
        rows = sorted(self.timelines.get(timeline_id, {}).values(), key=lambda r: r.cursor)
        return [r for r in rows if after is None or r.cursor > after][:limit]

    async def tweet(self, tweet_id: str, *, timeout: float) -> TweetRow | None:
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

    def close(self) -> None:
        self.fail = StoreUnavailable("store closed")
