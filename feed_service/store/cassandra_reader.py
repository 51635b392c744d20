"""Read side of the view on Cassandra, for asyncio: :class:`CassandraReader` implements
:class:`~feed_service.store.ports.TimelineStore`.

Every query is one prepared, single-partition statement, run with the driver's ``execute_async``
and awaited through a future bridge, so the event loop never blocks on Cassandra. The driver calls
back on its own I/O thread; the bridge (:class:`_Completions`) queues those results and hands them
to the loop in bursts: one ``call_soon_threadsafe`` (one wake-up of the loop) for every completion
that arrives before the loop gets to them, instead of one per query.

Queries (``home_timeline`` clusters by ``(created_at DESC, tweet_id DESC)``, ``home_extras`` and
``user_reposts`` by ``(at DESC, tweet_id DESC)``):

=================  ==================================================================================
``page``           ``WHERE timeline_id = ? [AND (created_at, tweet_id) < (?, ?)] LIMIT ?``: newest first
``newer``          ``WHERE timeline_id = ? [AND (created_at, tweet_id) > (?, ?)] ORDER BY ... ASC LIMIT ?``
``author_*``       the same two slices of ``author_timeline`` by ``author_id``
``inbox``          ``page`` with the static ``pull_authors``, ``pull_reposters`` and ``inbox_dropped``:
                   one read for all
                   (and a list's reader's ``list_owner``, ``list_policy``)
``statics``        those five static columns alone (``LIMIT 1``)
``visible_users``  ``reader_visible WHERE reader_id = ?``: the whole partition, unpaged
``pull_authors``   ``home_timeline``'s static ``pull_authors`` alone (``LIMIT 1``)
``pull_reposters`` ``home_timeline``'s static ``pull_reposters`` alone (``LIMIT 1``)
``extras_*``       ``page`` and ``newer`` of ``home_extras`` by ``timeline_id``, on ``(at, tweet_id)``
``user_reposts_*`` ``page`` and ``newer`` of ``user_reposts`` by ``user_id``, on ``(at, tweet_id)``
``visible_among``  ``reader_visible WHERE reader_id = ? AND user_id IN ?`` (in chunks of 100 ids)
``hidden_among``   ``reader_hidden``, the same way
``excluded_among`` ``reader_excluded``, the same way
``lists_of``       ``lists WHERE owner_id = ?``: the whole partition, unpaged
``reposts_of``     ``reposts_by_tweet WHERE tweet_id = ? AND reposter_id IN ?``, one read per tweet
                   (concurrently), rows naming another author dropped
``pushed_reposts`` ``home_extras_reposts WHERE reader_id = ? AND tweet_id IN ?`` (chunks of 100 ids)
``tweet``          ``tweets WHERE tweet_id = ?``
``profile``        ``profiles WHERE user_id = ? AND version = ?`` (or ``LIMIT 1``: the latest)
``blocks``         ``blocks WHERE blocker_id = ? AND blocked_id = ?``: one row or none
=================  ==================================================================================

Driver exceptions are translated once, here (:func:`translate_driver_error`); anything else is a
bug and propagates unchanged.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Sequence, TypeVar

from feed_service.core.per_reader.pull_reposts import Repost, TweetKey
from feed_service.core.rows import Cursor, Entry, ProfileKey, ProfileRow
from feed_service.errors import StoreError, StoreTimeout, StoreUnavailable
from feed_service.security.roles import SERVER
from feed_service.store.permission import permission_denied
from feed_service.store.ports import InboxSlice, ListRow

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

    from feed_service.settings import Settings


def translate_driver_error(exc: BaseException) -> BaseException:
    """The store error for a driver or connection failure; any other exception is returned as it is.

    Only what says the store cannot serve now becomes :class:`StoreUnavailable` (retryable) or
    :class:`StoreTimeout`; a ``TypeError`` or any other bug stays itself, so the service reports it as
    INTERNAL with its traceback instead of telling clients to retry.
    """
    from cassandra import DriverException, OperationTimedOut, ReadTimeout, RequestExecutionException, Unauthorized
    from cassandra.cluster import NoHostAvailable

    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, Unauthorized):
        return permission_denied(exc)
    if isinstance(exc, (OperationTimedOut, ReadTimeout, asyncio.TimeoutError, TimeoutError)):
        return StoreTimeout(f"cassandra read timed out: {exc}")
    if isinstance(exc, (NoHostAvailable, RequestExecutionException, DriverException, OSError)):
        return StoreUnavailable(f"cassandra unavailable: {type(exc).__name__}: {exc}")
    if isinstance(exc, RuntimeError) and "shutdown" in str(exc).lower():  # session/cluster shut down
        return StoreUnavailable(f"cassandra session closed: {exc}")
    return exc


_ENTRY_COLUMNS = ("tweet_id, author_id, created_at, version, text, profile_version, in_reply_to_tweet_id,"
                  " in_reply_to_author_id")
_new = tuple.__new__  # rows come back as plain tuples in Entry's field order
_NO_REPOST = (None, None, None)
"""Entry's repost fields: these tables hold no repost entries (docs/reposts-and-replies.md)."""


