"""``feed.v1.TimelineService``: validation, authorization, reads through the store port, error mapping.

Every call runs the same steps, in this order, so a call fails with the first applicable code:

1. authenticate the bearer token (UNAUTHENTICATED);
2. validate the arguments (INVALID_ARGUMENT): ids 1..128 characters, ``page_size`` 0 (= 20)..200;
3. authorize: a user token reads only its own timeline (PERMISSION_DENIED);
4. decode the page / resume token, bound to the timeline (INVALID_ARGUMENT);
5. read the store within the call's budget: the gRPC deadline, at most ``request_timeout_s``
   (StoreUnavailable -> UNAVAILABLE; StoreTimeout -> DEADLINE_EXCEEDED once the deadline is spent).

GetHomeTimeline reads ``page_size + 1`` rows in one single-partition slice (the extra row says
whether a next page exists, so the last page never ends in an empty one), then hydrates display
names by ``(author_id, profile_version)`` through the profile cache. Entries carry the text and
version of the timeline row, which the join keeps current (an edit is an ``update`` delta of every
inbox row of the tweet), so a page costs one query, not one per entry (docs/api.md#consistency).

Blocks and mutes need nothing more on the home timeline: the join never writes a hidden pair into
an inbox or into ``pull_follows``, and the pull authors merged in are exactly the user's
``pull_follows`` rows. GetTweet and GetUserTimeline read content outside any timeline, so with a user
token they read one ``blocks`` row too, and answer NOT_FOUND when the author blocks that user, with
the message of a missing tweet or timeline (docs/api.md#blocks-and-mutes).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc as pb_grpc
from feed_service.server import auth
from feed_service.server.metrics import ServerMetrics
from feed_service.errors import AuthError, FeedError, PageTokenError
from feed_service.settings import check_inbox_cap
from feed_service.server.page_token import KIND_AUTHOR_PAGE, KIND_PAGE, KIND_WATCH, PageCursor, PageTokenCodec
from feed_service.server.change_feed import ChangeFeed
from feed_service.server.pull_sources import PullSources
from feed_service.server.read_cache import ReadCache
from feed_service.server.watch_hub import RESYNC, Subscription, WatchHub
from feed_service.core.join import DEFAULT_INBOX_CAP
from feed_service.core.rows import Cursor, Entry, ProfileRow
from feed_service.core.timeline_merge import merge_newest, merge_oldest
from feed_service.core.view_changes import AuthorChange, PullFollowChange, TimelineChange
from feed_service.errors import StoreError, StoreTimeout
from feed_service.server.hydration import ProfileCache, hydrate_profiles
from feed_service.store.ports import TimelineStore

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 200
MAX_ID_LEN = 128
#: Entries per WatchHomeTimeline poll; a longer backlog is sent over the following polls.
WATCH_BATCH = 200
_TOKEN_CACHE_SIZE = 10_000

log = logging.getLogger("feed_service.server")


class RpcFailure(FeedError):
    """Ends a call with ``code`` and ``message`` (raised by the steps, turned into an abort once)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _log_call(method: str, code: str, seconds: float, context: Any, detail: str = "", subject: str = "") -> None:
    fields = {"method": method, "code": code, "ms": round(seconds * 1000, 3), "peer": context.peer()}
    if subject:
        fields["subject"] = subject
    if detail:
        fields["detail"] = detail
    level = logging.WARNING if code in ("UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED") else logging.INFO
    log.log(level, "rpc", extra={"fields": fields})


def _unary(method: str) -> Callable:
    """Wrap a unary handler: metrics, logs, and RpcFailure / store errors -> status codes."""

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        async def handler(self: "TimelineServicer", request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            code, detail = "OK", ""
            in_flight = self.metrics.in_flight_of(method)
            in_flight.inc()
            try:
                return await fn(self, request, context)
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                failure, detail = self._failure_of(exc, method, context)
                code = failure.code.name
                await context.abort(failure.code, failure.message)
            finally:
                in_flight.dec()
                elapsed = time.perf_counter() - started
                self.metrics.observe(method, code, elapsed)
                if code != "OK" or self.access_log:
                    _log_call(method, code, elapsed, context, detail)

        return handler

    return decorate


def _stream(method: str) -> Callable:
    """Like :func:`_unary`, for server-streaming handlers (async generators)."""

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        async def handler(self: "TimelineServicer", request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator:
            started = time.perf_counter()
            code, detail = "OK", ""
            in_flight = self.metrics.in_flight_of(method)
            in_flight.inc()
            try:
                async for message in fn(self, request, context):
                    yield message
            except (asyncio.CancelledError, GeneratorExit):
                code = "CANCELLED"
                raise
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                failure, detail = self._failure_of(exc, method, context)
                code = failure.code.name
                await context.abort(failure.code, failure.message)
            finally:
                in_flight.dec()
                elapsed = time.perf_counter() - started
                self.metrics.observe(method, code, elapsed)
                if code not in ("OK", "CANCELLED") or self.access_log:
                    _log_call(method, code, elapsed, context, detail)

        return handler

    return decorate


def _check_id(value: str, name: str) -> str:
    if not value:
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"{name} is required")
    if len(value) > MAX_ID_LEN:
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"{name} is longer than {MAX_ID_LEN} characters")
    return value


