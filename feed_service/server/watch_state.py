"""What one pushed watch has sent (docs/api.md#watch): its position, the rows it heard of by the
source holding them, and the folding of one row change into a message (:meth:`WatchState.note`).

A tweet's entry comes from one of the sources of the reader's home plan
(:mod:`feed_service.core.home_plan`): the inbox (:data:`INBOX_ROW`), a pull author's timeline or, for
a reader whose inbox is not kept, a push author's (:data:`AUTHOR_ROW`), the extras
(:data:`EXTRAS_ROW`) or a pull reposter's reposts (:data:`REPOSTER_ROW`). Two may hold it at once
while it moves between them; the newest row held is what the client is sent. Pure: no I/O.
"""

from __future__ import annotations

from feed_service.core.home_plan import DROPPED_INBOX, PULL_AUTHOR, deciding_user, shows_row
from feed_service.core.per_reader.pull_reposts import ListRule
from feed_service.core.rows import Cursor, Entry
from feed_service.core.timeline_merge import timeline_order
from feed_service.core.view_changes import AuthorChange, ExtrasChange, TimelineChange, UserRepostChange

INBOX_ROW = "i"
"""A row of the reader's inbox (the plan's inbox)."""
AUTHOR_ROW = "a"
"""A row of an author timeline the reader merges in (the plan's pull authors, or its dropped inbox's push authors)."""
EXTRAS_ROW = "x"
"""A row of the reader's ``home_extras``."""
REPOSTER_ROW = "r"
"""A row of a pull reposter's ``user_reposts``."""

#: The source of each kind of row change (:meth:`WatchState.note`): "r" a pull reposter's row.
SOURCES = {TimelineChange: INBOX_ROW, AuthorChange: AUTHOR_ROW, ExtrasChange: EXTRAS_ROW, UserRepostChange: REPOSTER_ROW}



class WatchState:
    """What one pushed watch has sent: its position, the row write timestamps seen (duplicates of an
    at-least-once topic are dropped), the rows its catch-up reads sent, which source holds each
    tweet it heard of (``held``: "i" the inbox, "a" a pull author, "x" the reader's extras) and
    whether the reader sees each user a pull author's reply was decided by (``sees``). For a reader
    whose inbox is not kept (``dropped``), ``push`` holds the push authors merged in as "a" too."""

    __slots__ = ("position", "seen", "read", "held", "sees", "token_at", "token", "dropped", "push", "seen_users",
                 "rule", "owner_sees", "owner_seen_users")

    #: Rows whose last write timestamp a watch remembers (the oldest are forgotten first); the same
    #: bound holds the tweets' sources and the memberships.
    SEEN_LIMIT = 10_000

    def __init__(self, position: Cursor | None) -> None:
        self.position = position
        self.seen: dict[object, int] = {}
        self.read: dict[str, Entry] = {}
        self.held: dict[str, dict[str, Entry]] = {}
        self.sees: dict[str, bool] = {}
        #: ``sees`` as the container of the users seen that the plan's rule asks
        self.seen_users = _Seen(self.sees)
        #: the encoded resume token of position ``token_at`` (the last one minted)
        self.token_at: Cursor | None = None
        self.token = b""
        self.dropped = False
        #: the push authors merged in (a subset of the hub's ``Subscription.authors``): only while dropped
        self.push: set[str] = set()
        #: a list's reader: its list's rule (docs/lists.md#in-the-engine), and what its owner sees of
        #: the users a pull author's reply is decided by (``owner_sees``, as ``sees``)
        self.rule: ListRule | None = None
        self.owner_sees: dict[str, bool] = {}
        self.owner_seen_users = _Seen(self.owner_sees)

    def fresh(self, change: TimelineChange | AuthorChange | ExtrasChange) -> bool:
        """False for a change at or below a write timestamp already applied to its row (a replay).
        A row is a tweet at a position of one table's partition, as in Cassandra (a pull reposter's
        rows: that reposter's partition): a move is a delete and an insert of two rows at one ``ts``,
        both applied."""
        e = change.entry
        source = SOURCES[type(change)]
        # a pull reposter's row is one of that reposter's table: two reposters' rows of a tweet at
        # one repost time are two rows, each with its own write timestamps
        key = (e.tweet_id, e.at, source, e.reposted_by if source == REPOSTER_ROW else None)
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
        if entry.author_id in self.push:
            return shows_row(DROPPED_INBOX, entry, reader)
        return shows_row(PULL_AUTHOR, entry, reader, self.seen_users, self.rule, self.owner_seen_users)

    def deciding(self, entry: Entry, reader: str) -> str | None:
        """The user a pull author's row is decided by (None: always shown): for a list's reader, as
        for its owner (a reply to the owner always shows, docs/lists.md#why-these-rules)."""
        return deciding_user(entry, reader if self.rule is None else self.rule.owner)

    def undecided(self, entry: Entry, reader: str) -> str | None:
        """:meth:`deciding`, unless what decides it is noted already."""
        u = self.deciding(entry, reader)
        if u is None or (u in self.sees and (self.rule is None or u in self.owner_sees)):
            return None
        return u

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
            note_message(upserts, removed, "delete", entry)
            return
        best = max(held.values(), key=timeline_order) if len(held) > 1 else next(iter(held.values()))
        if op != "delete" and best is entry and self.read.get(tid) == entry:
            return  # already sent by the catch-up read: this very content
        note_message(upserts, removed, "insert", best)

    def bound(self) -> None:
        """Forget the oldest sources, memberships and read versions beyond the limit."""
        for memo in (self.held, self.sees, self.read, self.owner_sees):
            while len(memo) > self.SEEN_LIMIT:
                del memo[next(iter(memo))]


class _Seen:
    """The users a watch noted the reader sees, as a container (a noted False is not seen)."""

    __slots__ = ("sees",)

    def __init__(self, sees: dict[str, bool]) -> None:
        self.sees = sees

    def __contains__(self, user: object) -> bool:
        return self.sees.get(user, False)  # type: ignore[arg-type]


def note_message(upserts: dict[str, Entry], removed: dict[str, Entry], op: str, entry: Entry) -> None:
    """Fold one change of ``entry`` into a message's upserts and removals (the last change wins)."""
    if op == "delete":
        upserts.pop(entry.tweet_id, None)
        removed[entry.tweet_id] = entry
    else:
        removed.pop(entry.tweet_id, None)
        upserts[entry.tweet_id] = entry