def _new_entry(cls: type, row: tuple) -> Entry:
    """An entry of a row of :data:`_ENTRY_COLUMNS`; '' (no reply, schemas/cql/feed.cql) and a row
    written before the reply columns existed (null) both read as no reply."""
    return _new(cls, (*row[:6], row[6] or None, row[7] or None, *_NO_REPOST))


_REPOST_COLUMNS = f"{_ENTRY_COLUMNS}, reposted_by, reposted_at, reposter_profile_version"
"""The columns of the per-reader tables (``home_extras``, ``user_reposts``): every field of an entry."""


def _new_repost_entry(cls: type, row: tuple) -> Entry:
    """An entry of a row of :data:`_REPOST_COLUMNS`: '' is no reply and no reposter, and the repost
    time and profile version of an entry without a reposter are the table's 0, not the entry's."""
    if row[8]:
        return _new(cls, (*row[:6], row[6] or None, row[7] or None, *row[8:11]))
    return _new(cls, (*row[:6], row[6] or None, row[7] or None, *_NO_REPOST))


#: Ids per ``IN`` list of a read of ``reader_visible``: a long list is read in several concurrent
#: reads of the same partition (a coordinator holds a whole IN list's rows at once).
VISIBLE_CHUNK = 100


class _Slices:
    """The four prepared slices of one timeline-shaped table (clustered by ``position``, tweet_id DESC)."""

    def __init__(self, session: "Session", table: str, key: str, *, position: str = "created_at",
                 columns: str = _ENTRY_COLUMNS) -> None:
        p = session.prepare
        select = f"SELECT {columns} FROM {table} WHERE {key} = ?"
        asc = f"ORDER BY {position} ASC, tweet_id ASC"
        self.first = p(f"{select} LIMIT ?")
        self.before = p(f"{select} AND ({position}, tweet_id) < (?, ?) LIMIT ?")
        self.oldest = p(f"{select} {asc} LIMIT ?")
        self.after = p(f"{select} AND ({position}, tweet_id) > (?, ?) {asc} LIMIT ?")


class _Completions:
    """Results of driver callbacks on their way to one event loop.

    The driver runs callbacks on its I/O thread (or on the calling thread when the result came
    first); asyncio futures may be resolved only on their loop. :meth:`post` queues a result under
    a lock and, for the first result of a burst only, schedules :meth:`_drain` on the loop; results
    posted before the drain runs go with it. So a busy loop is woken once per burst, not once per
    query (each wake-up is a write to the loop's self-pipe, a read and a callback handle). A closed
    loop drops what is posted: nobody awaits it any more, and the driver's thread must not fail.
    """

    __slots__ = ("loop", "_lock", "_pending")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Future, Any, bool]] = []

    def post(self, future: asyncio.Future, value: Any, ok: bool) -> None:
        with self._lock:
            pending = self._pending
            pending.append((future, value, ok))
            if len(pending) > 1:
                return  # a drain is scheduled and has not run yet: it takes this one too
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed
            with self._lock:
                self._pending = []

    def rows(self, rows: Any, future: asyncio.Future) -> None:
        """Driver callback: one page of rows (a list with ``tuple_factory``, passed on uncopied)."""
        self.post(future, rows if type(rows) is list else ([] if rows is None else list(rows)), True)

    def error(self, exc: BaseException, future: asyncio.Future) -> None:
        """Driver errback."""
        self.post(future, exc, False)

    def _drain(self) -> None:  # on the loop
        with self._lock:
            batch, self._pending = self._pending, []
        for future, value, ok in batch:
            if future.done():  # cancelled: the caller gave up (deadline, client gone)
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(translate_driver_error(value))


