"""Timeline reads of the hybrid fan-out: a home timeline is the user's inbox and per-reader entries
(``home_extras``: repost entries, replies shown for their parent) merged, at read time, with the
author timelines of the pull authors the user follows (docs/fan-out.md, docs/reposts-and-replies.md),
a pull author's reply to a third user only if the reader sees that user (:mod:`.pull_replies`), and
with the reposts of the pull reposters the reader sees, decided with its own repost entries
(:mod:`.pulled_reposts`). A user's own timeline is its author timeline merged with its reposts
(``user_reposts``).

Which sources a home timeline merges is its reader's home plan (:mod:`feed_service.core.home_plan`),
made from the static columns that come with the inbox slice (the pull authors, the pull reposters,
``inbox_dropped``); the sources' slices are merged by the plan's one merge
(:func:`~feed_service.core.home_plan.merge_home`): pages newest first, a watch's catch-up oldest
first, all by ``(Entry.at, tweet_id)``, so one cursor serves every source. Each source is read from
the read cache while the view's change topic keeps it exact (docs/api.md#read-cache), else from the
store, with pull authors' heads through the process's TTL'd :class:`.pull_sources.PullSources`.

A reader whose inbox is not kept (the static ``inbox_dropped``, which comes with the inbox slice)
has its inbox replaced by its push authors' author timelines, read like pull authors' and cut by the
inbox's rule (docs/activity.md#exact-reads-without-an-inbox).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Awaitable, Callable, Collection

from feed_service.core.home_plan import HomePlan, HomeStatics, home_plan, merge_home
from feed_service.core.list_readers import list_of
from feed_service.core.rules import push_authors
from feed_service.core.per_reader.pull_reposts import ListRule, Lookups, RepostFacts
from feed_service.core.rows import Cursor, Entry
from feed_service.core.timeline_merge import merge_newest
from feed_service.server.change_feed import ChangeFeed
from feed_service.server.pull_replies import has_replies, inbox_slices, list_shown_slices, shown_slices
from feed_service.server.pull_sources import PullSources
from feed_service.server.pulled_reposts import decided_slices
from feed_service.server.read_cache import HomeSlice, ReadCache, Sources
from feed_service.store.ports import InboxSlice, TimelineStore


class TimelineReads:
    """Home and author timelines of one server, merged from their sources."""

    def __init__(self, pull: PullSources) -> None:
        self.pull = pull
        #: the view's change topic, once consumed (:meth:`attach`), and the exact cache it keeps
        self.feed: ChangeFeed | None = None
        self.read_cache: ReadCache | None = None

    def attach(self, feed: ChangeFeed, read_cache: ReadCache | None) -> None:
        """Read through ``read_cache`` (None: no read cache) while ``feed`` is live."""
        self.feed, self.read_cache = feed, read_cache

    def pushed(self) -> bool:
        """Whether the change topic is live: watches are pushed, and read what they send exactly."""
        return self.feed is not None and self.feed.live

    def live_cache(self) -> ReadCache | None:
        cache = self.read_cache
        return cache if cache is not None and cache.usable else None

    def reposts_page(self, store: TimelineStore, user_id: str, before: Cursor | None, limit: int,
                     budget: float) -> Awaitable[list[Entry]]:
        """A user's own reposts of others' tweets (``user_reposts``), newest first: from the read cache
        when it holds them."""
        cache = self.live_cache()
        if cache is not None:
            return cache.rows("reposts", user_id, limit, before,
                              lambda n: store.user_reposts_page(user_id, before=before, limit=n, timeout=budget))
        return store.user_reposts_page(user_id, before=before, limit=limit, timeout=budget)

    async def repost_facts(self, store: TimelineStore, reader: str, reposters: list[str], need: Lookups,
                           budget: float, *, exact: bool = False, rule: ListRule | None = None) -> RepostFacts:
        """The facts that decide a reader's repost rows (:mod:`.pulled_reposts`), looked up together;
        ``exact``: the visible sets from the store, not the read cache's memberships (which follow the
        change topic's partitions, each at its own pace: a pushed watch decides by the store's rows).
        A home reader's ``excluded`` come from ``reader_excluded``; a list's reader (``rule``) has its
        ``hidden`` and ``owner_sees`` looked up in its owner's ``reader_hidden`` and ``reader_visible``
        (docs/lists.md#in-the-engine)."""
        async def nothing(value):  # type: ignore[no-untyped-def]
            return value

        def visible(who: str) -> Awaitable[set[str]]:
            if not users:
                return nothing(set())
            return store.visible_among(who, users, timeout=budget) if exact else self.sees(store, who, users, budget)

        users = need.users
        hider = reader if rule is None else rule.owner
        pulled, pushed, sees, hidden, other = await asyncio.gather(
            store.reposts_of(need.pulled, reposters, timeout=budget) if need.pulled and reposters else nothing({}),
            store.pushed_reposts(reader, need.pushed, timeout=budget) if need.pushed else nothing({}),
            visible(reader),
            store.hidden_among(hider, users, timeout=budget) if users else nothing(set()),
            (store.excluded_among(reader, users, timeout=budget) if users else nothing(set())) if rule is None
            else visible(rule.owner))
        if rule is None:
            return RepostFacts(pulled, pushed, sees, hidden, excluded=other)
        return RepostFacts(pulled, pushed, sees, hidden, owner_sees=other)

    async def _with_pull_reposts(
            self, store: TimelineStore, user_id: str, plan: HomePlan, extras: list[Entry], limit: int,
            budget: float, *, first: Callable[[str], Awaitable[list[Entry]]],
            extras_next: Callable[[Cursor, int], Awaitable[list[Entry]]],
            reposts_next: Callable[[str, Cursor, int], Awaitable[list[Entry]]]) -> tuple[list[Entry], list[list[Entry]]]:
        """The extras slice and the pull reposters' slices (``first`` of each), cut to the rows the
        reader is shown (:mod:`.pulled_reposts`), reading on with ``extras_next``/``reposts_next``."""
        reposters, rule = plan.pull_reposters, plan.list_rule
        reposted = list(await asyncio.gather(*(first(p) for p in reposters)))
        return await decided_slices(
            user_id, extras, reposters, reposted, limit,
            lambda need: self.repost_facts(store, user_id, list(reposters), need, budget, rule=rule),
            lambda i, cursor, n: extras_next(cursor, n) if i == 0 else reposts_next(reposters[i - 1], cursor, n),
            rule)

    def cached_home_page(self, user_id: str, before: Cursor | None, limit: int,
                         rule: ListRule | None = None) -> tuple[list[Entry], Sources, int] | None:
        """:meth:`home_page` when the read cache holds every source: the rows, the pull authors'
        heads they came from and the inbox head's stamp (what an encoded page depends on); no
        await, no task. None when some source is not cached (or no cache is live). A list's reader
        (``rule``) is served so only while it merges no pull author in: the cache decides a pull
        author's replies by a home reader's rule."""
        cache = self.live_cache()
        if cache is None:
            return None
        got = cache.home_rows(user_id, limit, before, pull_authors=rule is None)
        if got is None:
            return None
        sources, authors, stamp = got
        return merge_home(sources, limit), authors, stamp

    async def sees(self, store: TimelineStore, user_id: str, users: Collection[str], budget: float) -> set[str]:
        """Those of ``users`` that ``user_id`` sees: through the exact cache's memberships, else the store."""
        cache = self.live_cache()
        if cache is not None:
            return await cache.sees(user_id, users, lambda u: store.visible_among(user_id, u, timeout=budget))
        return await store.visible_among(user_id, users, timeout=budget)

    async def _own_rows(self, store: TimelineStore, user_id: str, before: Cursor | None, limit: int,
                        budget: float) -> HomeSlice:
        """The inbox slice (with the pull authors) and the extras slice from one cursor, read together."""
        inbox, extras = await asyncio.gather(store.inbox(user_id, before=before, limit=limit, timeout=budget),
                                             store.extras_page(user_id, before=before, limit=limit, timeout=budget))
        return HomeSlice(inbox, extras)

    async def author_slices(self, store: TimelineStore, authors: list[str], before: Cursor | None, limit: int,
                            budget: float) -> list[list[Entry]]:
        """Each author's ``limit`` newest rows older than ``before``, newest first, concurrently: from
        the read cache's heads, else the TTL'd pull sources' (a pull author's, or a push author's of a
        reader whose inbox is not kept)."""
        if not authors:
            return []
        cache = self.live_cache()
        if cache is None:
            return await self.pull.pages(store, authors, before=before, limit=limit, timeout=budget)
        return list(await asyncio.gather(*(
            cache.rows("author", a, limit, before, lambda n, a=a: store.author_page(a, before=before, limit=n,
                                                                                    timeout=budget))
            for a in authors)))

    async def push_of(self, store: TimelineStore, user_id: str, pull: Collection[str], budget: float) -> list[str]:
        """The push authors of ``user_id``'s dropped inbox: the users it sees less its ``pull`` authors
        and, for a home reader, the sources it sets aside (``reader_excluded``; a list's reader sets
        none aside): :func:`~feed_service.core.rules.push_authors`."""
        visible = await store.visible_users(user_id, timeout=budget)
        excluded: set[str] = set()
        if visible and list_of(user_id) is None:
            excluded = await store.excluded_among(user_id, visible, timeout=budget)
        return push_authors(visible, pull, excluded)

    def pulled_shown(self, store: TimelineStore, user_id: str, plan: HomePlan, pulled: list[list[Entry]],
                     limit: int, budget: float,
                     further: Callable[[int, Cursor, int], Awaitable[list[Entry]]]) -> Awaitable[list[list[Entry]]]:
        """The pull authors' slices cut to the rows the plan shows: a home reader's replies to third
        users it sees (:func:`.pull_replies.shown_slices`), a list's reader's replies its rule admits
        (:func:`.pull_replies.list_shown_slices`)."""
        rule = plan.list_rule
        if rule is None:
            return shown_slices(user_id, pulled, limit, lambda users: self.sees(store, user_id, users, budget), further)
        return list_shown_slices(rule, pulled, limit, lambda users: self.sees(store, user_id, users, budget),
                                 lambda users: self.sees(store, rule.owner, users, budget), further)

    async def home_page(self, store: TimelineStore, user_id: str, before: Cursor | None, limit: int,
                        budget: float, rule: ListRule | None = None,
                        owner_check: Callable[[ListRule | None], ListRule] | None = None) -> list[Entry]:
        """Up to ``limit`` entries of the home timeline older than ``before``, newest first: the
        inbox and extras slices merged with the pull authors the user follows. Two concurrent store
        reads when the user follows no pull author (the inbox slice brings the list), more only for
        pull authors' heads and, if they hold replies to third users, the reader's visible set.

        A reader whose inbox is not kept (the static ``inbox_dropped``, read with the slice) has its
        inbox rows computed instead from the author timelines of its push authors
        (:meth:`dropped_inbox`, docs/activity.md). A list's reader's rows merged at read are decided
        by the list's ``rule`` (its statics, read by the caller's owner check: a cached slice has none);
        ``owner_check`` instead: the rule its statics hold, read with the slice, is checked by it (which
        raises for a caller who may not read the list) before anything else is read."""
        cache = self.live_cache()
        if cache is None:
            got = await self._own_rows(store, user_id, before, limit, budget)
        else:
            got = await cache.home(user_id, limit, before, lambda n: self._own_rows(store, user_id, before, n, budget))
        inbox = got.inbox
        if inbox.pull_authors is None or inbox.pull_reposters is None or inbox.inbox_dropped is None:
            # nothing below the cursor came back, so neither did the static columns: one read of them
            inbox = (await store.statics(user_id, timeout=budget))._replace(entries=inbox.entries)
        if rule is None and inbox.list_owner is None and list_of(user_id) is not None:
            # a list's reader whose rule the caller did not give (a watch's head) and the cache's
            # slice does not carry: one read of its statics
            rule = list_rule_of(await store.statics(user_id, timeout=budget))
        if owner_check is not None:
            rule = owner_check(rule if rule is not None else list_rule_of(inbox))
        plan = home_plan(user_id, statics_of(inbox, rule))
        authors = plan.pull_authors
        if plan.dropped:
            own: list[Entry] = []  # rows an inbox not kept may still hold are stale: ignored
            pushed, pulled = await asyncio.gather(
                self.dropped_inbox(store, user_id, authors, before, limit, budget),
                self.author_slices(store, authors, before, limit, budget))
        else:
            own, pushed, pulled = inbox.entries, [], await self.author_slices(store, authors, before, limit, budget)
        if any(has_replies(rows) for rows in pulled):
            pulled = await self.pulled_shown(
                store, user_id, plan, pulled, limit, budget,
                lambda i, cursor, n: store.author_page(authors[i], before=cursor, limit=n, timeout=budget))
        extras, reposted = got.extras, []
        if plan.decides_reposts:
            extras, reposted = await self._with_pull_reposts(
                store, user_id, plan, extras, limit, budget,
                first=lambda p: self.reposts_page(store, p, before, limit, budget),
                extras_next=lambda cursor, n: store.extras_page(user_id, before=cursor, limit=n, timeout=budget),
                reposts_next=lambda p, cursor, n: store.user_reposts_page(p, before=cursor, limit=n, timeout=budget))
        return merge_home((own, *pushed, extras, *pulled, *reposted), limit)

    async def dropped_inbox(self, store: TimelineStore, user_id: str, pull: list[str], before: Cursor | None,
                            limit: int, budget: float) -> list[list[Entry]]:
        """The inbox of a reader whose inbox is not kept, as slices of ``limit`` rows older than
        ``before``: each push author's (the users the reader sees less its ``pull`` authors) rows that
        the inbox would hold, read on past its replies to third users (docs/activity.md). One read of
        the visible set, then one slice per push author (from the heads :meth:`author_slices` keeps).
        The cost is bounded by the users the reader sees (docs/activity.md#exact-reads-without-an-inbox)."""
        push = await self.push_of(store, user_id, pull, budget)
        slices = await self.author_slices(store, push, before, limit, budget)
        if any(has_replies(rows) for rows in slices):
            slices = await inbox_slices(
                user_id, slices, limit,
                lambda i, cursor, n: store.author_page(push[i], before=cursor, limit=n, timeout=budget))
        return [rows for rows in slices if rows]

    def author_page(self, store: TimelineStore, author_id: str, before: Cursor | None, limit: int,
                    budget: float) -> Awaitable[list[Entry]]:
        """An author's own tweets, newest first: from the read cache or the TTL'd pull sources."""
        cache = self.live_cache()
        if cache is not None:
            return cache.rows("author", author_id, limit, before,
                              lambda n: store.author_page(author_id, before=before, limit=n, timeout=budget))
        return self.pull.page(store, author_id, before=before, limit=limit, timeout=budget)

    async def user_page(self, store: TimelineStore, user_id: str, before: Cursor | None, limit: int,
                        budget: float) -> list[Entry]:
        """A user's own timeline (GetUserTimeline), newest first: its tweets merged with its reposts
        of others' tweets, both from the read cache when it holds them."""
        cache = self.live_cache()
        if cache is not None:
            reposts = cache.rows("reposts", user_id, limit, before,
                                 lambda n: store.user_reposts_page(user_id, before=before, limit=n, timeout=budget))
        else:
            reposts = store.user_reposts_page(user_id, before=before, limit=limit, timeout=budget)
        own, reposted = await asyncio.gather(self.author_page(store, user_id, before, limit, budget), reposts)
        return merge_newest([own, reposted], limit) if reposted else own

    async def home_newer(self, store: TimelineStore, user_id: str, after: Cursor | None, limit: int,
                         budget: float) -> list[Entry]:
        """Up to ``limit`` entries of the home timeline newer than ``after``, oldest first: the inbox,
        the extras and the pull authors the user follows now. The static columns are read first, in
        one read (what a pushed watch reads must be no older than its subscription): they say which
        authors to merge and whether the inbox is kept; a reader whose inbox is not kept has it
        computed from its push authors' timelines instead (docs/activity.md)."""
        pushed = self.pushed()
        plan = home_plan(user_id, statics_of(await store.statics(user_id, timeout=budget)))  # a list's rule too
        authors = plan.pull_authors
        # A pushed watch catches up from the store itself: the TTL'd heads may predate its subscription.
        newer = store.author_newer if pushed else functools.partial(self.pull.newer, store)
        push: list[str] = []
        if plan.dropped:
            push = await self.push_of(store, user_id, authors, budget)

            async def nothing() -> list[Entry]:
                return []
            own_rows = nothing()  # stale rows of an inbox not kept are ignored
        else:
            own_rows = store.newer(user_id, after=after, limit=limit, timeout=budget)
        own, extras, *slices = await asyncio.gather(
            own_rows, store.extras_newer(user_id, after=after, limit=limit, timeout=budget),
            *(newer(a, after=after, limit=limit, timeout=budget) for a in (*authors, *push)))
        pulled, pushed_rows = slices[:len(authors)], slices[len(authors):]
        if any(has_replies(rows) for rows in pulled):
            pulled = await self.pulled_shown(
                store, user_id, plan, pulled, limit, budget,
                lambda i, cursor, n: store.author_newer(authors[i], after=cursor, limit=n, timeout=budget))
        if any(has_replies(rows) for rows in pushed_rows):
            pushed_rows = await inbox_slices(
                user_id, pushed_rows, limit,
                lambda i, cursor, n: store.author_newer(push[i], after=cursor, limit=n, timeout=budget))
        reposted: list[list[Entry]] = []
        if plan.decides_reposts:
            extras, reposted = await self._with_pull_reposts(
                store, user_id, plan, extras, limit, budget,
                first=lambda p: store.user_reposts_newer(p, after=after, limit=limit, timeout=budget),
                extras_next=lambda cursor, n: store.extras_newer(user_id, after=cursor, limit=n, timeout=budget),
                reposts_next=lambda p, cursor, n: store.user_reposts_newer(p, after=cursor, limit=n, timeout=budget))
        return merge_home((own, *pushed_rows, extras, *pulled, *reposted), limit, oldest_first=True)


def list_rule_of(inbox: InboxSlice) -> ListRule | None:
    """The rule of a list's reader from its statics (``list_owner``, ``list_policy``); None for a
    user's partition or a list that does not exist."""
    if inbox.list_owner is None:
        return None
    return ListRule(inbox.list_owner, inbox.list_policy or "list")


def statics_of(inbox: InboxSlice, rule: ListRule | None = None) -> HomeStatics:
    """The home plan's statics from an inbox slice's static columns (read with it, or alone); a
    list's reader's ``rule`` given, or read from the slice's statics."""
    return HomeStatics(inbox.pull_authors or (), inbox.pull_reposters or (), bool(inbox.inbox_dropped),
                       rule if rule is not None else list_rule_of(inbox))
