"""The cached heads of the read cache (:mod:`.read_cache`): the newest rows of one timeline-shaped
table, exact down to the oldest row held, changed in place by the view's changes.

An inbox head also holds what its reader's home plan is made of (its pull authors and pull
reposters: :meth:`TimelineHead.home_plan`), the head of its ``home_extras``, the memberships of its
visible set it was asked about, and encoded pages (docs/api.md#read-cache).
"""

from __future__ import annotations

import bisect
import itertools
from typing import Hashable, NamedTuple

from feed_service.core.events import content_beats
from feed_service.core.home_plan import HomePlan, HomeStatics, home_plan
from feed_service.core.rows import Cursor, Entry
from feed_service.core.view_changes import PullFollowChange, PullReposterChange, VisibleChange
from feed_service.store.ports import InboxSlice

CacheKey = tuple[str, str]
"""("home", user) | ("author", author) | ("reposts", user): an inbox (with its extras), an author
timeline, a user's own reposts."""
PageKey = Hashable
"""What identifies an encoded page of one timeline: the request's page token and page size."""
Sources = tuple[tuple[CacheKey, "TimelineHead", int], ...]
"""The pull authors' heads a page was merged from, with their stamps then."""


#: Stamps of heads: unique across the process, so a refilled head never takes an old head's stamp.
_stamps = itertools.count(1)


def newer_content(new: Entry, old: Entry) -> bool:
    """Whether ``new`` is a newer content of the tweet row ``old`` than ``old``, as the author key
    decides (:func:`~feed_service.core.events.content_beats`): a higher version, or a different
    payload at the same version with the greater digest (a same-version tie)."""
    if new.version != old.version:
        return new.version > old.version
    return new != old and content_beats(_content(new), _content(old))


def _content(e: Entry) -> tuple:
    if e.in_reply_to_tweet_id is None:
        return (e.version, e.created_at, e.text, e.profile_version)
    return (e.version, e.created_at, e.text, e.profile_version, e.in_reply_to_tweet_id, e.in_reply_to_author_id)


class HomeSlice(NamedTuple):
    """A slice of a home timeline's own rows: the inbox with the pull authors, and the reader's
    ``home_extras`` from the same cursor (two reads of two partitions, made together)."""

    inbox: InboxSlice
    extras: list[Entry]


