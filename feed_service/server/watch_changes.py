"""A pushed watch's changes made into one message (docs/api.md#watch, docs/view-changes.md).

The view's change topic carries each change once, in the shape of the table it changed. The rows
of the inbox and the extras are the stream's decisions for their reader: a watch notes them as
they are (:meth:`~.watch_state.WatchState.note`). The rows of the sources its reader's home plan
merges in at read (:mod:`feed_service.core.home_plan`: pull authors, the push authors of a dropped
inbox, pull reposters) fan out to nobody, so their changes are decided here for the reader, by the
plan's rules alone: :func:`~feed_service.core.home_plan.shows_row` for an author's row,
:func:`~feed_service.core.home_plan.shown_repost` for a reposted tweet. A membership change (a
pull follow, a visible-set row, a pull reposter) brings or takes that source's rows.

One handler per kind of change (:data:`WatchChanges.handlers`); the message they fold is framed once
per content for every watcher of a delivery (:mod:`.watch_frames`), around this watcher's resume token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Awaitable, Callable

from feed_service.core.home_plan import EXTRAS, shown_repost
from feed_service.core.list_readers import list_of
from feed_service.core.per_reader.pull_reposts import Lookups, TweetKey, key
from feed_service.core.rows import Cursor, Entry
from feed_service.core.view_changes import (
    AuthorChange,
    ExcludedChange,
    ExtrasChange,
    HiddenChange,
    ListChange,
    PullFollowChange,
    PullReposterChange,
    TimelineChange,
    UserRepostChange,
    VisibleChange,
)
from feed_service.server.list_access import owned_rule
from feed_service.server.metrics import ServerMetrics
from feed_service.server.page_token import KIND_WATCH, PageTokenCodec
from feed_service.server.timeline_reads import TimelineReads, list_rule_of
from feed_service.server.watch_frames import SharedEncodings, token_field
from feed_service.server.watch_hub import Subscription, WatchHub
from feed_service.server.watch_state import (
    AUTHOR_ROW,
    EXTRAS_ROW,
    INBOX_ROW,
    REPOSTER_ROW,
    SOURCES,
    WatchState,
)
from feed_service.store.ports import TimelineStore

Brought = dict[str | None, Entry]
"""The rows of one tweet the changes brought, by source: ``"x"`` the extras', ``"r:<reposter>"`` a
pull reposter's (their content the newest), ``"-"`` a deleted one, None one read, not brought."""


@dataclass(slots=True)
class _Message:
    """One message being folded: the watch, its reads' store and budget, and what it gathered."""

    hub: WatchHub
    sub: Subscription
    state: WatchState
    store: TimelineStore
    budget: float
    upserts: dict[str, Entry] = field(default_factory=dict)
    removed: dict[str, Entry] = field(default_factory=dict)
    #: tweets whose repost row is decided again, with the rows of each the changes brought
    redecide: dict[TweetKey, Brought] = field(default_factory=dict)
    #: tweets a membership change took from an author's rows
    unmerged: set[str] = field(default_factory=set)

    @property
    def user_id(self) -> str:
        return self.sub.user_id

    def note(self, source: str, op: str, entry: Entry) -> None:
        self.state.note(self.upserts, self.removed, source, op, entry)

    def again(self, entry: Entry, source: str | None = None) -> None:
        """Decide ``entry``'s tweet's repost row again, ``entry`` being a row of it read (``source``
        None) or brought by a change (noted under ``source``, replacing an earlier one)."""
        brought = self.redecide.setdefault(key(entry), {})
        if source is None:
            brought.setdefault(None, entry)
        else:
            brought[source] = entry


Handler = Callable[["WatchChanges", _Message, object], Awaitable[None]]


