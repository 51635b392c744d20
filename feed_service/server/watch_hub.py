"""Routes the view's changes to the open WatchHomeTimeline streams of one server process.

A watch subscribes before it reads anything from Cassandra, so a change published while it catches
up waits in its subscription instead of being missed; after that it reads nothing while nothing
changes (docs/api.md#watch). A subscription receives the changes of its user's inbox rows and
``home_extras`` rows, of the pull authors the user merges in (kept current by the user's pull-follow
changes), the user's pull-follow changes themselves and the changes of the user's visible set
(which decide a pull author's replies); likewise the reposts of the pull reposters the user merges
in (kept current by its pull-reposter changes) and the changes of its hidden set; a gap in the changes (:meth:`WatchHub.gap`) tells every
subscription to catch up from Cassandra again.

Until a subscription is started (:meth:`WatchHub.start` names its pull authors) every pull author's
change may concern it. Those changes go to one log shared by all starting subscriptions
(:class:`_Starting`), so that a reconnect storm of starting watches costs each change one
append, not one per starting watch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Iterable

from feed_service.core.list_readers import list_reader
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
    ViewChange,
    VisibleChange,
)
from feed_service.server.change_feed import Consumed

#: Marker queued to every subscription on a gap in the changes.
RESYNC = object()


class Subscription:
    """One watch's queue of changes (and :data:`RESYNC` markers), and the pull authors it follows."""

    __slots__ = ("user_id", "authors", "items", "ready", "early_follows", "early_from", "expired", "reposters",
                 "early_reposters", "owner")

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id
        self.authors: set[str] = set()
        #: the pull reposters the user merges in, and their changes that came before it started
        self.reposters: set[str] = set()
        self.early_reposters: dict[str, str] | None = {}
        #: pull-follow changes that arrived before the watch read its pull authors (:meth:`WatchHub.start`)
        self.early_follows: dict[str, str] | None = {}
        #: where the hub's log of pull authors' changes stood when it subscribed; None once started
        self.early_from: int | None = None
        #: the stream's deadline has passed (:meth:`expire`)
        self.expired = False
        self.items: list[object] = []
        self.ready = asyncio.Event()
        #: a list's watch: the list's owner, whose visible and hidden sets decide its rows too
        self.owner: str | None = None

    def put(self, item: object) -> None:
        self.items.append(item)
        self.ready.set()

    def drain(self) -> list[object]:
        items, self.items = self.items, []
        self.ready.clear()
        return items

    def expire(self) -> None:
        """The stream's deadline passed: wake it, to end with DEADLINE_EXCEEDED (one timer per stream)."""
        self.expired = True
        self.ready.set()


class _Starting:
    """The subscriptions not started yet, and the pull authors' changes routed meanwhile, in order,
    held once for all of them: each subscription notes the log's end when it subscribes and takes
    what follows when it starts. The head no starting subscription needs any more is dropped (in
    halves, so that trimming costs O(1) per change). Its length is the number of starting
    subscriptions."""

    __slots__ = ("changes", "base", "waiting", "count")

    def __init__(self) -> None:
        self.changes: list[AuthorChange] = []
        #: the position of ``changes[0]`` since the hub began
        self.base = 0
        #: starting subscriptions in subscription order (so in order of ``early_from``), started ones
        #: left in place until they reach the front
        self.waiting: deque[Subscription] = deque()
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def enter(self, sub: Subscription) -> None:
        sub.early_from = self.base + len(self.changes)
        self.waiting.append(sub)
        self.count += 1

    def leave(self, sub: Subscription) -> list[AuthorChange]:
        """The changes logged since ``sub`` entered (none if it is not starting); it no longer waits."""
        mark = sub.early_from
        if mark is None:
            return []
        held = self.changes[mark - self.base:]
        sub.early_from = None
        self.count -= 1
        waiting = self.waiting
        while waiting and waiting[0].early_from is None:
            waiting.popleft()
        if not waiting:
            self.base += len(self.changes)
            self.changes = []
        else:
            drop = waiting[0].early_from - self.base
            if drop and drop * 2 >= len(self.changes):
                del self.changes[:drop]
                self.base += drop
        return held


