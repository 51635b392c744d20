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

A watch of a reader whose inbox is not kept (the static ``inbox_dropped``, read when it starts)
ignores the inbox's changes and merges the reader's push authors in as it merges pull authors:
their author timelines' changes, with the rule of the inbox (no reply, a thread, a reply to the
reader), joined and left as the reader's visible set changes (docs/activity.md). It stays so until
it ends: the author timelines are exact whether or not the inbox is kept again meanwhile.

At most ``max_per_user`` streams of one timeline are open at once: the next one ends with
RESOURCE_EXHAUSTED before it reads or subscribes to anything, the open ones go on
(docs/api.md#limits).
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import grpc

from feed_service.api import timeline_pb2 as pb
from feed_service.core.inbox_rule import push_authors
from feed_service.core.rows import Cursor, Entry
from feed_service.core.timeline_merge import timeline_order
from feed_service.core.per_reader.pull_reposts import Lookups, TweetKey, key, shows_extras_row, shows_pulled_row
from feed_service.core.view_changes import (
    AuthorChange,
    ExtrasChange,
    HiddenChange,
    PullFollowChange,
    PullReposterChange,
    TimelineChange,
    UserRepostChange,
    VisibleChange,
)
from feed_service.errors import PageTokenError
from feed_service.server.calls import CallPlumbing, RpcFailure, deadline_capped
from feed_service.server.hydration import EntryHydrator
from feed_service.server.metrics import ServerMetrics
from feed_service.server.page_token import KIND_WATCH, PageCursor, PageTokenCodec
from feed_service.server.pull_replies import deciding_user
from feed_service.server.timeline_reads import TimelineReads
from feed_service.server.watch_frames import SharedEncodings, token_field
from feed_service.server.watch_hub import RESYNC, Subscription, WatchHub
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
        #: open streams per timeline, and their cap (0: none)
        self.max_per_user = max_per_user
        self.open: dict[str, int] = {}

    def stop(self) -> None:
        """End every open stream (server shutdown)."""
        self.stopping.set()
        if self.hub is not None:
            self.hub.wake_all()

    async def stream(self, store: TimelineStore, user_id: str, resume_token: str,
                     context: grpc.aio.ServicerContext) -> Messages:
        """The messages of one stream of ``user_id``'s timeline (already authorized)."""
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
                async for message in self._polling(store, user_id, position, context):
                    yield message
                return
            async for message in self._pushed(hub, sub, store, user_id, position, bool(resume_token), context):
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
                       context: grpc.aio.ServicerContext) -> Messages:
        """Without the change topic: read entries newer than ``position`` every ``poll_s``."""
        calls = self.calls
        while not self.stopping.is_set():
            try:
                await asyncio.wait_for(self.stopping.wait(), self._poll_wait(context))
                break  # server shutting down: end the stream cleanly (OK)
            except asyncio.TimeoutError:
                pass
            store = calls.store()
            budget = calls.budget(context)  # every read within the call's deadline
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
                        state: "_WatchState") -> Messages:
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
                      position: Cursor | None, resumed: bool, context: grpc.aio.ServicerContext) -> Messages:
        """With the change topic: catch up from Cassandra if resuming, then send what the subscription
        receives, reading nothing while nothing changes (docs/api.md#watch). The call's deadline is
        one timer that wakes the subscription, not a timeout per wait."""
        remaining = context.time_remaining()
        timer = (asyncio.get_running_loop().call_later(max(remaining, 0.0), sub.expire)
                 if remaining is not None else None)
        try:
            state = _WatchState(position)
            budget = self.calls.budget(context)
            # read after subscribing: the changes since then apply on top (one read of the statics)
            statics = await store.statics(user_id, timeout=budget)
            authors, reposters = statics.pull_authors or [], statics.pull_reposters or []
            if statics.inbox_dropped:  # its push authors are merged in like pull authors
                state.dropped = True
                state.push = set(push_authors(await store.visible_users(user_id, timeout=budget), authors))
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
                        await self._resync_push(hub, sub, store, state, self.calls.budget(context))
                    async for message in self._catch_up(store, user_id, context, state):
                        yield message
                    continue
                if items:
                    message = await self._changes(hub, sub, items, state, self.calls.budget(context))
                    if message is not None:
                        yield message
        finally:
            if timer is not None:
                timer.cancel()

    async def _resync_push(self, hub: WatchHub, sub: Subscription, store: TimelineStore, state: "_WatchState",
                           budget: float) -> None:
        """After a gap, the push authors of a reader whose inbox is not kept read again (the catch-up
        that follows sends what they brought above the position)."""
        visible = await store.visible_users(sub.user_id, timeout=budget)
        pull = sub.authors - state.push
        push = set(push_authors(visible, pull))
        for a in state.push - push:
            hub.unfollow(sub, a)
        state.push = push
        hub.follow(sub, sorted(push))

    async def _push_rows(self, store: TimelineStore, author: str, budget: float) -> list[Entry]:
        """A push author's newest rows (up to the cap) from the store itself, read after the watch
        follows it: every later change of it reaches the watch."""
        return await store.author_page(author, before=None, limit=self.inbox_cap, timeout=budget)

    async def _join_push(self, hub: WatchHub, sub: Subscription, store: TimelineStore, author: str,
                         state: "_WatchState", upserts: dict[str, Entry], removed: dict[str, Entry],
                         unmerged: set[str], budget: float) -> None:
        """A reader whose inbox is not kept merges ``author`` in as a push author: its rows the inbox
        would hold are noted (sent), its others (replies to third users) leave this source."""
        state.push.add(author)
        hub.follow(sub, (author,))  # before the read: a change after it reaches the watch
        page = await self._push_rows(store, author, budget)
        ids = set()
        for entry in page:
            ids.add(entry.tweet_id)
            if state.shows(entry, sub.user_id):
                state.note(upserts, removed, "a", "insert", entry)
            elif state.holds(entry.tweet_id, "a"):
                state.note(upserts, removed, "a", "delete", entry)
                unmerged.add(entry.tweet_id)
        oldest = page[-1].cursor if len(page) >= self.inbox_cap else None
        for tid, held in list(state.held.items()):  # deleted while the watch did not follow it
            row = held.get("a")
            if (row is not None and row.author_id == author and tid not in ids
                    and (oldest is None or row.cursor > oldest)):
                state.note(upserts, removed, "a", "delete", row)

    async def _leave_push(self, hub: WatchHub, sub: Subscription, store: TimelineStore, author: str,
                          state: "_WatchState", upserts: dict[str, Entry], removed: dict[str, Entry],
                          unmerged: set[str], budget: float) -> None:
        """A reader whose inbox is not kept no longer sees push author ``author``: its rows leave
        (decided again from the store when no source the watch heard of holds them)."""
        state.push.discard(author)
        hub.unfollow(sub, author)
        page = await self._push_rows(store, author, budget)
        for entry in [*page, *(h["a"] for h in list(state.held.values()) if "a" in h and h["a"].author_id == author)]:
            state.note(upserts, removed, "a", "delete", entry)
            unmerged.add(entry.tweet_id)

    async def _changes(self, hub: WatchHub, sub: Subscription, items: list, state: "_WatchState",
                       budget: float) -> bytes | None:
        """One message of the changes ``items``: new entries above the position, others changed or
        removed; encoded once per content for all the watchers of a delivery (:mod:`.watch_frames`),
        with this watcher's resume token.

        A tweet's entry comes from the inbox, a pull author's timeline or the reader's
        ``home_extras``; two of them may hold it at once while it moves between them (an author
        crossing the pull threshold, a follow that makes a reposted tweet direct), and their changes
        interleave in any order (the author key's, the pull-follow's and the per-reader stage's). So the
        watch notes which of them holds each tweet it heard of and sends the newest entry held,
        removing the tweet only when none holds it. A pull author's reply to a third user counts
        only if the reader sees that user (a visible-set change brings or takes those replies).

        A reader who merges pull reposters in has its repost rows decided with lookups
        (:mod:`.pulled_reposts`): the extras' repost rows ("x") and the pull reposters' ("r") of every
        tweet a change may concern are decided again from the store, and the one shown, if any, is
        noted (docs/reposts-and-replies.md, hybrid fan-out)."""
        user_id = sub.user_id
        store = self.calls.store()
        upserts: dict[str, Entry] = {}
        removed: dict[str, Entry] = {}
        # tweets whose repost row is decided again, with the rows of each the changes brought, by
        # source (None: a row read, not brought)
        redecide: dict[TweetKey, dict[str | None, Entry]] = {}
        unmerged: set[str] = set()  # tweets a membership change took from a pull author's rows
        undecided = {u for c in items if isinstance(c, AuthorChange) and c.entry.author_id not in state.push
                     if (u := deciding_user(c.entry, user_id)) is not None and u not in state.sees}
        if undecided:
            await self._learn(store, user_id, undecided, state, budget)
        for change in items:
            if isinstance(change, PullReposterChange):  # the user starts or stops merging a reposter in
                for e in await self.reads.reposts_page(store, change.reposter_id, None, self.inbox_cap, budget):
                    redecide.setdefault(key(e), {}).setdefault(None, e)
                for held in list(state.held.values()):  # what it brought, gone from the store already
                    row = held.get("r")
                    if row is not None and row.reposted_by == change.reposter_id:
                        redecide.setdefault(key(row), {}).setdefault(None, row)
                continue
            if isinstance(change, UserRepostChange):
                # the hub routes the reposts of the reposters merged in when it routes them (and, to a
                # starting watch, all): decided whether or not the reposter is still merged in now
                e = change.entry
                if state.fresh(change):
                    redecide.setdefault(key(e), {})["-" if change.op == "delete" else f"r:{e.reposted_by}"] = e
                continue
            if isinstance(change, (VisibleChange, HiddenChange)) and sub.reposters:
                # a reposted tweet of that user, or replying to it, may become direct or hidden
                for p in sorted(sub.reposters):
                    for e in await self.reads.reposts_page(store, p, None, self.inbox_cap, budget):
                        if change.user_id in (e.author_id, e.in_reply_to_author_id):
                            redecide.setdefault(key(e), {}).setdefault(None, e)
                if isinstance(change, HiddenChange):
                    continue
            elif isinstance(change, HiddenChange):
                continue
            if isinstance(change, ExtrasChange) and change.entry.reposted_by is not None and sub.reposters:
                if state.fresh(change):
                    redecide.setdefault(key(change.entry), {})["-" if change.op == "delete" else "x"] = change.entry
                continue
            if isinstance(change, PullFollowChange):  # the user starts or stops merging an author in
                if state.dropped:
                    if change.op == "insert":
                        state.push.discard(change.author_id)  # a push author now merged as a pull author
                    elif await store.visible_among(user_id, (change.author_id,), timeout=budget):
                        # still seen: a pull author turned push (or an unfollow whose visible row
                        # goes later: its change takes the rows then)
                        await self._join_push(hub, sub, store, change.author_id, state, upserts, removed,
                                              unmerged, budget)
                        continue
                page = await self.reads.author_page(store, change.author_id, None, self.inbox_cap, budget)
                if change.op == "insert":
                    await self._learn(store, user_id, _undecided(page, user_id, state), state, budget)
                for entry in page:
                    shown = change.op == "insert" and state.shows(entry, user_id)
                    if shown or change.op == "delete":
                        state.note(upserts, removed, "a", "insert" if shown else "delete", entry)
                        unmerged.add(entry.tweet_id)
                continue
            if isinstance(change, VisibleChange):  # the pull authors' replies to that user come or go
                state.sees[change.user_id] = change.op == "insert"
                u = change.user_id
                if state.dropped:  # the reader's push authors are its visible set less its pull authors
                    if change.op == "insert" and u not in sub.authors:
                        await self._join_push(hub, sub, store, u, state, upserts, removed, unmerged, budget)
                    elif change.op == "delete" and u in state.push:
                        await self._leave_push(hub, sub, store, u, state, upserts, removed, unmerged, budget)
                for author in sorted(sub.authors - state.push):
                    page = await self.reads.author_page(store, author, None, self.inbox_cap, budget)
                    for entry in page:
                        if deciding_user(entry, user_id) == change.user_id:
                            state.note(upserts, removed, "a", change.op, entry)
                            unmerged.add(entry.tweet_id)
                continue
            if state.dropped:
                if isinstance(change, TimelineChange):
                    continue  # the inbox is not kept: its rows are not the timeline's (docs/activity.md)
                if (isinstance(change, AuthorChange) and change.op != "delete"
                        and change.entry.author_id not in sub.authors and not state.holds(change.entry.tweet_id, "a")):
                    continue  # a row of an author no longer merged in (queued before it left): not shown
            if not state.fresh(change):
                continue
            op, entry = change.op, change.entry
            if isinstance(change, AuthorChange) and not state.shows(entry, user_id):
                if op == "insert" and not state.holds(entry.tweet_id, "a"):
                    continue  # a reply this reader is not shown: nothing to say
                op = "delete"  # an edit may have made it one: it leaves
            state.note(upserts, removed, _SOURCES[type(change)], op, entry)
        for tid, entry in removed.items():
            # a pull author's rows that leave with its membership (no longer merged in, or a reply
            # whose parent's author is no longer seen) while no source this watch heard of holds
            # them: the client may still show them from one it never heard of (its first page, a
            # catch-up read), which no change will name, so they are decided from the store. A
            # row's own delete is not: a source it moves to publishes its own change
            if tid in unmerged and tid not in state.held:
                redecide.setdefault(key(entry), {}).setdefault("-", entry)
        if redecide:
            await self._redecide(store, user_id, sorted(sub.reposters), redecide, state, budget, upserts, removed,
                                 sub.authors)
        if not upserts and not removed:
            return None
        position = state.position
        new: list[Entry] = []
        changed: list[Entry] = []
        for e in upserts.values():
            (new if position is None or e.cursor > position else changed).append(e)
        if new:
            if len(new) > 1:
                new.sort(key=_cursor)
            state.position = new[-1].cursor
        content = (tuple(new), tuple(changed), tuple(removed))
        delivery = hub.deliveries
        parts = (self.encodings.cached(content, delivery)
                 or await self.encodings.parts(store, content, budget, delivery))
        self.metrics.watch_messages.inc()
        return parts.frame(self._token_field(user_id, state))

    async def _redecide(self, store: TimelineStore, user_id: str, reposters: list[str],
                        tweets: dict[TweetKey, dict[str | None, Entry]], state: "_WatchState", budget: float,
                        upserts: dict[str, Entry], removed: dict[str, Entry], sub_authors: set[str]) -> None:
        """Decide again which repost row of each of ``tweets`` the reader is shown, from the store,
        and note it (the extras' row "x" or a pull reposter's "r"; the other's held row leaves).
        Each tweet comes with the rows of it the changes brought ("x", or "r:" and the reposter;
        their content is the newest: noted if one is the row shown; "-" a deleted one), or one read
        (None)."""
        samples = {k: await _as_now(store, k, brought, budget) for k, brought in tweets.items()}
        users = {u for k, rows in tweets.items() for e in (samples[k], *rows.values())
                 for u in (e.author_id, e.in_reply_to_author_id) if u is not None and u != user_id}
        facts = await self.reads.repost_facts(store, user_id, reposters,
                                              Lookups(frozenset(tweets), frozenset(tweets), frozenset(users)), budget,
                                              exact=True)
        for k, brought in sorted(tweets.items()):
            sample = samples[k]
            winner: tuple[str, int, str] | None = None  # (source, reposted_at, reposter)
            pushed = facts.pushed.get(k)
            if pushed is not None and shows_extras_row(_as_repost(sample, pushed), facts):
                winner = ("x", *pushed)
            else:
                for at, p in facts.pulled.get(k, ()):
                    if shows_pulled_row(_as_repost(sample, (at, p)), user_id, facts):
                        winner = ("r", at, p)
            held = state.held.get(k[1], {})
            shown_direct: tuple[str, Entry] | None = None
            if winner is None:  # direct, if one of the reader's sources holds it: it shows at its own time
                shown_direct = next(((s, e) for s, e in held.items() if e.reposted_by is None), None)
                if shown_direct is None:
                    shown_direct = await self._direct_row(store, user_id, sample, sub_authors, state, budget)
            for source in ("x", "r"):
                row = held.get(source)
                if row is not None and row.reposted_by is not None and (
                        winner is None or (source, row.reposted_at, row.reposted_by) != winner):
                    if shown_direct is not None:
                        del held[source]  # replaced by the direct entry below
                        if not held:
                            del state.held[k[1]]
                    else:
                        state.note(upserts, removed, source, "delete", row)
                    held = state.held.get(k[1], {})
            if shown_direct is not None:
                state.note(upserts, removed, shown_direct[0], "insert", shown_direct[1])
                continue
            if winner is None:
                if not held:
                    # no row of it is shown, whether or not this watch heard of the one the client
                    # holds (its first page, a catch-up read): it leaves
                    state.note(upserts, removed, "r", "delete", sample)
                continue
            source, at, p = winner
            row = held.get(source)
            mine = brought.get("x" if source == "x" else f"r:{p}")
            if mine is not None and (mine.reposted_at, mine.reposted_by) == (at, p):
                state.note(upserts, removed, source, "insert", mine)  # a change's own row: newest content
            elif row is None or (row.reposted_at, row.reposted_by) != (at, p):
                cursor = (at, k[1] + "\x00")  # the row at (at, tweet_id) is the newest below this
                rows = (await store.extras_page(user_id, before=cursor, limit=1, timeout=budget) if source == "x"
                        else await store.user_reposts_page(p, before=cursor, limit=1, timeout=budget))
                if not rows or rows[0].tweet_id != k[1] or rows[0].at != at:
                    continue  # gone since the lookups: its own change follows
                state.note(upserts, removed, source, "insert", rows[0])

    async def _direct_row(self, store: TimelineStore, user_id: str, sample: Entry, sub_authors: set[str],
                          state: "_WatchState", budget: float) -> tuple[str, Entry] | None:
        """The tweet's direct row in the reader's sources as stored now, with its source: the pull
        author's timeline ("a", if the reply rule shows it), the inbox ("i") or the reader's extras ("x",
        a reply shown for its parent). Decided from the rows, not from the visible set: each source
        writes its rows before it publishes their changes while the visible set is written by a
        later stage, so a row read here is one whose removal this watch will still hear of, and a row
        not here one whose arrival it will (docs/api.md#watch)."""
        tid, cursor = sample.tweet_id, (sample.created_at, sample.tweet_id + "\x00")
        if sample.author_id in sub_authors:
            rows = await store.author_page(sample.author_id, before=cursor, limit=1, timeout=budget)
            if rows and rows[0].tweet_id == tid:
                await self._learn(store, user_id, _undecided(rows, user_id, state), state, budget)
                if state.shows(rows[0], user_id):
                    return "a", rows[0]
            if sample.author_id not in state.push:
                return None  # a pull author's replies reach no reader's extras
        if not state.dropped:  # an inbox not kept holds no row of the timeline
            rows = await store.page(user_id, before=cursor, limit=1, timeout=budget)
            if rows and rows[0].tweet_id == tid:
                return "i", rows[0]
        rows = await store.extras_page(user_id, before=cursor, limit=1, timeout=budget)
        if rows and rows[0].tweet_id == tid and rows[0].reposted_by is None:
            return "x", rows[0]
        return None

    async def _learn(self, store: TimelineStore, user_id: str, users: set[str], state: "_WatchState",
                     budget: float) -> None:
        """Note whether the reader sees each of ``users`` (one read for all: the cache's or the store's)."""
        if users:
            seen = await self.reads.sees(store, user_id, users, budget)
            for u in users:
                state.sees.setdefault(u, u in seen)  # a visible-set change noted meanwhile is newer

    def _token_field(self, user_id: str, state: "_WatchState") -> bytes:
        """The encoded resume token of the stream's position, minted again only when it moved."""
        position = state.position
        if position != state.token_at:
            token = self.tokens.encode_ascii(user_id, position, 0, KIND_WATCH) if position is not None else b""
            state.token_at, state.token = position, token_field(token)
        return state.token