class WatchChanges:
    """How the pushed watches of one server turn their changes into messages."""

    def __init__(self, *, reads: TimelineReads, encodings: SharedEncodings, tokens: PageTokenCodec,
                 metrics: ServerMetrics, inbox_cap: int) -> None:
        self.reads = reads
        self.encodings = encodings
        self.tokens = tokens
        self.metrics = metrics
        self.inbox_cap = inbox_cap

    async def message(self, hub: WatchHub, sub: Subscription, items: list, state: WatchState,
                      store: TimelineStore, budget: float) -> bytes | None:
        """One message of the changes ``items``: new entries above the position, others changed or
        removed (None: nothing to say). A tweet's entry is the newest row any source of the reader
        still holds (:meth:`~.watch_state.WatchState.note`); a reader who merges pull reposters in
        has the repost rows of every tweet a change may concern decided again from the store
        (:meth:`_redecide`)."""
        m = _Message(hub, sub, state, store, budget)
        user_id = sub.user_id
        undecided = {u for c in items if isinstance(c, AuthorChange) and c.entry.author_id not in state.push
                     if (u := state.undecided(c.entry, user_id)) is not None}
        if undecided:
            await self._learn(store, user_id, undecided, state, budget)
        handlers = self.handlers
        for change in items:
            handler = handlers.get(type(change))
            if handler is not None:
                await handler(self, m, change)
        for tid, entry in m.removed.items():
            # an author's rows that leave with its membership (no longer merged in, or a reply
            # whose parent's author is no longer seen) while no source this watch heard of holds
            # them: the client may still show them from one it never heard of (its first page, a
            # catch-up read), which no change will name, so they are decided from the store. A
            # row's own delete is not: a source it moves to publishes its own change
            if tid in m.unmerged and tid not in state.held:
                m.redecide.setdefault(key(entry), {}).setdefault("-", entry)
        if m.redecide:
            await self._redecide(m)
        if not m.upserts and not m.removed:
            return None
        position = state.position
        new: list[Entry] = []
        changed: list[Entry] = []
        for e in m.upserts.values():
            (new if position is None or e.cursor > position else changed).append(e)
        if new:
            if len(new) > 1:
                new.sort(key=_cursor)
            state.position = new[-1].cursor
        content = (tuple(new), tuple(changed), tuple(m.removed))
        delivery = hub.deliveries
        parts = (self.encodings.cached(content, delivery)
                 or await self.encodings.parts(store, content, budget, delivery))
        self.metrics.watch_messages.inc()
        return parts.frame(self.token_field(user_id, state))

    # -- one handler per kind of change ---------------------------------------------------------

    async def _pull_reposter(self, m: _Message, change: PullReposterChange) -> None:
        """The reader starts or stops merging a reposter in: the rows it brings or brought are decided again."""
        for e in await self.reads.reposts_page(m.store, change.reposter_id, None, self.inbox_cap, m.budget):
            m.again(e)
        for held in list(m.state.held.values()):  # what it brought, gone from the store already
            row = held.get(REPOSTER_ROW)
            if row is not None and row.reposted_by == change.reposter_id:
                m.again(row)

    async def _user_repost(self, m: _Message, change: UserRepostChange) -> None:
        """A repost row of a reposter the hub routes to this watch (merged in when routed): decided
        whether or not the reposter is still merged in now."""
        e = change.entry
        if m.state.fresh(change):
            m.again(e, "-" if change.op == "delete" else f"r:{e.reposted_by}")

    async def _reposts_of_user(self, m: _Message, user: str) -> None:
        """A reposted tweet of ``user``, or replying to it, may become direct or hidden."""
        for p in sorted(m.sub.reposters):
            for e in await self.reads.reposts_page(m.store, p, None, self.inbox_cap, m.budget):
                if user in (e.author_id, e.in_reply_to_author_id):
                    m.again(e)

    async def _hidden(self, m: _Message, change: HiddenChange) -> None:
        """The reader (a list's reader: its owner) hides a user or no longer does: the reposts of the
        user's tweets are decided again (an owner's hides of a member reach the list's own rows as
        their own changes)."""
        if m.sub.reposters:
            await self._reposts_of_user(m, change.user_id)

    async def _visible(self, m: _Message, change: VisibleChange) -> None:
        """The reader sees a user or no longer does: the pull authors' replies to that user come or
        go, a dropped inbox's push authors join or leave, reposted tweets may become direct."""
        if m.sub.reposters:
            await self._reposts_of_user(m, change.user_id)
        if change.reader_id != m.user_id:  # a list's owner's: what its rule reads as "the owner sees"
            await self._owner_visible(m, change)
            return
        state, sub, user_id = m.state, m.sub, m.user_id
        u = change.user_id
        state.sees[u] = change.op == "insert"
        if state.dropped:  # the reader's push authors: its visible set less its pull authors and excluded
            if change.op == "insert" and u not in sub.authors and not await self._excluded(m, u):
                await self._join_push(m, u)
            elif change.op == "delete" and u in state.push:
                await self._leave_push(m, u)
        for author in sorted(sub.authors - state.push):
            page = await self.reads.author_page(m.store, author, None, self.inbox_cap, m.budget)
            for entry in page:
                if state.deciding(entry, user_id) == u:
                    m.note(AUTHOR_ROW, "insert" if state.shows(entry, user_id) else "delete", entry)
                    m.unmerged.add(entry.tweet_id)

    async def _excluded_change(self, m: _Message, change: ExcludedChange) -> None:
        """A home reader starts or stops setting a user aside as a source (a member of one of its
        exclusive lists): the reposts of the user's tweets are decided again, and a dropped inbox's
        push author leaves or, still seen and not merged in as a pull author, joins again. A kept
        inbox's rows come and go as their own changes."""
        if m.sub.reposters:
            await self._reposts_of_user(m, change.user_id)
        state, u = m.state, change.user_id
        if not state.dropped:
            return
        if change.op == "insert" and u in state.push:
            await self._leave_push(m, u)
        elif (change.op == "delete" and u not in state.push and u not in m.sub.authors
              and await m.store.visible_among(m.user_id, (u,), timeout=m.budget)):
            await self._join_push(m, u)

    async def _list_change(self, m: _Message, change: ListChange) -> None:
        """The list's owner or replies policy changed, or the list is gone: its rule decided again
        (:meth:`list_statics_changed`)."""
        if m.state.rule is not None:
            await self.list_statics_changed(m)

    async def _owner_visible(self, m: _Message, change: VisibleChange) -> None:
        """A list's owner sees a user or no longer does: under the ``followed`` policy the pull
        authors' replies to that user come or go."""
        state, u = m.state, change.user_id
        state.owner_sees[u] = change.op == "insert"
        for author in sorted(m.sub.authors - state.push):
            page = await self.reads.author_page(m.store, author, None, self.inbox_cap, m.budget)
            await self._learn(m.store, m.user_id, _undecided(page, m.user_id, state), state, m.budget)
            for entry in page:
                if state.deciding(entry, m.user_id) == u:
                    m.note(AUTHOR_ROW, "insert" if state.shows(entry, m.user_id) else "delete", entry)
                    m.unmerged.add(entry.tweet_id)

    async def _extras(self, m: _Message, change: ExtrasChange) -> None:
        if change.entry.reposted_by is not None and m.sub.reposters:
            if m.state.fresh(change):  # decided with the pull reposters' rows of the tweet
                m.again(change.entry, "-" if change.op == "delete" else EXTRAS_ROW)
            return
        await self._row(m, change)

    async def _pull_follow(self, m: _Message, change: PullFollowChange) -> None:
        """The reader starts or stops merging an author in (or, its inbox not kept, a push author
        becomes pull or the other way)."""
        state, user_id = m.state, m.user_id
        if state.dropped:
            if change.op == "insert":
                state.push.discard(change.author_id)  # a push author now merged as a pull author
            elif await m.store.visible_among(user_id, (change.author_id,), timeout=m.budget):
                # still seen: a pull author turned push (or an unfollow whose visible row goes
                # later: its change takes the rows then)
                await self._join_push(m, change.author_id)
                return
        page = await self.reads.author_page(m.store, change.author_id, None, self.inbox_cap, m.budget)
        if change.op == "insert":
            await self._learn(m.store, user_id, _undecided(page, user_id, state), state, m.budget)
        for entry in page:
            shown = change.op == "insert" and state.shows(entry, user_id)
            if shown or change.op == "delete":
                m.note(AUTHOR_ROW, "insert" if shown else "delete", entry)
                m.unmerged.add(entry.tweet_id)

    async def _row(self, m: _Message, change: TimelineChange | AuthorChange | ExtrasChange) -> None:
        """A row of one of the reader's sources: noted as it is (the inbox's, the extras'), or as
        the plan shows it (an author's)."""
        state, sub = m.state, m.sub
        if state.dropped:
            if isinstance(change, TimelineChange):
                return  # the inbox is not kept: its rows are not the timeline's (docs/activity.md)
            if (isinstance(change, AuthorChange) and change.op != "delete"
                    and change.entry.author_id not in sub.authors and not state.holds(change.entry.tweet_id, AUTHOR_ROW)):
                return  # a row of an author no longer merged in (queued before it left): not shown
        if not state.fresh(change):
            return
        op, entry = change.op, change.entry
        if isinstance(change, AuthorChange) and not state.shows(entry, m.user_id):
            if op == "insert" and not state.holds(entry.tweet_id, AUTHOR_ROW):
                return  # a reply this reader is not shown: nothing to say
            op = "delete"  # an edit may have made it one: it leaves
        m.note(SOURCES[type(change)], op, entry)

    handlers: dict[type, Handler] = {
        PullReposterChange: _pull_reposter,
        UserRepostChange: _user_repost,
        HiddenChange: _hidden,
        VisibleChange: _visible,
        ExtrasChange: _extras,
        PullFollowChange: _pull_follow,
        TimelineChange: _row,
        AuthorChange: _row,
        ExcludedChange: _excluded_change,
        ListChange: _list_change,
    }  # type: ignore[dict-item]

    # -- a dropped inbox's push authors ------------------------------------------------------

    async def resync_push(self, hub: WatchHub, sub: Subscription, store: TimelineStore, state: WatchState,
                          budget: float) -> None:
        """After a gap, the push authors of a reader whose inbox is not kept read again (the catch-up
        that follows sends what they brought above the position)."""
        pull = sub.authors - state.push
        push = set(await self.reads.push_of(store, sub.user_id, pull, budget))
        for a in state.push - push:
            hub.unfollow(sub, a)
        state.push = push
        hub.follow(sub, sorted(push))

    async def _push_rows(self, store: TimelineStore, author: str, budget: float) -> list[Entry]:
        """A push author's newest rows (up to the cap) from the store itself, read after the watch
        follows it: every later change of it reaches the watch."""
        return await store.author_page(author, before=None, limit=self.inbox_cap, timeout=budget)

    async def _join_push(self, m: _Message, author: str) -> None:
        """A reader whose inbox is not kept merges ``author`` in as a push author: its rows the inbox
        would hold are noted (sent), its others (replies to third users) leave this source."""
        state = m.state
        state.push.add(author)
        m.hub.follow(m.sub, (author,))  # before the read: a change after it reaches the watch
        page = await self._push_rows(m.store, author, m.budget)
        ids = set()
        for entry in page:
            ids.add(entry.tweet_id)
            if state.shows(entry, m.user_id):
                m.note(AUTHOR_ROW, "insert", entry)
            else:  # held from this author as a pull author, or shown on a page the watch never heard of
                m.note(AUTHOR_ROW, "delete", entry)
                m.unmerged.add(entry.tweet_id)
        oldest = page[-1].cursor if len(page) >= self.inbox_cap else None
        for tid, held in list(state.held.items()):  # deleted while the watch did not follow it
            row = held.get(AUTHOR_ROW)
            if (row is not None and row.author_id == author and tid not in ids
                    and (oldest is None or row.cursor > oldest)):
                m.note(AUTHOR_ROW, "delete", row)

    async def _excluded(self, m: _Message, user: str) -> bool:
        """Whether a home reader sets ``user`` aside as a source (``reader_excluded``; a list's reader
        sets none aside): one read; later changes of it arrive as ``ExcludedChange``
        (:meth:`_excluded_change`)."""
        if m.state.rule is not None or list_of(m.user_id) is not None:
            return False
        return bool(await m.store.excluded_among(m.user_id, (user,), timeout=m.budget))

    async def _leave_push(self, m: _Message, author: str) -> None:
        """A reader whose inbox is not kept no longer sees push author ``author``: its rows leave
        (decided again from the store when no source the watch heard of holds them)."""
        state = m.state
        state.push.discard(author)
        m.hub.unfollow(m.sub, author)
        page = await self._push_rows(m.store, author, m.budget)
        held_rows = [h[AUTHOR_ROW] for h in list(state.held.values()) if AUTHOR_ROW in h and h[AUTHOR_ROW].author_id == author]
        for entry in [*page, *held_rows]:
            m.note(AUTHOR_ROW, "delete", entry)
            m.unmerged.add(entry.tweet_id)

    # -- repost rows, decided again ----------------------------------------------------------

    async def _redecide(self, m: _Message) -> None:
        """Decide again which repost row of each tweet of ``m.redecide`` the reader is shown, from
        the store (:func:`~feed_service.core.home_plan.shown_repost`), and note it (the extras' row
        or a pull reposter's; the other's held row leaves). A tweet shown directly instead (one of
        the reader's sources holds its direct row) is noted at its own time."""
        store, user_id, state, budget = m.store, m.user_id, m.state, m.budget
        tweets = m.redecide
        samples = {k: await _as_now(store, k, brought, budget) for k, brought in tweets.items()}
        users = {u for k, rows in tweets.items() for e in (samples[k], *rows.values())
                 for u in (e.author_id, e.in_reply_to_author_id) if u is not None and u != user_id}
        facts = await self.reads.repost_facts(store, user_id, sorted(m.sub.reposters),
                                              Lookups(frozenset(tweets), frozenset(tweets), frozenset(users)), budget,
                                              exact=True, rule=state.rule)
        for k, brought in sorted(tweets.items()):
            sample = samples[k]
            shown = shown_repost(sample, user_id, facts, state.rule)
            winner = None if shown is None else (EXTRAS_ROW if shown[0] == EXTRAS else REPOSTER_ROW, shown[1], shown[2])
            held = state.held.get(k[1], {})
            shown_direct: tuple[str, Entry] | None = None
            if winner is None:  # direct, if one of the reader's sources holds it: it shows at its own time
                shown_direct = next(((s, e) for s, e in held.items() if e.reposted_by is None), None)
                if shown_direct is None:
                    shown_direct = await self._direct_row(m, sample)
            for source in (EXTRAS_ROW, REPOSTER_ROW):
                row = held.get(source)
                if row is not None and row.reposted_by is not None and (
                        winner is None or (source, row.reposted_at, row.reposted_by) != winner):
                    if shown_direct is not None:
                        del held[source]  # replaced by the direct entry below
                        if not held:
                            del state.held[k[1]]
                    else:
                        m.note(source, "delete", row)
                    held = state.held.get(k[1], {})
            if shown_direct is not None:
                m.note(shown_direct[0], "insert", shown_direct[1])
                continue
            if winner is None:
                if not held:
                    # no row of it is shown, whether or not this watch heard of the one the client
                    # holds (its first page, a catch-up read): it leaves
                    m.note(REPOSTER_ROW, "delete", sample)
                continue
            source, at, p = winner
            row = held.get(source)
            mine = brought.get(EXTRAS_ROW if source == EXTRAS_ROW else f"r:{p}")
            if mine is not None and (mine.reposted_at, mine.reposted_by) == (at, p):
                m.note(source, "insert", mine)  # a change's own row: newest content
            elif row is None or (row.reposted_at, row.reposted_by) != (at, p):
                cursor = (at, k[1] + "\x00")  # the row at (at, tweet_id) is the newest below this
                rows = (await store.extras_page(user_id, before=cursor, limit=1, timeout=budget)
                        if source == EXTRAS_ROW
                        else await store.user_reposts_page(p, before=cursor, limit=1, timeout=budget))
                if not rows or rows[0].tweet_id != k[1] or rows[0].at != at:
                    continue  # gone since the lookups: its own change follows
                m.note(source, "insert", rows[0])

    async def _direct_row(self, m: _Message, sample: Entry) -> tuple[str, Entry] | None:
        """The tweet's direct row in the reader's sources as stored now, with its source: an author's
        timeline it merges in (if the plan's rule shows it), the inbox or the reader's extras (a
        reply shown for its parent). Decided from the rows, not from the visible set: each source
        writes its rows before it publishes their changes while the visible set is written by a
        later stage, so a row read here is one whose removal this watch will still hear of, and a
        row not here one whose arrival it will (docs/api.md#watch)."""
        store, user_id, state, budget = m.store, m.user_id, m.state, m.budget
        tid, cursor = sample.tweet_id, (sample.created_at, sample.tweet_id + "\x00")
        if sample.author_id in m.sub.authors:
            rows = await store.author_page(sample.author_id, before=cursor, limit=1, timeout=budget)
            if rows and rows[0].tweet_id == tid:
                await self._learn(store, user_id, _undecided(rows, user_id, state), state, budget)
                if state.shows(rows[0], user_id):
                    return AUTHOR_ROW, rows[0]
            if sample.author_id not in state.push:
                return None  # a pull author's replies reach no reader's extras
        if not state.dropped:  # an inbox not kept holds no row of the timeline
            rows = await store.page(user_id, before=cursor, limit=1, timeout=budget)
            if rows and rows[0].tweet_id == tid:
                return INBOX_ROW, rows[0]
        rows = await store.extras_page(user_id, before=cursor, limit=1, timeout=budget)
        if rows and rows[0].tweet_id == tid and rows[0].reposted_by is None:
            return EXTRAS_ROW, rows[0]
        return None

    async def _learn(self, store: TimelineStore, user_id: str, users: set[str], state: WatchState,
                     budget: float) -> None:
        """Note whether the reader sees each of ``users`` (one read for all: the cache's or the store's);
        a list's reader's owner too (what its ``followed`` policy reads)."""
        if users:
            seen = await self.reads.sees(store, user_id, users, budget)
            for u in users:
                state.sees.setdefault(u, u in seen)  # a visible-set change noted meanwhile is newer
            if state.rule is not None:
                owner_seen = await self.reads.sees(store, state.rule.owner, users, budget)
                for u in users:
                    state.owner_sees.setdefault(u, u in owner_seen)

    # -- a list's rule, decided again -------------------------------------------------------

    async def list_statics_changed(self, m: _Message) -> None:
        """The hook of a change of a list's reader's statics (its owner, its replies policy): the
        rule read again from the store (one read), the stream ended when the list no longer exists
        (NOT_FOUND) or has another owner (PERMISSION_DENIED), and the pull authors' rows decided
        again under a new policy. Called on each of the list's own changes (``ListChange``, which
        the hub routes to the list's reader: docs/api.md#lists)."""
        state = m.state
        owner = state.rule.owner  # type: ignore[union-attr]  # a list's watch has its rule
        rule = owned_rule(list_rule_of(await m.store.statics(m.user_id, timeout=m.budget)),
                          list_of(m.user_id) or m.user_id, owner)
        if rule == state.rule:
            return
        state.rule = rule
        state.owner_sees.clear()
        for author in sorted(m.sub.authors - state.push):  # their replies, decided by the new policy
            page = await self.reads.author_page(m.store, author, None, self.inbox_cap, m.budget)
            await self._learn(m.store, m.user_id, _undecided(page, m.user_id, state), state, m.budget)
            for entry in page:
                if state.deciding(entry, m.user_id) is not None:
                    m.note(AUTHOR_ROW, "insert" if state.shows(entry, m.user_id) else "delete", entry)
                    m.unmerged.add(entry.tweet_id)

    def token_field(self, user_id: str, state: WatchState) -> bytes:
        """The encoded resume token of the stream's position, minted again only when it moved."""
        position = state.position
        if position != state.token_at:
            token = self.tokens.encode_ascii(user_id, position, 0, KIND_WATCH) if position is not None else b""
            state.token_at, state.token = position, token_field(token)
        return state.token


def _cursor(entry: Entry) -> Cursor:
    return entry.cursor


async def _as_now(store: TimelineStore, k: TweetKey, brought: Brought, budget: float) -> Entry:
    """The tweet ``k`` as it is now: a row an upsert brought (the newest version), else one read, else
    the stored tweet (a deleted row's content may be older than the tweet's: an edit moves a row)."""
    upserts_of = [e for s, e in brought.items() if s not in (None, "-")]
    if upserts_of:
        return max(upserts_of, key=lambda e: e.version)
    if None in brought:
        return brought[None]
    live = await store.tweet(k[1], timeout=budget)
    return live if live is not None and live.author_id == k[0] else brought["-"]


def _undecided(rows: list[Entry], reader: str, state: WatchState) -> set[str]:
    return {u for e in rows if (u := state.undecided(e, reader)) is not None}