class CassandraReader:
    """:class:`TimelineStore` on a cassandra-driver session (prepared statements, async execution).

    Construct with :meth:`connect` (owns its cluster) or around an existing session (the caller
    keeps ownership). Statements are prepared in the constructor, which therefore blocks: build it
    off the event loop (``asyncio.to_thread``).
    """

    def __init__(self, session: "Session", keyspace: str, *, cluster: "Cluster | None" = None) -> None:
        from feed_service.store.session import read_profile_of
        from cassandra.query import tuple_factory

        self.session = session
        self.cluster = cluster
        # the session's default profile with plain tuples: rows are read by position (cheapest factory)
        self._profile = session.execution_profile_clone_update(read_profile_of(session), row_factory=tuple_factory)
        ks = keyspace
        p = session.prepare
        self._inbox = _Slices(session, f"{ks}.home_timeline", "timeline_id")
        self._authors = _Slices(session, f"{ks}.author_timeline", "author_id")
        self._extras = _Slices(session, f"{ks}.home_extras", "timeline_id", position="at", columns=_REPOST_COLUMNS)
        self._reposts = _Slices(session, f"{ks}.user_reposts", "user_id", position="at", columns=_REPOST_COLUMNS)
        self._visible = p(f"SELECT user_id FROM {ks}.reader_visible WHERE reader_id = ? AND user_id IN ?")
        self._hidden = p(f"SELECT user_id FROM {ks}.reader_hidden WHERE reader_id = ? AND user_id IN ?")
        self._excluded = p(f"SELECT user_id FROM {ks}.reader_excluded WHERE reader_id = ? AND user_id IN ?")
        # an owner's lists in one response (no paging): bounded by the lists one user makes
        self._lists = p(f"SELECT list_id, name, replies_policy, exclusive FROM {ks}.lists WHERE owner_id = ?")
        self._lists.fetch_size = None
        self._reposts_of = p(f"SELECT reposter_id, author_id, reposted_at FROM {ks}.reposts_by_tweet"
                             " WHERE tweet_id = ? AND reposter_id IN ?")
        self._pushed = p(f"SELECT tweet_id, author_id, reposted_at, reposted_by FROM {ks}.home_extras_reposts"
                         " WHERE reader_id = ? AND tweet_id IN ?")
        # the inbox with the partition's static sets, so a page needs no read of pull_follows
        statics = "pull_authors, pull_reposters, inbox_dropped, list_owner, list_policy"
        with_pull = f"SELECT {_ENTRY_COLUMNS}, {statics} FROM {ks}.home_timeline WHERE timeline_id = ?"
        self._inbox_first = p(f"{with_pull} LIMIT ?")
        self._inbox_before = p(f"{with_pull} AND (created_at, tweet_id) < (?, ?) LIMIT ?")
        self._statics = p(f"SELECT {statics} FROM {ks}.home_timeline WHERE timeline_id = ? LIMIT 1")
        # a reader's whole visible set in one response (no paging): bounded by the users it follows
        self._visible_all = p(f"SELECT user_id FROM {ks}.reader_visible WHERE reader_id = ?")
        self._visible_all.fetch_size = None
        self._pull_authors = p(f"SELECT pull_authors FROM {ks}.home_timeline WHERE timeline_id = ? LIMIT 1")
        self._pull_reposters = p(f"SELECT pull_reposters FROM {ks}.home_timeline WHERE timeline_id = ? LIMIT 1")
        self._tweet = p(f"SELECT {_ENTRY_COLUMNS} FROM {ks}.tweets WHERE tweet_id = ?")
        profile_columns = "user_id, version, display_name, avatar_url, bio"
        self._profile_at = p(f"SELECT {profile_columns} FROM {ks}.profiles WHERE user_id = ? AND version = ?")
        self._profile_latest = p(f"SELECT {profile_columns} FROM {ks}.profiles WHERE user_id = ? LIMIT 1")
        self._block = p(f"SELECT blocked_id FROM {ks}.blocks WHERE blocker_id = ? AND blocked_id = ?")
        self._closed = False
        self._completions: _Completions | None = None  # of the loop that calls (one per server process)

    @classmethod
    def connect(cls, settings: "Settings") -> "CassandraReader":
        """Connect to ``settings``' cluster and prepare the statements (blocking); logs in as the read
        service's role unless ``settings`` names one."""
        settings = settings.as_role(SERVER)
        return connected(settings, lambda session, cluster: cls(session, settings.keyspace, cluster=cluster))

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
            future.set_exception(translate_driver_error(exc))
            return future
        completions = self._completions
        if completions is None or completions.loop is not loop:
            completions = self._completions = _Completions(loop)
        response.add_callbacks(completions.rows, completions.error, callback_args=(future,), errback_args=(future,))
        return future

    # -- TimelineStore ---------------------------------------------------------------------
    async def _older(self, slices: "_Slices", key: str, before: Cursor | None, limit: int, timeout: float,
                     new: Callable[[type, tuple], Entry] = _new_entry) -> list[Entry]:
        if before is None:
            rows = await self._execute(slices.first, (key, limit), timeout)
        else:
            rows = await self._execute(slices.before, (key, before[0], before[1], limit), timeout)
        return [new(Entry, r) for r in rows]

    async def _newer(self, slices: "_Slices", key: str, after: Cursor | None, limit: int, timeout: float,
                     new: Callable[[type, tuple], Entry] = _new_entry) -> list[Entry]:
        if after is None:
            rows = await self._execute(slices.oldest, (key, limit), timeout)
        else:
            rows = await self._execute(slices.after, (key, after[0], after[1], limit), timeout)
        return [new(Entry, r) for r in rows]

    async def page(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        return await self._older(self._inbox, timeline_id, before, limit, timeout)

    async def inbox(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> InboxSlice:
        if before is None:
            rows = await self._execute(self._inbox_first, (timeline_id, limit), timeout)
        else:
            rows = await self._execute(self._inbox_before, (timeline_id, before[0], before[1], limit), timeout)
        if not rows:  # no partition at all (first slice), or nothing below the cursor
            return InboxSlice([], [], [], False) if before is None else InboxSlice([], None, None, None)
        # every row carries the static columns; a partition holding only them reads as one keyless row
        pull, reposters, dropped, owner, policy = rows[0][8:]
        return InboxSlice([_new_entry(Entry, r) for r in rows if r[0] is not None], sorted(pull) if pull else [],
                          sorted(reposters) if reposters else [], bool(dropped), owner, policy)

    async def statics(self, timeline_id: str, *, timeout: float) -> InboxSlice:
        rows = await self._execute(self._statics, (timeline_id,), timeout)
        if not rows:
            return InboxSlice([], [], [], False)
        pull, reposters, dropped, owner, policy = rows[0]
        return InboxSlice([], sorted(pull) if pull else [], sorted(reposters) if reposters else [], bool(dropped),
                          owner, policy)

    async def visible_users(self, reader_id: str, *, timeout: float) -> list[str]:
        return sorted(r[0] for r in await self._execute(self._visible_all, (reader_id,), timeout))

    async def newer(self, timeline_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        return await self._newer(self._inbox, timeline_id, after, limit, timeout)

    async def author_page(self, author_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        return await self._older(self._authors, author_id, before, limit, timeout)

    async def author_newer(self, author_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        return await self._newer(self._authors, author_id, after, limit, timeout)

    async def pull_authors(self, user_id: str, *, timeout: float) -> list[str]:
        rows = await self._execute(self._pull_authors, (user_id,), timeout)
        return sorted(rows[0][0]) if rows and rows[0][0] else []

    async def pull_reposters(self, user_id: str, *, timeout: float) -> list[str]:
        rows = await self._execute(self._pull_reposters, (user_id,), timeout)
        return sorted(rows[0][0]) if rows and rows[0][0] else []

    async def extras_page(self, timeline_id: str, *, before: Cursor | None, limit: int,
                          timeout: float) -> list[Entry]:
        return await self._older(self._extras, timeline_id, before, limit, timeout, _new_repost_entry)

    async def extras_newer(self, timeline_id: str, *, after: Cursor | None, limit: int,
                           timeout: float) -> list[Entry]:
        return await self._newer(self._extras, timeline_id, after, limit, timeout, _new_repost_entry)

    async def user_reposts_page(self, user_id: str, *, before: Cursor | None, limit: int,
                                timeout: float) -> list[Entry]:
        return await self._older(self._reposts, user_id, before, limit, timeout, _new_repost_entry)

    async def user_reposts_newer(self, user_id: str, *, after: Cursor | None, limit: int,
                                 timeout: float) -> list[Entry]:
        return await self._newer(self._reposts, user_id, after, limit, timeout, _new_repost_entry)

    async def _among(self, statement: Any, key: str, ids: Collection[str], timeout: float) -> list[tuple]:
        """The rows of ``statement`` (``WHERE <partition> = key AND <clustering> IN ?``) for ``ids``: one
        read of the partition, or several concurrent ones of :data:`VISIBLE_CHUNK` ids each."""
        wanted = sorted(set(ids))
        if not wanted:
            return []
        if len(wanted) <= VISIBLE_CHUNK:
            return await self._execute(statement, (key, wanted), timeout)
        chunks = [wanted[i:i + VISIBLE_CHUNK] for i in range(0, len(wanted), VISIBLE_CHUNK)]
        results = await asyncio.gather(*(self._execute(statement, (key, c), timeout) for c in chunks))
        return [r for rows in results for r in rows]

    async def visible_among(self, reader_id: str, user_ids: Collection[str], *, timeout: float) -> set[str]:
        return {r[0] for r in await self._among(self._visible, reader_id, user_ids, timeout)}

    async def hidden_among(self, reader_id: str, user_ids: Collection[str], *, timeout: float) -> set[str]:
        return {r[0] for r in await self._among(self._hidden, reader_id, user_ids, timeout)}

    async def excluded_among(self, reader_id: str, user_ids: Collection[str], *, timeout: float) -> set[str]:
        return {r[0] for r in await self._among(self._excluded, reader_id, user_ids, timeout)}

    async def lists_of(self, owner_id: str, *, timeout: float) -> list[ListRow]:
        rows = await self._execute(self._lists, (owner_id,), timeout)
        return sorted(ListRow(list_id, name or "", policy or "", bool(exclusive))
                      for list_id, name, policy, exclusive in rows)

    async def reposts_of(self, tweets: Collection[TweetKey], reposters: Collection[str], *,
                         timeout: float) -> dict[TweetKey, list[Repost]]:
        authors: dict[str, set[str]] = {}  # tweet id -> the authors asked for (a tweet id names one tweet)
        for author, tweet_id in tweets:
            authors.setdefault(tweet_id, set()).add(author)
        if not authors or not reposters:
            return {}
        ids = sorted(authors)
        results = await asyncio.gather(*(self._among(self._reposts_of, t, reposters, timeout) for t in ids))
        out: dict[TweetKey, list[Repost]] = {}
        for tweet_id, rows in zip(ids, results):
            for reposter, author, at in rows:
                if author in authors[tweet_id]:
                    out.setdefault((author, tweet_id), []).append((at, reposter))
        return {k: sorted(v) for k, v in out.items()}

    async def pushed_reposts(self, reader_id: str, tweets: Collection[TweetKey], *,
                             timeout: float) -> dict[TweetKey, Repost]:
        wanted = set(tweets)
        rows = await self._among(self._pushed, reader_id, {tweet_id for _, tweet_id in wanted}, timeout)
        return {(author, tweet_id): (at, by) for tweet_id, author, at, by in rows if (author, tweet_id) in wanted}

    async def tweet(self, tweet_id: str, *, timeout: float) -> Entry | None:
        rows = await self._execute(self._tweet, (tweet_id,), timeout)
        # a deleted tweet is a row tombstone: no row; a row without version was never fully written
        return _new_entry(Entry, rows[0]) if rows and rows[0][3] is not None else None

    async def profile(self, user_id: str, version: int | None, *, timeout: float) -> ProfileRow | None:
        if version is None:
            rows = await self._execute(self._profile_latest, (user_id,), timeout)
        else:
            rows = await self._execute(self._profile_at, (user_id, version), timeout)
        return ProfileRow(*rows[0]) if rows else None

    async def profiles(self, keys: Iterable[ProfileKey], *, timeout: float) -> dict[ProfileKey, ProfileRow]:
        keys = list(keys)
        if len(keys) == 1:  # the common miss: no gather
            rows = await self._execute(self._profile_at, keys[0], timeout)
            return {keys[0]: ProfileRow(*rows[0])} if rows else {}
        results = await asyncio.gather(*[self._execute(self._profile_at, key, timeout) for key in keys])
        return {key: ProfileRow(*rows[0]) for key, rows in zip(keys, results) if rows}

    async def blocks(self, blocker_id: str, blocked_id: str, *, timeout: float) -> bool:
        """Whether ``blocker_id`` blocks ``blocked_id`` now (a row of ``blocks``, written by the join for
        each block in force). For the read service's GetTweet and GetUserTimeline with a user token
        (docs/api.md#blocks-and-mutes)."""
        return bool(await self._execute(self._block, (blocker_id, blocked_id), timeout))

    def close(self) -> None:
        self._closed = True
        if self.cluster is not None:
            self.cluster.shutdown()


_Store = TypeVar("_Store")


def connected(settings: "Settings", build: Callable[[Any, Any], _Store]) -> _Store:
    """``build(session, cluster)`` on a new connection to ``settings``' cluster (blocking): how every
    store object connects. Driver errors become store errors; a failed build shuts the cluster down."""
    from feed_service.store.session import connect

    try:
        cluster, session = connect(settings)
    except Exception as exc:
        raise translate_driver_error(exc) from exc
    try:
        return build(session, cluster)
    except Exception as exc:
        cluster.shutdown()
        raise translate_driver_error(exc) from exc