class _WatchState:
    """What one pushed watch has sent: its position, the row write timestamps seen (duplicates of an
    at-least-once topic are dropped), the rows its catch-up reads sent, which source holds each
    tweet it heard of (``held``: "i" the inbox, "a" a pull author, "x" the reader's extras) and
    whether the reader sees each user a pull author's reply was decided by (``sees``). For a reader
    whose inbox is not kept (``dropped``), ``push`` holds the push authors merged in as "a" too."""

    __slots__ = ("position", "seen", "read", "held", "sees", "token_at", "token", "dropped", "push")

    #: Rows whose last write timestamp a watch remembers (the oldest are forgotten first); the same
    #: bound holds the tweets' sources and the memberships.
    SEEN_LIMIT = 10_000

    def __init__(self, position: Cursor | None) -> None:
        self.position = position
        self.seen: dict[object, int] = {}
        self.read: dict[str, Entry] = {}
        self.held: dict[str, dict[str, Entry]] = {}
        self.sees: dict[str, bool] = {}
        #: the encoded resume token of position ``token_at`` (the last one minted)
        self.token_at: Cursor | None = None
        self.token = b""
        self.dropped = False
        #: the push authors merged in (a subset of the hub's ``Subscription.authors``): only while dropped
        self.push: set[str] = set()

    def fresh(self, change: TimelineChange | AuthorChange | ExtrasChange) -> bool:
        """False for a change at or below a write timestamp already applied to its row (a replay).
        A row is a tweet at a position of one table's partition, as in Cassandra (a pull reposter's
        rows: that reposter's partition): a move is a delete and an insert of two rows at one ``ts``,
        both applied."""
        e = change.entry
        source = _SOURCES[type(change)]
        # a pull reposter's row is one of that reposter's table: two reposters' rows of a tweet at
        # one repost time are two rows, each with its own write timestamps
        key = (e.tweet_id, e.at, source, e.reposted_by if source == "r" else None)
        last = self.seen.get(key)
        if last is not None and change.ts <= last:
            return False
        self.seen[key] = change.ts
        if len(self.seen) > self.SEEN_LIMIT:
            del self.seen[next(iter(self.seen))]
        return True

    def shows(self, entry: Entry, reader: str) -> bool:
        """Whether a pull author's row is shown to ``reader`` (its deciding user noted in ``sees``); a
        push author's (merged in while the inbox is not kept) only if the inbox would hold it."""
        u = deciding_user(entry, reader)
        if u is None:
            return True
        return entry.author_id not in self.push and self.sees.get(u, False)

    def holds(self, tweet_id: str, source: str) -> bool:
        held = self.held.get(tweet_id)
        return held is not None and source in held

    def note(self, upserts: dict[str, Entry], removed: dict[str, Entry], source: str, op: str, entry: Entry) -> None:
        """Fold one change of ``source``'s row of a tweet into a message: the newest row any source
        still holds is sent, or the tweet is removed if none does."""
        tid = entry.tweet_id
        held = self.held.get(tid)
        if op == "delete":
            self.read.pop(tid, None)  # whatever the catch-up read sent is no longer the tweet's row
            if held is not None:
                mine = held.get(source)
                if mine is not None and mine.cursor != entry.cursor:
                    return  # an older position of a moved row: the row held stays
                held.pop(source, None)
                if not held:
                    del self.held[tid]
                    held = None
        else:
            if held is None:
                held = self.held[tid] = {}
                self.bound()
            held[source] = entry
        if held is None:
            _note(upserts, removed, "delete", entry)
            return
        best = max(held.values(), key=timeline_order) if len(held) > 1 else next(iter(held.values()))
        if op != "delete" and best is entry and self.read.get(tid) == entry:
            return  # already sent by the catch-up read: this very content
        _note(upserts, removed, "insert", best)

    def bound(self) -> None:
        """Forget the oldest sources, memberships and read versions beyond the limit."""
        for memo in (self.held, self.sees, self.read):
            while len(memo) > self.SEEN_LIMIT:
                del memo[next(iter(memo))]


