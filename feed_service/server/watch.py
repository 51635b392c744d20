"""WatchHomeTimeline streams (docs/api.md#watch): entries of a home timeline as they arrive.

A stream starts at the timeline's head (or after its resume token) and then either

- is pushed: with the view's change topic live, it subscribes to the :class:`.watch_hub.WatchHub`
  before reading anything, catches up from Cassandra when resuming or after a gap, and then sends
  what its subscription receives, reading nothing while nothing changes; or
- polls: without the topic, it reads entries newer than its position every ``watch_poll_s``.

Once it knows where it starts (subscribed, the head read or the resume token checked), a stream
sends its initial metadata: ``feed-resume-token``, the token of its starting position, so a client
knows the watch is open before any entry arrives and can resume from there without a gap
(:data:`BEFORE_ALL` on an empty timeline; docs/api.md#watch). Every message carries a resume token
too (:mod:`.page_token`, kind ``KIND_WATCH``). A pushed change's
message is sent as bytes: its entries encoded once for all the watchers it reaches, around each
watcher's own token (:mod:`.watch_frames`).

What a pushed stream merges is its reader's home plan (:mod:`feed_service.core.home_plan`), read
from the statics when it starts; :mod:`.watch_changes` makes the changes its subscription receives
into messages, :mod:`.watch_state` holds what it has sent. A watch of a reader whose inbox is not
kept (the plan's dropped inbox) ignores the inbox's changes and merges the reader's push authors in
as it merges pull authors: their author timelines' changes, with the rule of the inbox, joined and
left as the reader's visible set changes (docs/activity.md). It stays so until it ends: the author
timelines are exact whether or not the inbox is kept again meanwhile.

At most ``max_per_user`` streams of one timeline are open at once: the next one ends with
RESOURCE_EXHAUSTED before it reads or subscribes to anything, the open ones go on
(docs/api.md#limits).
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import grpc

from feed_service.api import timeline_pb2 as pb
from feed_service.core.home_plan import home_plan
from feed_service.core.list_readers import list_of
from feed_service.core.rows import Cursor, Entry
from feed_service.errors import PageTokenError
from feed_service.server.calls import CallPlumbing, RpcFailure, deadline_capped
from feed_service.server.hydration import EntryHydrator
from feed_service.server.list_access import owned_rule
from feed_service.server.metrics import ServerMetrics
from feed_service.server.page_token import KIND_WATCH, PageCursor, PageTokenCodec
from feed_service.server.timeline_reads import TimelineReads, list_rule_of, statics_of
from feed_service.server.watch_changes import WatchChanges
from feed_service.server.watch_frames import SharedEncodings
from feed_service.server.watch_hub import RESYNC, Subscription, WatchHub
from feed_service.server.watch_state import WatchState
from feed_service.store.ports import TimelineStore

#: Entries per WatchHomeTimeline poll; a longer backlog is sent over the following polls.
WATCH_BATCH = 200

#: Initial metadata of a started stream: the resume token of its starting position (docs/api.md#watch).
RESUME_TOKEN_HEADER = "feed-resume-token"
#: The position before every entry: where a stream of an empty timeline starts, so that resuming
#: from its start token sends whatever arrived meanwhile.
BEFORE_ALL: Cursor = (-(2**63), "")

#: A stream's responses: messages, or (pushed changes) their encoding, which gRPC sends as it is.
Messages = AsyncIterator[pb.WatchHomeTimelineResponse | bytes]


class HomeWatch:
    """The WatchHomeTimeline streams of one server."""

    def __init__(self, *, calls: CallPlumbing, reads: TimelineReads, hydrator: EntryHydrator,
                 tokens: PageTokenCodec, metrics: ServerMetrics, poll_s: float, inbox_cap: int,
                 max_per_user: int = 0) -> None:
        self.calls = calls
        self.reads = reads
        self.hydrator = hydrator
        self.tokens = tokens
        self.metrics = metrics
        self.poll_s = poll_s
        self.inbox_cap = inbox_cap
        #: set when the server begins to shut down: open streams end cleanly
        self.stopping = asyncio.Event()
        #: where pushed streams subscribe, once the change topic is consumed
        self.hub: WatchHub | None = None
        self.encodings = SharedEncodings(hydrator)
        #: what makes the changes a subscription receives into messages
        self.changes = WatchChanges(reads=reads, encodings=self.encodings, tokens=tokens, metrics=metrics,
                                    inbox_cap=inbox_cap)
        #: open streams per timeline, and their cap (0: none)
        self.max_per_user = max_per_user
        self.open: dict[str, int] = {}

    def stop(self) -> None:
        """End every open stream (server shutdown)."""
        self.stopping.set()
        if self.hub is not None:
            self.hub.wake_all()

    async def stream(self, store: TimelineStore, user_id: str, resume_token: str,
                     context: grpc.aio.ServicerContext, *, list_owner: str | None = None) -> Messages:
        """The messages of one stream of ``user_id``'s timeline (already authorized). A list's reader
        (``list_owner``: the owner the caller was checked to be) is watched with its list's rule, read
        again from its statics as its changes arrive (docs/api.md#lists): the stream ends NOT_FOUND
        when the list stops existing, PERMISSION_DENIED when it gets another owner."""
        position: Cursor | None = None
        if resume_token:
            try:
                position = self.tokens.decode(resume_token, timeline_id=user_id, kind=KIND_WATCH).position
            except PageTokenError as exc:
                raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(exc).replace("page token", "resume token"))
        open_streams = self.open
        count = open_streams.get(user_id, 0)
        if self.max_per_user and count >= self.max_per_user:
            raise RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                             f"{count} watches of {user_id!r} are open already, at most {self.max_per_user}")
        open_streams[user_id] = count + 1
        hub = self.hub if self.reads.pushed() else None
        # subscribe before reading anything: a change published meanwhile waits in the subscription
        sub = hub.subscribe(user_id) if hub is not None else None
        self.metrics.watch_streams.inc()
        try:
            if not resume_token:  # start at the current head: only entries materialized from now on
                head = await self.reads.home_page(store, user_id, None, 1, self.calls.budget(context))
                position = head[0].cursor if head else None
            start = resume_token or self.tokens.encode(PageCursor(user_id, position or BEFORE_ALL, 0, KIND_WATCH))
            await context.send_initial_metadata(((RESUME_TOKEN_HEADER, start),))
            if sub is None:
                async for message in self._polling(store, user_id, position, context, list_owner):
                    yield message
                return
            async for message in self._pushed(hub, sub, store, user_id, position, bool(resume_token), context,
                                              list_owner):
                yield message
        finally:
            if sub is not None:
                hub.unsubscribe(sub)
            self.metrics.watch_streams.dec()
            left = open_streams[user_id] - 1
            if left:
                open_streams[user_id] = left
            else:
                del open_streams[user_id]

    def _poll_wait(self, context: grpc.aio.ServicerContext) -> float:
        """Seconds until the next poll: the poll interval, or less if the deadline is nearer."""
        return deadline_capped(context, self.poll_s, "deadline exceeded")

    async def _polling(self, store: TimelineStore, user_id: str, position: Cursor | None,
                       context: grpc.aio.ServicerContext, list_owner: str | None = None) -> Messages:
        """Without the change topic: read entries newer than ``position`` every ``poll_s`` (a list's
        reader's owner checked first, each time)."""
        calls = self.calls
        while not self.stopping.is_set():
            try:
                await asyncio.wait_for(self.stopping.wait(), self._poll_wait(context))
                break  # server shutting down: end the stream cleanly (OK)
            except asyncio.TimeoutError:
                pass
            store = calls.store()
            budget = calls.budget(context)  # every read within the call's deadline
            if list_owner is not None:
                owned_rule(list_rule_of(await store.statics(user_id, timeout=budget)), list_of(user_id) or user_id, list_owner)
            rows = await self.reads.home_newer(store, user_id, position, WATCH_BATCH, budget)
            if rows:
                position = rows[-1].cursor
                yield await self._message(store, user_id, position, rows, budget)

    async def _message(self, store: TimelineStore, user_id: str, position: Cursor | None,
                       new: list[Entry], budget: float, changed: list[Entry] = (),
                       removed: list[str] = ()) -> pb.WatchHomeTimelineResponse:
        hydrated = await self.hydrator.entries(store, [*new, *changed], budget) if new or changed else []
        token = self.tokens.encode(PageCursor(user_id, position, 0, KIND_WATCH)) if position is not None else ""
        self.metrics.watch_messages.inc()
        return pb.WatchHomeTimelineResponse(entries=hydrated[:len(new)], changed=hydrated[len(new):],
                                            removed_tweet_ids=removed, resume_token=token)

    async def _catch_up(self, store: TimelineStore, user_id: str, context: grpc.aio.ServicerContext,
                        state: WatchState) -> Messages:
        """Entries newer than the stream's position from Cassandra, in WATCH_BATCH chunks (after a
        resume or a gap)."""
        while True:
            budget = self.calls.budget(context)
            rows = await self.reads.home_newer(self.calls.store(), user_id, state.position, WATCH_BATCH, budget)
            if not rows:
                return
            state.position = rows[-1].cursor
            for r in rows:
                state.read[r.tweet_id] = r
            state.bound()
            yield await self._message(store, user_id, state.position, rows, budget)
            if len(rows) < WATCH_BATCH:
                return

    async def _pushed(self, hub: WatchHub, sub: Subscription, store: TimelineStore, user_id: str,
                      position: Cursor | None, resumed: bool, context: grpc.aio.ServicerContext,
                      list_owner: str | None = None) -> Messages:
        """With the change topic: catch up from Cassandra if resuming, then send what the subscription
        receives, reading nothing while nothing changes (docs/api.md#watch). The call's deadline is
        one timer that wakes the subscription, not a timeout per wait."""
        remaining = context.time_remaining()
        timer = (asyncio.get_running_loop().call_later(max(remaining, 0.0), sub.expire)
                 if remaining is not None else None)
        try:
            state = WatchState(position)
            budget = self.calls.budget(context)
            # read after subscribing: the changes since then apply on top (one read of the statics)
            plan = home_plan(user_id, statics_of(await store.statics(user_id, timeout=budget)))
            if list_owner is not None:  # a list's reader: its rows merged at read are decided by its rule
                state.rule = owned_rule(plan.list_rule, list_of(user_id) or user_id, list_owner)
                hub.watch_owner(sub, list_owner)  # and by what its owner sees and hides
            authors, reposters = list(plan.pull_authors), list(plan.pull_reposters)
            if plan.dropped:  # its push authors are merged in like pull authors
                state.dropped = True
                state.push = set(await self.reads.push_of(store, user_id, authors, budget))
                early = sub.early_follows
                for a in state.push:  # a pull author that became push since: it stays followed
                    if early is not None and early.get(a) == "delete":
                        del early[a]
            hub.start(sub, [*authors, *sorted(state.push)])
            hub.start_reposters(sub, reposters)
            if resumed:
                async for message in self._catch_up(store, user_id, context, state):
                    yield message
            stopping, ready = self.stopping, sub.ready
            while not stopping.is_set():
                if sub.expired:
                    raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
                await ready.wait()
                if stopping.is_set():
                    break
                if sub.expired:
                    continue
                items = sub.drain()
                if any(item is RESYNC for item in items):
                    if state.dropped:  # changes of the visible set may be lost too
                        await self.changes.resync_push(hub, sub, store, state, self.calls.budget(context))
                    async for message in self._catch_up(store, user_id, context, state):
                        yield message
                    continue
                if items:
                    message = await self.changes.message(hub, sub, items, state, self.calls.store(),
                                                         self.calls.budget(context))
                    if message is not None:
                        yield message
        finally:
            if timer is not None:
                timer.cancel()