def _page_size(requested: int) -> int:
    page_size = requested or DEFAULT_PAGE_SIZE
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                         f"page_size must be between 1 and {MAX_PAGE_SIZE} (0 = {DEFAULT_PAGE_SIZE}), got {requested}")
    return page_size


def _entry(row: Entry, profile: ProfileRow | None) -> dict[str, Any]:
    """The fields of one ``TimelineEntry``, for a response's constructor (``entries=[...]``): protobuf
    builds the entry in place from them, where a ready message would be built, then copied (about
    twice the cost of a 20-entry page's entries)."""
    return {
        "tweet_id": row.tweet_id, "author_id": row.author_id, "created_at_ms": row.created_at,
        "version": row.version, "text": row.text or "", "profile_version": row.profile_version,
        "author_display_name": (profile.display_name or "") if profile else "",
        "author_avatar_url": (profile.avatar_url or "") if profile else "",
    }


class TimelineServicer(pb_grpc.TimelineServiceServicer):
    """The service. ``store`` returns the connected store, or None while Cassandra is not reachable."""

    def __init__(
        self,
        *,
        store: Callable[[], TimelineStore | None],
        secret: bytes,
        metrics: ServerMetrics,
        request_timeout_s: float = 2.0,
        watch_poll_s: float = 1.0,
        profile_cache_size: int = 100_000,
        access_log: bool = False,
        store_status: Callable[[], str] = lambda: "not connected",
        now: Callable[[], float] = time.time,
        inbox_cap: int = DEFAULT_INBOX_CAP,
        pull_cache_ttl_s: float = 0.0,
    ) -> None:
        self._get_store = store
        #: the view's cap (Settings.inbox_cap, the stream's and backfill's too): paging stops there
        self.inbox_cap = check_inbox_cap(inbox_cap)
        self._store_status = store_status
        self._secret = secret
        self._pages = PageTokenCodec(secret)
        self.metrics = metrics
        self.request_timeout_s = request_timeout_s
        self.watch_poll_s = watch_poll_s
        self.cache = ProfileCache(profile_cache_size)
        self.pull = PullSources(ttl_s=pull_cache_ttl_s, head=MAX_PAGE_SIZE + 1)
        self.access_log = access_log
        self._now = now
        self._verified: dict[str, auth.Claims] = {}
        #: set when the server begins to shut down: open watch streams end cleanly
        self.stopping = asyncio.Event()
        #: the view's change topic, once consumed (:meth:`attach_changes`): pushed watches, exact cache
        self.feed: ChangeFeed | None = None
        self.read_cache: ReadCache | None = None
        self.hub: WatchHub | None = None

    def attach_changes(self, feed: ChangeFeed, read_cache: ReadCache | None, hub: WatchHub) -> None:
        """Serve from the change topic from now on: watches subscribe to ``hub``, reads use ``read_cache``
        (None: no read cache) while ``feed`` is live."""
        self.feed, self.read_cache, self.hub = feed, read_cache, hub

    def stop_watches(self) -> None:
        """End every open watch stream (server shutdown)."""
        self.stopping.set()
        if self.hub is not None:
            self.hub.wake_all()

    def _live_cache(self) -> ReadCache | None:
        cache = self.read_cache
        return cache if cache is not None and cache.usable else None

    async def _pull_authors(self, store: TimelineStore, user_id: str, budget: float, *, exact: bool = False) -> list[str]:
        """The pull authors ``user_id`` merges in: from the exact cache, else the TTL'd pull sources
        (or, ``exact``, the store: what a pushed watch reads must be no older than its subscription)."""
        cache = self._live_cache()
        if cache is not None:
            return await cache.pull_authors(user_id, lambda: store.pull_authors(user_id, timeout=budget))
        if exact:
            return await store.pull_authors(user_id, timeout=budget)
        return await self.pull.authors(store, user_id, timeout=budget)

    # -- steps -----------------------------------------------------------------------------
    def _authenticate(self, context: grpc.aio.ServicerContext) -> auth.Claims:
        try:
            token = auth.bearer_token(context.invocation_metadata())
            claims = self._verified.get(token)
            if claims is None:
                claims = auth.verify(self._secret, token, now=self._now)
                if len(self._verified) >= _TOKEN_CACHE_SIZE:
                    self._verified.clear()
                self._verified[token] = claims
            elif claims.expires_at <= self._now():
                del self._verified[token]
                raise AuthError("token expired")
        except AuthError as exc:
            raise RpcFailure(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
        return claims

    @staticmethod
    def _authorize_timeline(claims: auth.Claims, user_id: str) -> None:
        if not auth.may_read_timeline(claims, user_id):
            raise RpcFailure(grpc.StatusCode.PERMISSION_DENIED,
                             f"a user token for {claims.subject!r} may read only its own timeline")

    def _store(self) -> TimelineStore:
        store = self._get_store()
        if store is None:
            raise RpcFailure(grpc.StatusCode.UNAVAILABLE, f"cassandra unavailable: {self._store_status()}")
        return store

    def _budget(self, context: grpc.aio.ServicerContext) -> float:
        remaining = context.time_remaining()
        if remaining is None:
            return self.request_timeout_s
        if remaining <= 0:
            raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded before the read")
        return min(remaining, self.request_timeout_s)

    def _watch_wait(self, context: grpc.aio.ServicerContext) -> float:
        """Seconds until the next poll of a watch: the poll interval, or less if the deadline is nearer."""
        remaining = context.time_remaining()
        if remaining is None:
            return self.watch_poll_s
        if remaining <= 0:
            raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
        return min(self.watch_poll_s, remaining)

    @staticmethod
    def _failure_of(exc: Exception, method: str, context: grpc.aio.ServicerContext) -> tuple[RpcFailure, str]:
        """The status a handler's exception ends its call with, and the detail to log."""
        if isinstance(exc, RpcFailure):
            return exc, exc.message
        if isinstance(exc, StoreError):
            failure = TimelineServicer._store_failure(exc, context)
            return failure, failure.message
        log.exception("unhandled error", extra={"fields": {"method": method}})
        return RpcFailure(grpc.StatusCode.INTERNAL, "internal error"), repr(exc)

    @staticmethod
    def _store_failure(exc: StoreError, context: grpc.aio.ServicerContext) -> RpcFailure:
        if isinstance(exc, StoreTimeout):
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0.001:
                return RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, f"deadline exceeded: {exc}")
        return RpcFailure(grpc.StatusCode.UNAVAILABLE, str(exc))

    async def _hydrate(self, store: TimelineStore, rows: list[Entry], budget: float) -> list[dict[str, Any]]:
        """``rows`` with their authors' display names, as entry fields for a response (:func:`_entry`)."""
        cache = self.cache
        hits, misses = cache.hits, cache.misses
        profiles = await hydrate_profiles(store, cache, ((r.author_id, r.profile_version) for r in rows),
                                          timeout=budget)
        if cache.hits != hits:
            self.metrics.profile_cache.labels("hit").inc(cache.hits - hits)
        if cache.misses != misses:
            self.metrics.profile_cache.labels("miss").inc(cache.misses - misses)
        return [_entry(r, profiles.get((r.author_id, r.profile_version))) for r in rows]

    @staticmethod
    async def _author_blocks_reader(store: TimelineStore, author_id: str | None, claims: auth.Claims,
                                    timeout: float) -> bool:
        """Whether ``author_id`` blocks the user of a user token, whose reads of the author's tweets
        then answer NOT_FOUND (docs/api.md#blocks-and-mutes): one single-partition read of ``blocks``,
        none for a service token or the author itself."""
        reader = auth.blockable_reader(claims, author_id) if author_id else None
        if author_id is None or reader is None:
            return False
        return await store.blocks(author_id, reader, timeout=timeout)

    # -- RPCs ------------------------------------------------------------------------------
    @_unary("GetHomeTimeline")
    async def GetHomeTimeline(self, request: pb.GetHomeTimelineRequest, context) -> pb.GetHomeTimelineResponse:
        claims = self._authenticate(context)
        user_id = _check_id(request.user_id, "user_id")
        page_size = _page_size(request.page_size)
        self._authorize_timeline(claims, user_id)
        before, served, limit = self._page_start(request.page_token, user_id, KIND_PAGE, page_size)
        if limit <= 0:
            return pb.GetHomeTimelineResponse()
        store = self._store()
        budget = self._budget(context)
        rows = await self._home_page(store, user_id, before, limit + 1, budget)
        entries, next_cursor = await self._page_of(store, rows, limit, served, budget)
        next_token = (self._pages.encode(PageCursor(user_id, next_cursor, served + len(entries), KIND_PAGE))
                      if next_cursor else "")
        return pb.GetHomeTimelineResponse(entries=entries, next_page_token=next_token)

    async def _home_page(self, store: TimelineStore, user_id: str, before: Cursor | None, limit: int,
                         budget: float) -> list[Entry]:
        """The inbox slice merged with the pull authors the user follows (docs/fan-out.md); from the
        read cache where it holds them (docs/api.md#read-cache)."""
        authors = await self._pull_authors(store, user_id, budget)
        cache = self._live_cache()
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

    def _page_start(self, token: str, timeline_id: str, kind: int, page_size: int) -> tuple[Cursor | None, int, int]:
        """(cursor, entries served so far, rows to serve now) of a paged call; the cap bounds the last."""
        before, served = None, 0
        if token:
            try:
                cursor = self._pages.decode(token, timeline_id=timeline_id, kind=kind)
            except PageTokenError as exc:
                raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
            before, served = cursor.position, cursor.served
        return before, served, min(page_size, self.inbox_cap - served)

    async def _page_of(self, store: TimelineStore, rows: list[Entry], limit: int, served: int,
                       budget: float) -> tuple[list[dict[str, Any]], Cursor | None]:
        """Hydrated entries of a page read with one row beyond ``limit``, and the next page's cursor
        (None at the end or at the inbox cap)."""
        more = len(rows) > limit
        rows = rows[:limit]
        entries = await self._hydrate(store, rows, budget) if rows else []
        more = more and served + len(rows) < self.inbox_cap
        return entries, rows[-1].cursor if more else None

    def _author_page(self, store: TimelineStore, author_id: str, before: Cursor | None, limit: int,
                     budget: float) -> Awaitable[list[Entry]]:
        """An author's own timeline, newest first: from the read cache or the TTL'd pull sources."""
        cache = self._live_cache()
        if cache is not None:
            return cache.rows("author", author_id, limit, before,
                              lambda n: store.author_page(author_id, before=before, limit=n, timeout=budget))
        return self.pull.page(store, author_id, before=before, limit=limit, timeout=budget)

    async def _home_newer(self, store: TimelineStore, user_id: str, after: Cursor | None, budget: float) -> list[Entry]:
        """Entries of the home timeline newer than ``after``, oldest first: the inbox and the pull
        authors the user follows now."""
        pushed = self.feed is not None and self.feed.live
        authors = await self._pull_authors(store, user_id, budget, exact=pushed)
        # A pushed watch catches up from the store itself: the TTL'd heads may predate its subscription.
        newer = store.author_newer if pushed else functools.partial(self.pull.newer, store)
        sources = await asyncio.gather(
            store.newer(user_id, after=after, limit=WATCH_BATCH, timeout=budget),
            *(newer(a, after=after, limit=WATCH_BATCH, timeout=budget) for a in authors))
        return merge_oldest(sources, WATCH_BATCH)

    @_unary("GetTweet")
    async def GetTweet(self, request: pb.GetTweetRequest, context) -> pb.Tweet:
        claims = self._authenticate(context)
        tweet_id = _check_id(request.tweet_id, "tweet_id")
        store = self._store()
        budget = self._budget(context)
        row = await store.tweet(tweet_id, timeout=budget)
        # the author is known only once the tweet is read, so its block check follows that read
        if row is None or await self._author_blocks_reader(store, row.author_id, claims, budget):
            raise RpcFailure(grpc.StatusCode.NOT_FOUND, f"tweet {tweet_id!r} not found")  # a block looks the same
        return pb.Tweet(tweet_id=row.tweet_id, author_id=row.author_id or "", created_at_ms=row.created_at or 0,
                        version=row.version, text=row.text or "", profile_version=row.profile_version or 0)

    @_unary("GetProfile")
    async def GetProfile(self, request: pb.GetProfileRequest, context) -> pb.Profile:
        self._authenticate(context)
        user_id = _check_id(request.user_id, "user_id")
        version = request.version if request.HasField("version") else None
        if version is not None and version < 0:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"version must be >= 0, got {version}")
        store = self._store()
        budget = self._budget(context)
        if version is None:
            row = await store.profile(user_id, None, timeout=budget)
        else:
            row = (await hydrate_profiles(store, self.cache, [(user_id, version)], timeout=budget)).get(
                (user_id, version))
        if row is None:
            which = "any version" if version is None else f"version {version}"
            raise RpcFailure(grpc.StatusCode.NOT_FOUND, f"profile {user_id!r} at {which} not found")
        return pb.Profile(user_id=row.user_id, version=row.version, display_name=row.display_name or "",
                          avatar_url=row.avatar_url or "", bio=row.bio or "")

    @_unary("GetUserTimeline")
    async def GetUserTimeline(self, request: pb.GetUserTimelineRequest, context) -> pb.GetUserTimelineResponse:
        # an author's own tweets are public: any valid token reads them, unless the author blocks its user
        claims = self._authenticate(context)
        author_id = _check_id(request.user_id, "user_id")
        page_size = _page_size(request.page_size)
        before, served, limit = self._page_start(request.page_token, author_id, KIND_AUTHOR_PAGE, page_size)
        if limit <= 0:
            return pb.GetUserTimelineResponse()
        store = self._store()
        budget = self._budget(context)
        page = self._author_page(store, author_id, before, limit + 1, budget)
        if auth.blockable_reader(claims, author_id) is None:  # a service, or the author itself: no block read
            rows = await page
        else:  # the block check runs beside the page read
            rows, blocked = await asyncio.gather(page, self._author_blocks_reader(store, author_id, claims, budget))
            if blocked:
                raise RpcFailure(grpc.StatusCode.NOT_FOUND, f"user timeline {author_id!r} not found")
        entries, next_cursor = await self._page_of(store, rows, limit, served, budget)
        next_token = (self._pages.encode(PageCursor(author_id, next_cursor, served + len(entries), KIND_AUTHOR_PAGE))
                      if next_cursor else "")
        return pb.GetUserTimelineResponse(entries=entries, next_page_token=next_token)

    @_stream("WatchHomeTimeline")
    async def WatchHomeTimeline(self, request: pb.WatchHomeTimelineRequest, context):
        claims = self._authenticate(context)
        user_id = _check_id(request.user_id, "user_id")
        self._authorize_timeline(claims, user_id)
        store = self._store()
        position: Cursor | None = None
        if request.resume_token:
            try:
                position = self._pages.decode(request.resume_token, timeline_id=user_id, kind=KIND_WATCH).position
            except PageTokenError as exc:
                raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(exc).replace("page token", "resume token"))
        hub = self.hub if self.feed is not None and self.feed.live else None
        # subscribe before reading anything: a change published meanwhile waits in the subscription
        sub = hub.subscribe(user_id) if hub is not None else None
        self.metrics.watch_streams.inc()
        try:
            if not request.resume_token:  # start at the current head: only entries materialized from now on
                head = await self._home_page(store, user_id, None, 1, self._budget(context))
                position = head[0].cursor if head else None
            if sub is None:
                async for message in self._watch_polling(store, user_id, position, context):
                    yield message
                return
            async for message in self._watch_pushed(sub, store, user_id, position, bool(request.resume_token),
                                                    context):
                yield message
        finally:
            if sub is not None:
                hub.unsubscribe(sub)
            self.metrics.watch_streams.dec()

    async def _watch_polling(self, store: TimelineStore, user_id: str, position: Cursor | None, context):
        """Without the change topic: read entries newer than ``position`` every ``watch_poll_s``."""
        while not self.stopping.is_set():
            try:
                await asyncio.wait_for(self.stopping.wait(), self._watch_wait(context))
                break  # server shutting down: end the stream cleanly (OK)
            except asyncio.TimeoutError:
                pass
            store = self._store()
            budget = self._budget(context)  # every read within the call's deadline
            rows = await self._home_newer(store, user_id, position, budget)
            if rows:
                position = rows[-1].cursor
                yield await self._watch_message(store, user_id, position, rows, budget)

    async def _watch_message(self, store: TimelineStore, user_id: str, position: Cursor | None,
                             new: list[Entry], budget: float, changed: list[Entry] = (),
                             removed: list[str] = ()) -> pb.WatchHomeTimelineResponse:
        hydrated = await self._hydrate(store, [*new, *changed], budget) if new or changed else []
        token = self._pages.encode(PageCursor(user_id, position, 0, KIND_WATCH)) if position is not None else ""
        self.metrics.watch_messages.inc()
        return pb.WatchHomeTimelineResponse(entries=hydrated[:len(new)], changed=hydrated[len(new):],
                                            removed_tweet_ids=removed, resume_token=token)

    async def _watch_catch_up(self, store: TimelineStore, user_id: str, position: Cursor | None, context,
                              state: "_WatchState"):
        """Entries newer than ``position`` from Cassandra, in WATCH_BATCH chunks (after a resume or a gap)."""
        while True:
            budget = self._budget(context)
            rows = await self._home_newer(self._store(), user_id, state.position, budget)
            if not rows:
                return
            state.position = rows[-1].cursor
            for r in rows:
                state.read[r.tweet_id] = r.version
            yield await self._watch_message(store, user_id, state.position, rows, budget)
            if len(rows) < WATCH_BATCH:
                return

    async def _watch_pushed(self, sub: Subscription, store: TimelineStore, user_id: str, position: Cursor | None,
                            resumed: bool, context):
        """With the change topic: catch up from Cassandra if resuming, then send what the subscription
        receives, reading nothing while nothing changes (docs/api.md#watch)."""
        state = _WatchState(position)
        self.hub.start(sub, await self._pull_authors(store, user_id, self._budget(context), exact=True))
        if resumed:
            async for message in self._watch_catch_up(store, user_id, position, context, state):
                yield message
        while not self.stopping.is_set():
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0:
                raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
            try:
                await asyncio.wait_for(sub.ready.wait(), remaining)
            except asyncio.TimeoutError:
                continue
            if self.stopping.is_set():
                break
            items = sub.drain()
            if any(item is RESYNC for item in items):
                async for message in self._watch_catch_up(store, user_id, state.position, context, state):
                    yield message
                continue
            if items:
                message = await self._watch_changes(store, user_id, items, state, self._budget(context))
                if message is not None:
                    yield message

    async def _watch_changes(self, store: TimelineStore, user_id: str, items: list, state: "_WatchState",
                             budget: float) -> pb.WatchHomeTimelineResponse | None:
        """One message of the changes ``items``: new entries above the position, others changed or removed."""
        upserts: dict[str, Entry] = {}
        removed: dict[str, None] = {}
        for change in items:
            if isinstance(change, PullFollowChange):  # the user starts or stops merging an author in
                op = "insert" if change.op == "insert" else "delete"
                for entry in await self._author_page(self._store(), change.author_id, None, self.inbox_cap, budget):
                    _note(upserts, removed, op, entry)
                continue
            if not state.fresh(change):
                continue
            entry = change.entry
            if change.op != "delete" and state.read.get(entry.tweet_id) == entry.version:
                continue  # already sent by the catch-up read
            _note(upserts, removed, change.op, entry)
        if not upserts and not removed:
            return None
        position = state.position
        new = sorted((e for e in upserts.values() if position is None or e.cursor > position), key=lambda e: e.cursor)
        changed = [e for e in upserts.values() if not (position is None or e.cursor > position)]
        if new:
            state.position = new[-1].cursor
        return await self._watch_message(self._store(), user_id, state.position, new, budget, changed, list(removed))


class _WatchState:
    """What one pushed watch has sent: its position, the row write timestamps seen (duplicates of an
    at-least-once topic are dropped) and the versions its catch-up reads sent."""

    __slots__ = ("position", "seen", "read")

    #: Rows whose last write timestamp a watch remembers (the oldest are forgotten first).
    SEEN_LIMIT = 10_000

    def __init__(self, position: Cursor | None) -> None:
        self.position = position
        self.seen: dict[str, int] = {}
        self.read: dict[str, int] = {}

    def fresh(self, change: TimelineChange | AuthorChange) -> bool:
        """False for a change at or below a write timestamp already applied to its row (a replay)."""
        key = change.entry.tweet_id
        last = self.seen.get(key)
        if last is not None and change.ts <= last:
            return False
        self.seen[key] = change.ts
        if len(self.seen) > self.SEEN_LIMIT:
            del self.seen[next(iter(self.seen))]
        return True


def _note(upserts: dict[str, Entry], removed: dict[str, None], op: str, entry: Entry) -> None:
    if op == "delete":
        upserts.pop(entry.tweet_id, None)
        removed[entry.tweet_id] = None
    else:
        removed.pop(entry.tweet_id, None)
        upserts[entry.tweet_id] = entry