def _cursor(entry: Entry) -> Cursor:
    return entry.cursor


#: The source of each kind of row change (:meth:`_WatchState.note`): "r" a pull reposter's row.
_SOURCES = {TimelineChange: "i", AuthorChange: "a", ExtrasChange: "x", UserRepostChange: "r"}


async def _as_now(store: TimelineStore, k: TweetKey, brought: dict[str | None, Entry], budget: float) -> Entry:
    """The tweet ``k`` as it is now: a row an upsert brought (the newest version), else one read, else
    the stored tweet (a deleted row's content may be older than the tweet's: an edit moves a row)."""
    upserts_of = [e for s, e in brought.items() if s not in (None, "-")]
    if upserts_of:
        return max(upserts_of, key=lambda e: e.version)
    if None in brought:
        return brought[None]
    live = await store.tweet(k[1], timeout=budget)
    return live if live is not None and live.author_id == k[0] else brought["-"]


def _as_repost(sample: Entry, repost: tuple[int, str]) -> Entry:
    """``sample``'s tweet as the repost ``(reposted_at, reposter)`` (what the decisions read of it)."""
    return sample._replace(reposted_at=repost[0], reposted_by=repost[1])


def _undecided(rows: list[Entry], reader: str, state: _WatchState) -> set[str]:
    return {u for e in rows if (u := deciding_user(e, reader)) is not None and u not in state.sees}


def _note(upserts: dict[str, Entry], removed: dict[str, Entry], op: str, entry: Entry) -> None:
    """Fold one change of ``entry`` into a message's upserts and removals (the last change wins)."""
    if op == "delete":
        upserts.pop(entry.tweet_id, None)
        removed[entry.tweet_id] = entry
    else:
        removed.pop(entry.tweet_id, None)
        upserts[entry.tweet_id] = entry