class WatchHub:
    """Subscriptions by user and by pull author; :meth:`route` hands each change to its watchers."""

    def __init__(self) -> None:
        self._by_user: dict[str, set[Subscription]] = {}
        self._by_author: dict[str, set[Subscription]] = {}
        self._by_reposter: dict[str, set[Subscription]] = {}
        self._by_owner: dict[str, set[Subscription]] = {}
        self._starting = _Starting()
        #: batches routed so far: what the watchers woken by one batch share is valid for that batch
        self.deliveries = 0

    def __len__(self) -> int:
        return sum(len(s) for s in self._by_user.values())

    def subscribe(self, user_id: str) -> Subscription:
        """A new subscription: from now on its user's changes are queued to it; until :meth:`start`
        names its pull authors, every pull author's change is held for it too."""
        sub = Subscription(user_id)
        self._by_user.setdefault(user_id, set()).add(sub)
        self._starting.enter(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._starting.leave(sub)
        _discard(self._by_user, sub.user_id, sub)
        for author in sub.authors:
            _discard(self._by_author, author, sub)
        sub.authors = set()
        for reposter in sub.reposters:
            _discard(self._by_reposter, reposter, sub)
        sub.reposters = set()
        if sub.owner is not None:
            _discard(self._by_owner, sub.owner, sub)
            sub.owner = None

    def watch_owner(self, sub: Subscription, owner: str) -> None:
        """``sub`` watches a list of ``owner``: the owner's visible and hidden sets' changes are
        queued to it too (its list's rule decides rows by them, docs/lists.md)."""
        if sub.owner is not None:
            _discard(self._by_owner, sub.owner, sub)
        sub.owner = owner
        self._by_owner.setdefault(owner, set()).add(sub)

    def start(self, sub: Subscription, authors: Iterable[str]) -> None:
        """Set the pull authors ``sub``'s user merges in, as read after subscribing; the pull-follow
        changes that arrived since the subscription are newer than or equal to that read, so they
        apply on top of it. The pull authors' tweet changes held since the subscription are queued
        for those authors it merges in."""
        self.follow(sub, authors)
        early, sub.early_follows = sub.early_follows or {}, None
        for author, op in early.items():
            if op == "insert":
                self.follow(sub, (author,))
            else:
                self.unfollow(sub, author)
        # the held tweet changes of the authors it merges in go first: they arrived before anything
        # routed to it through those authors from now on (the queue's other items are other rows)
        followed = sub.authors
        kept = [c for c in self._starting.leave(sub) if c.entry.author_id in followed]
        if kept:
            sub.items[:0] = kept
            sub.ready.set()

    def start_reposters(self, sub: Subscription, reposters: Iterable[str]) -> None:
        """Set the pull reposters ``sub``'s user merges in, as read after subscribing, then the
        pull-reposter changes that came since (newer than or equal to that read). A starting
        subscription receives every repost change meanwhile (the watch keeps those of its reposters)."""
        for reposter in reposters:
            self._set_reposter(sub, reposter, True)
        early, sub.early_reposters = sub.early_reposters or {}, None
        for reposter, op in early.items():
            self._set_reposter(sub, reposter, op == "insert")

    def _set_reposter(self, sub: Subscription, reposter: str, merged: bool) -> None:
        if merged and reposter not in sub.reposters:
            sub.reposters.add(reposter)
            self._by_reposter.setdefault(reposter, set()).add(sub)
        elif not merged and reposter in sub.reposters:
            sub.reposters.discard(reposter)
            _discard(self._by_reposter, reposter, sub)

    def follow(self, sub: Subscription, authors: Iterable[str]) -> None:
        """``sub``'s user merges these pull authors in: their tweets' changes reach it."""
        for author in authors:
            if author not in sub.authors:
                sub.authors.add(author)
                self._by_author.setdefault(author, set()).add(sub)

    def unfollow(self, sub: Subscription, author: str) -> None:
        if author in sub.authors:
            sub.authors.discard(author)
            _discard(self._by_author, author, sub)

    def route(self, batch: list[Consumed]) -> None:
        """Queue every change of ``batch`` to the subscriptions it concerns, in order."""
        by_user, by_author = self._by_user, self._by_author
        if not by_user:
            return
        self.deliveries += 1
        starting = self._starting
        for consumed in batch:
            change = consumed.change
            if isinstance(change, TimelineChange):
                for t in change.timeline_ids:
                    subs = by_user.get(t)
                    if subs:
                        self._put(subs, change)
            elif isinstance(change, AuthorChange):
                subs = by_author.get(change.entry.author_id)
                if subs:
                    self._put(subs, change)
                if starting.count:
                    starting.changes.append(change)
            elif isinstance(change, ExtrasChange):
                subs = by_user.get(change.timeline_id)
                if subs:
                    self._put(subs, change)
            elif isinstance(change, (VisibleChange, HiddenChange, ExcludedChange)):
                subs = by_user.get(change.reader_id)
                if subs:
                    self._put(subs, change)
                owned = self._by_owner.get(change.reader_id) if not isinstance(change, ExcludedChange) else None
                if owned:  # the watches of the reader's lists
                    self._put(owned, change)
            elif isinstance(change, ListChange):  # to the watches of the list's reader
                subs = by_user.get(list_reader(change.list_id))
                if subs:
                    self._put(subs, change)
            elif isinstance(change, UserRepostChange):
                subs = self._by_reposter.get(change.entry.reposted_by)  # type: ignore[arg-type]
                if starting.count:  # a starting watch may merge this reposter in: it decides
                    subs = (subs or set()) | {s for s in starting.waiting if s.early_from is not None}
                if subs:
                    self._put(subs, change)
            elif isinstance(change, PullReposterChange):
                subs = by_user.get(change.timeline_id)
                if subs:
                    for sub in list(subs):
                        if sub.early_reposters is not None:
                            sub.early_reposters[change.reposter_id] = change.op
                        else:
                            self._set_reposter(sub, change.reposter_id, change.op == "insert")
                    self._put(subs, change)
            elif isinstance(change, PullFollowChange):
                for f in change.follower_ids:
                    subs = by_user.get(f)
                    if subs:
                        for sub in list(subs):
                            if sub.early_follows is not None:
                                sub.early_follows[change.author_id] = change.op
                            elif change.op == "insert":
                                self.follow(sub, (change.author_id,))
                            else:
                                self.unfollow(sub, change.author_id)
                        self._put(subs, change)

    def _put(self, subs: set[Subscription], change: ViewChange) -> None:
        for sub in subs:
            sub.put(change)

    def wake_all(self) -> None:
        """Wake every subscription (the server is stopping: each watch sees that and ends)."""
        for subs in self._by_user.values():
            for sub in subs:
                sub.ready.set()

    def gap(self) -> None:
        """Changes were lost: every subscription catches up from Cassandra."""
        for subs in self._by_user.values():
            for sub in subs:
                sub.put(RESYNC)


def _discard(index: dict[str, set[Subscription]], key: str, sub: Subscription) -> None:
    subs = index.get(key)
    if subs is not None:
        subs.discard(sub)
        if not subs:
            del index[key]
