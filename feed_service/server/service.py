"""``feed.v1.TimelineService``: the servicer, whose RPCs wire the server's parts together.

Every call runs the same steps, in this order, so a call fails with the first applicable code:

1. authenticate the bearer token (UNAUTHENTICATED), then admit the call under the caller's rate
   limit (RESOURCE_EXHAUSTED, with a RetryInfo; docs/api.md#limits);
2. validate the arguments (INVALID_ARGUMENT): a request that decodes, ids 1..128 characters,
   ``page_size`` 0 (= 20)..200;
3. authorize: a user token reads only its own timeline (PERMISSION_DENIED); a home read or watch
   so admitted is the reader's activity, reported to the stream's driver (:mod:`.activity`: a set
   lookup, and a record at most once per reader and interval; docs/activity.md#read-activity);
4. decode the page / resume token, bound to the timeline (INVALID_ARGUMENT);
5. read the store within the call's budget: the gRPC deadline, at most ``request_timeout_s``
   (StoreUnavailable -> UNAVAILABLE; StoreTimeout -> DEADLINE_EXCEEDED once the deadline is spent).

The parts: :mod:`.calls` (the decorator every RPC wears: metrics, access log, authentication,
budget, error mapping), :mod:`.timeline_reads` (inbox, extras and pull authors merged at read),
:mod:`.paging` (page sizes, starts, next-page tokens), :mod:`.hydration` (display names, a
reposter's too) and :mod:`.watch` (WatchHomeTimeline).

GetHomeTimeline reads ``page_size + 1`` rows from each source, the inbox and the reader's
``home_extras`` in two concurrent single-partition slices (the extra row says whether a next page
exists, so the last page never ends in an empty one), then hydrates display names by
``(author_id, profile_version)`` (and a repost entry's reposter's) through the profile cache. With the read cache, a page
whose sources are all cached is merged without a task per source, and its encoded response is kept
with the cached head until a source changes: a repeated read returns those bytes as they are
(docs/api.md#read-cache). Entries carry the text and
version of the timeline row, which the join keeps current (an edit is an ``update`` delta of every
inbox row of the tweet), so a page costs no query per entry (docs/api.md#consistency).

Blocks and mutes need nothing more on the home timeline: the join never writes a hidden pair into
an inbox or into ``pull_follows``, and the pull authors merged in are exactly the user's
``pull_follows`` rows. GetTweet and GetUserTimeline read content outside any timeline, so with a user
token they read one ``blocks`` row too, and answer NOT_FOUND when the author blocks that user, with
the message of a missing tweet or timeline (docs/api.md#blocks-and-mutes).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import grpc

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc as pb_grpc
from feed_service.core.join import DEFAULT_INBOX_CAP
from feed_service.server import auth
from feed_service.server.activity import ReadReporter
from feed_service.core.list_readers import list_reader
from feed_service.core.per_reader.pull_reposts import ListRule
from feed_service.server.calls import CallPlumbing, RpcFailure, authorize_timeline, check_id, check_user_id, rpc
from feed_service.server.change_feed import ChangeFeed
from feed_service.server.hydration import EntryHydrator, ProfileCache, hydrate_profiles
from feed_service.server.list_access import owned_rule
from feed_service.server.metrics import ServerMetrics
from feed_service.server.page_token import KIND_AUTHOR_PAGE, KIND_PAGE, PageTokenCodec
from feed_service.server.paging import MAX_PAGE_SIZE, Pager, page_size
from feed_service.server.pull_sources import PullSources
from feed_service.server.rate_limit import RateLimiter
from feed_service.server.read_cache import ReadCache
from feed_service.server.timeline_reads import TimelineReads, list_rule_of
from feed_service.server.watch import HomeWatch, Messages
from feed_service.server.watch_hub import WatchHub
from feed_service.settings import check_inbox_cap
from feed_service.store.ports import TimelineStore


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
        user_limiter: RateLimiter | None = None,
        service_limiter: RateLimiter | None = None,
        max_watches_per_user: int = 0,
    ) -> None:
        #: the view's cap (Settings.inbox_cap, the stream's and backfill's too): paging stops there
        self.inbox_cap = check_inbox_cap(inbox_cap)
        self.metrics = metrics
        self.calls = CallPlumbing(store=store, store_status=store_status, secret=secret, metrics=metrics,
                                  request_timeout_s=request_timeout_s, access_log=access_log, now=now,
                                  user_limiter=user_limiter, service_limiter=service_limiter)
        self.cache = ProfileCache(profile_cache_size)
        hydrator = EntryHydrator(self.cache, metrics.profile_cache)
        tokens = PageTokenCodec(secret)
        self.reads = TimelineReads(PullSources(ttl_s=pull_cache_ttl_s, head=MAX_PAGE_SIZE + 1))
        self.pages = Pager(tokens, hydrator, self.inbox_cap)
        self.watch = HomeWatch(calls=self.calls, reads=self.reads, hydrator=hydrator, tokens=tokens,
                               metrics=metrics, poll_s=watch_poll_s, inbox_cap=self.inbox_cap,
                               max_per_user=max_watches_per_user)
        #: who reads, for the stream's driver (None: FEED_INACTIVE_AFTER_S=0, every inbox is kept)
        self.read_activity: ReadReporter | None = None

    def attach_read_activity(self, reporter: ReadReporter) -> None:
        """Report every home read and watch start to ``reporter`` from now on."""
        self.read_activity = reporter

    def attach_changes(self, feed: ChangeFeed, read_cache: ReadCache | None, hub: WatchHub) -> None:
        """Serve from the change topic from now on: watches subscribe to ``hub``, reads use ``read_cache``
        (None: no read cache) while ``feed`` is live."""
        self.reads.attach(feed, read_cache)
        self.watch.hub = hub

    def stop_watches(self) -> None:
        """End every open watch stream (server shutdown)."""
        self.watch.stop()

    @property
    def feed(self) -> ChangeFeed | None:
        """The view's change topic, once consumed (:meth:`attach_changes`)."""
        return self.reads.feed

    @property
    def read_cache(self) -> ReadCache | None:
        return self.reads.read_cache

    @property
    def hub(self) -> WatchHub | None:
        return self.watch.hub

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
    async def _list_rule(self, store: TimelineStore, user_id: str, list_id: str, budget: float) -> ListRule:
        """The rule of list ``list_id`` for its owner ``user_id``, from its reader's statics (one
        single-partition read): NOT_FOUND while the list does not exist (``list_owner`` null),
        PERMISSION_DENIED when another user owns it (docs/api.md#lists)."""
        reader = list_reader(list_id)

        async def read() -> ListRule | None:
            return list_rule_of(await store.statics(reader, timeout=budget))
        cache = self.reads.live_cache()
        return owned_rule(await (read() if cache is None else cache.list_rule(reader, read)), list_id, user_id)

    def _read_by(self, reader: str) -> None:
        """Report a read of ``reader``'s timeline (a user's home, a list's reader) to the stream's driver."""
        if self.read_activity is not None:
            self.read_activity.read(reader)

    # -- RPCs ------------------------------------------------------------------------------
    @rpc("GetHomeTimeline")
    async def GetHomeTimeline(self, request: pb.GetHomeTimelineRequest, context: grpc.aio.ServicerContext,
                              claims: auth.Claims) -> pb.GetHomeTimelineResponse:
        user_id = check_user_id(request.user_id, "user_id")
        size = page_size(request.page_size)
        authorize_timeline(claims, user_id)
        self._read_by(user_id)
        return await self._home_page(user_id, request.page_token, size, context, pb.GetHomeTimelineResponse)

    @rpc("GetListTimeline")
    async def GetListTimeline(self, request: pb.GetListTimelineRequest, context: grpc.aio.ServicerContext,
                              claims: auth.Claims) -> pb.GetListTimelineResponse:
        user_id = check_user_id(request.user_id, "user_id")
        list_id = check_id(request.list_id, "list_id")
        size = page_size(request.page_size)
        authorize_timeline(claims, user_id)
        reader = list_reader(list_id)
        if self.reads.live_cache() is None:
            # no read cache: the owner check takes the list's rule from the statics the page's own
            # read brings, one store read fewer than a read of them first
            def check(rule: ListRule | None) -> ListRule:
                return owned_rule(rule, list_id, user_id)
            page = await self._home_page(reader, request.page_token, size, context, pb.GetListTimelineResponse,
                                         owner_check=check)
        else:
            rule = await self._list_rule(self.calls.store(), user_id, list_id, self.calls.budget(context))
            page = await self._home_page(reader, request.page_token, size, context, pb.GetListTimelineResponse, rule)
        self._read_by(reader)
        return page

    async def _home_page(self, user_id: str, page_token: str, size: int, context: grpc.aio.ServicerContext,
                         response_type: type, rule: ListRule | None = None,
                         owner_check: Callable[[ListRule | None], ListRule] | None = None) -> Any:
        """One page of ``user_id``'s home timeline (a list's reader: with its list's ``rule``, or the
        rule its statics hold checked by ``owner_check``: :meth:`TimelineReads.home_page`), as
        ``response_type`` (its fields those of GetHomeTimelineResponse), or its encoding."""
        cache = self.reads.live_cache()
        # an encoded page is kept under the token it answered: that token was verified for this user
        page_key = (page_token, size)
        if cache is not None:
            encoded = cache.page_memo(user_id, page_key)
            if encoded is not None:
                return encoded
        before, served, limit = self.pages.start(page_token, user_id, KIND_PAGE, size)
        store = self.calls.store()
        budget = self.calls.budget(context)
        if limit <= 0:
            if owner_check is not None:  # nothing left to read, but the caller is checked still
                owner_check(list_rule_of(await store.statics(user_id, timeout=budget)))
            return response_type()
        cached = self.reads.cached_home_page(user_id, before, limit + 1, rule)
        rows = (cached[0] if cached is not None
                else await self.reads.home_page(store, user_id, before, limit + 1, budget, rule, owner_check))
        entries, next_token = await self.pages.page(store, user_id, KIND_PAGE, rows, limit, served, budget)
        response = response_type(entries=entries, next_page_token=next_token)
        if cache is None or cached is None or not self.pages.hydrated(rows[:limit]):
            return response
        encoded = response.SerializeToString()
        cache.remember_page(user_id, page_key, cached[1], encoded, cached[2])
        return encoded

    @rpc("GetTweet")
    async def GetTweet(self, request: pb.GetTweetRequest, context: grpc.aio.ServicerContext,
                       claims: auth.Claims) -> pb.Tweet:
        tweet_id = check_id(request.tweet_id, "tweet_id")
        store = self.calls.store()
        budget = self.calls.budget(context)
        row = await store.tweet(tweet_id, timeout=budget)
        # the author is known only once the tweet is read, so its block check follows that read
        if row is None or await self._author_blocks_reader(store, row.author_id, claims, budget):
            raise RpcFailure(grpc.StatusCode.NOT_FOUND, f"tweet {tweet_id!r} not found")  # a block looks the same
        return pb.Tweet(tweet_id=row.tweet_id, author_id=row.author_id or "", created_at_ms=row.created_at or 0,
                        version=row.version, text=row.text or "", profile_version=row.profile_version or 0,
                        in_reply_to_tweet_id=row.in_reply_to_tweet_id or "",
                        in_reply_to_author_id=row.in_reply_to_author_id or "")

    @rpc("GetProfile")
    async def GetProfile(self, request: pb.GetProfileRequest, context: grpc.aio.ServicerContext,
                         claims: auth.Claims) -> pb.Profile:
        user_id = check_id(request.user_id, "user_id")
        version = request.version if request.HasField("version") else None
        if version is not None and version < 0:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"version must be >= 0, got {version}")
        store = self.calls.store()
        budget = self.calls.budget(context)
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

    @rpc("GetUserTimeline")
    async def GetUserTimeline(self, request: pb.GetUserTimelineRequest, context: grpc.aio.ServicerContext,
                              claims: auth.Claims) -> pb.GetUserTimelineResponse:
        # a user's own tweets and reposts are public: any valid token reads them, unless the user blocks its reader
        author_id = check_id(request.user_id, "user_id")
        size = page_size(request.page_size)
        before, served, limit = self.pages.start(request.page_token, author_id, KIND_AUTHOR_PAGE, size)
        if limit <= 0:
            return pb.GetUserTimelineResponse()
        store = self.calls.store()
        budget = self.calls.budget(context)
        page = self.reads.user_page(store, author_id, before, limit + 1, budget)
        if auth.blockable_reader(claims, author_id) is None:  # a service, or the author itself: no block read
            rows = await page
        else:  # the block check runs beside the page read
            rows, blocked = await asyncio.gather(page, self._author_blocks_reader(store, author_id, claims, budget))
            if blocked:
                raise RpcFailure(grpc.StatusCode.NOT_FOUND, f"user timeline {author_id!r} not found")
        entries, next_token = await self.pages.page(store, author_id, KIND_AUTHOR_PAGE, rows, limit, served, budget)
        return pb.GetUserTimelineResponse(entries=entries, next_page_token=next_token)

    @rpc("WatchHomeTimeline", streaming=True)
    def WatchHomeTimeline(self, request: pb.WatchHomeTimelineRequest, context: grpc.aio.ServicerContext,
                          claims: auth.Claims) -> Messages:
        user_id = check_user_id(request.user_id, "user_id")
        authorize_timeline(claims, user_id)
        self._read_by(user_id)
        return self.watch.stream(self.calls.store(), user_id, request.resume_token, context)

    @rpc("WatchListTimeline", streaming=True)
    async def WatchListTimeline(self, request: pb.WatchListTimelineRequest, context: grpc.aio.ServicerContext,
                                claims: auth.Claims) -> Messages:
        # WatchHomeTimeline of the list's reader, behind the owner check: its messages have the same
        # fields and numbers, so they are sent as they are (docs/api.md#lists)
        user_id = check_user_id(request.user_id, "user_id")
        list_id = check_id(request.list_id, "list_id")
        authorize_timeline(claims, user_id)
        store = self.calls.store()
        await self._list_rule(store, user_id, list_id, self.calls.budget(context))
        reader = list_reader(list_id)
        self._read_by(reader)
        async for message in self.watch.stream(store, reader, request.resume_token, context, list_owner=user_id):
            yield message

    @rpc("ListLists")
    async def ListLists(self, request: pb.ListListsRequest, context: grpc.aio.ServicerContext,
                        claims: auth.Claims) -> pb.ListListsResponse:
        owner_id = check_user_id(request.owner_id, "owner_id")
        authorize_timeline(claims, owner_id)  # a user's lists are its own, as its timelines
        rows = await self.calls.store().lists_of(owner_id, timeout=self.calls.budget(context))
        return pb.ListListsResponse(lists=[pb.ListInfo(list_id=r.list_id, name=r.name, replies_policy=r.replies_policy,
                                                       exclusive=r.exclusive) for r in rows])