class TimelineHead:
    """The newest rows of one timeline-shaped table, exact down to the oldest row held (or whole,
    when ``complete``: its read returned fewer rows than it asked for). Kept oldest first, so that
    positions bisect on the cursors ``(Entry.at, tweet_id)`` themselves. Rows are identified by
    position, as Cassandra's are: a move is a delete at the old position and an insert at the new
    one, which apply in either order (a read between the two writes may see both rows).

    An inbox head also holds its user's pull authors (``pull``; None when filled without them) and
    pull reposters (``reposters``), the head of the user's ``home_extras`` (``extras``), the users
    the reader is known to see or not (``sees``: what decides a pull author's replies) and encoded
    pages (``pages``)."""

    __slots__ = ("rows", "cursors", "complete", "depth", "pull", "stamp", "pages", "extras", "sees", "sees_epoch",
                 "replies", "reposters", "checked", "plan")

    def __init__(self, newest_first: list[Entry], depth: int, pull: set[str] | None = None,
                 extras: "TimelineHead | None" = None, reposters: set[str] | None = None,
                 checked: float = 0.0) -> None:
        self.depth = depth
        self.complete = len(newest_first) < depth
        self.rows = list(reversed(newest_first[:depth]))
        self.cursors = [e.cursor for e in self.rows]
        #: rows held that are replies: a pull author's head without any needs no reply rule on a hit
        self.replies = sum(1 for e in self.rows if e.in_reply_to_author_id is not None)
        self.pull = pull
        self.stamp = next(_stamps)
        self.pages: dict[PageKey, tuple[Sources, bytes]] = {}
        self.extras = extras
        self.sees: dict[str, bool] | None = None
        #: bumped by every visible-set change of the reader: a membership read that a change
        #: overtook is not kept
        self.sees_epoch = 0
        self.reposters = reposters
        #: an inbox head: when the read that saw the reader's ``inbox_dropped`` false started
        self.checked = checked
        #: the reader's home plan from ``pull`` and ``reposters``, made on first use after they change
        self.plan: HomePlan | None = None

    def home_plan(self, reader: str) -> HomePlan | None:
        """The home plan of this inbox head's reader (its inbox kept, as a head is only of a kept
        inbox), or None while its pull authors or pull reposters are not known."""
        plan = self.plan
        if plan is None and self.pull is not None and self.reposters is not None:
            plan = self.plan = home_plan(reader, HomeStatics(tuple(sorted(self.pull)), tuple(sorted(self.reposters))))
        return plan

    def changed(self) -> None:
        """Something this head holds changed: a new stamp, and its encoded pages are gone."""
        self.stamp = next(_stamps)
        if self.pages:
            self.pages = {}

    def follow(self, change: PullFollowChange) -> None:
        """A change of the user's pull authors (an inbox head filled with them)."""
        if self.pull is None:
            return
        if change.op == "insert":
            self.pull.add(change.author_id)
        else:
            self.pull.discard(change.author_id)
        self.plan = None
        self.changed()

    def follow_reposter(self, change: PullReposterChange) -> None:
        """A change of the user's pull reposters (an inbox head filled with them)."""
        if self.reposters is None:
            return
        (self.reposters.add if change.op == "insert" else self.reposters.discard)(change.reposter_id)
        self.plan = None
        self.changed()

    def first(self, n: int, before: Cursor | None = None) -> list[Entry] | None:
        """The ``n`` newest rows older than ``before``, newest first, or None when the head cannot say."""
        end = len(self.rows) if before is None else bisect.bisect_left(self.cursors, before)
        if end < n and not self.complete:
            return None
        start = max(0, end - n)
        return self.rows[start:end][::-1]

    def newest_first(self) -> list[Entry]:
        return self.rows[::-1]

    def below(self, before: Cursor | None) -> list[Entry]:
        """Every row held older than ``before``, newest first."""
        end = len(self.rows) if before is None else bisect.bisect_left(self.cursors, before)
        return self.rows[end - 1::-1] if end else []

    def _below(self, cursor: Cursor) -> bool:
        """Whether ``cursor`` lies below what the head knows (older than its oldest row, not complete)."""
        return not self.complete and (not self.cursors or cursor < self.cursors[0])

    def _held(self, cursor: Cursor) -> int:
        """The index of the row at ``cursor``, or -1."""
        i = bisect.bisect_left(self.cursors, cursor)
        return i if i < len(self.cursors) and self.cursors[i] == cursor else -1

    def apply(self, op: str, entry: Entry) -> None:
        """One change of one row (the row at ``entry``'s position), in order."""
        self.changed()
        cursor = entry.cursor
        i = self._held(cursor)
        if i >= 0:
            self._drop(i)
            if op == "delete":
                return
        elif op == "delete" or self._below(cursor):
            return
        i = bisect.bisect_left(self.cursors, cursor)
        self.rows.insert(i, entry)
        self.cursors.insert(i, cursor)
        self.replies += entry.in_reply_to_author_id is not None
        if len(self.rows) > self.depth:
            self._drop(0)
            self.complete = False

    def _drop(self, i: int) -> None:
        self.replies -= self.rows[i].in_reply_to_author_id is not None
        del self.rows[i], self.cursors[i]

    @property
    def empty_and_unknown(self) -> bool:
        """Nothing held and not known to be empty: useless until refilled."""
        return not self.rows and not self.complete

    def settles(self, op: str, entry: Entry, *, versioned: bool = True) -> bool:
        """Apply a change published while this head's read ran, if its result cannot be older than
        the read; False when it could be (the fill must then be dropped). ``versioned``: a row's
        content at one position changes only as the tweet's content does (an inbox or an author
        timeline: a higher version, or another payload at the same version that wins the tie:
        :func:`newer_content`); the per-reader rows can change without it (another reposter at the same time),
        and a change of them settles only when the read shows exactly its content."""
        i = self._held(entry.cursor)
        if op == "delete":
            return i < 0  # deleting a row the read does not hold changes nothing
        if i >= 0:
            old = self.rows[i]
            if not versioned:
                return old == entry
            if newer_content(entry, old):
                self.apply(op, entry)  # a newer tweet content than the read's: newer than the read
            return True
        return self._below(entry.cursor)  # outside the head: nothing to decide

    def see(self, change: VisibleChange) -> None:
        """A change of the reader's visible set (an inbox head): a membership held is replaced."""
        self.sees_epoch += 1
        sees = self.sees
        if sees is not None and change.user_id in sees:
            sees[change.user_id] = change.op == "insert"
            self.changed()


