"""The messages from the author keys to the per-reader stage, and the stage's outputs
(docs/reposts-and-replies.md).

Each input *assigns* a value to an identity (a relation, a conditional tweet, a repost edge, a
reposted tweet's content) at the sender key's clock ``ts``. One key sends every message of
an identity, and its clock only grows, so a receiver keeps the highest ``ts`` per identity and ends
in the same state whatever order, batching or duplication the messages came in.
"""

from __future__ import annotations

from typing import NamedTuple

from feed_service.core.events import ListChange, ListMemberChange
from feed_service.core.rows import Entry

STAGE = "stage"
"""The per-reader stage (:mod:`~feed_service.core.per_reader.audience_stage`), the one destination
of every message here."""



class Relation(NamedTuple):
    """To the per-reader stage: whether ``reader`` sees ``user`` (actively follows, nothing
    hides), whether ``user``'s tweets are hidden from ``reader`` (a block or mute in force) and
    whether ``reader`` sees ``user`` but turned its reposts off (docs/lists.md#per-follow-options)."""

    reader: str
    user: str
    visible: bool
    hidden: bool
    ts: int
    quiet: bool = False
    excluded: bool = False
    """``reader`` sees ``user``, a member of one of its exclusive lists (docs/lists.md#exclusive-lists)."""


class ConditionalTweet(NamedTuple):
    """To the per-reader stage, from the author key of ``author_id`` (a push author): the content of
    its retained reply ``tweet_id`` to a third user, or None once it is none of those (deleted,
    edited into another class, evicted, or the author turned pull). One message per tweet and change:
    the stage shows it to the readers who see both the author and the parent's author."""

    author_id: str
    tweet_id: str
    entry: Entry | None
    ts: int


class RepostEdge(NamedTuple):
    """To the per-reader stage (from the author key of ``reposter``, where every change of the edge
    meets): the winning change of its edge to ``tweet_id``: ``(version, unreposted, author_id,
    created_at, profile_version)`` as :func:`~feed_service.core.rules.repost_rank` ranks it."""

    reposter: str
    tweet_id: str
    rank: tuple[int, bool, str, int, int]
    ts: int


class RepostedTweet(NamedTuple):
    """To the per-reader stage (from the author key of ``author_id``, which a change of
    the edge named): the tweet's current content as an entry, or None while it is not live."""

    reposter: str
    author_id: str
    tweet_id: str
    entry: Entry | None
    ts: int


class ListInput(NamedTuple):
    """To the list stage (:mod:`~feed_service.core.per_reader.list_stage`), from the author key
    ``key`` a list or membership change was routed to: the change as it came (the list stage ranks
    it by its own version; docs/lists.md#in-the-engine)."""

    key: str
    change: ListChange | ListMemberChange
    ts: int


class ExtrasDelta(NamedTuple):
    """One change of a row of ``reader``'s ``home_extras`` table, at the per-reader stage's clock."""

    op: str
    reader: str
    entry: Entry
    ts: int


class ExtrasFanout(NamedTuple):
    """One change of the row of tweet ``entry`` in the ``home_extras`` of each of ``readers``, at the
    per-reader stage's clock: compact, as a :class:`~feed_service.core.rows.TimelineDelta` is, and
    exploded into :class:`ExtrasDelta` rows only where rows are written (:meth:`rows`)."""

    op: str
    entry: Entry
    readers: tuple[str, ...]
    ts: int

    def rows(self) -> list[ExtrasDelta]:
        return [ExtrasDelta(self.op, reader, self.entry, self.ts) for reader in self.readers]


class VisibleDelta(NamedTuple):
    """``reader`` starts (``insert``) or stops (``delete``) seeing ``user``: the reader's visible set,
    which reads use to filter a pull author's replies."""

    op: str
    reader: str
    user: str
    ts: int


class HiddenDelta(NamedTuple):
    """``user``'s tweets start (``insert``) or stop (``delete``) being hidden from ``reader`` (a block
    or mute in force): what a read needs to decide a pull reposter's repost of ``user``'s tweet."""

    op: str
    reader: str
    user: str
    ts: int


class ExcludedDelta(NamedTuple):
    """``reader`` starts (``insert``) or stops (``delete``) setting ``user`` aside as a source of its
    home timeline (``user`` is in one of its exclusive lists and it sees ``user``): what a read needs
    to decide a pull reposter's repost of ``user``'s tweet and the sources of a dropped inbox
    (docs/lists.md#exclusive-lists)."""

    op: str
    reader: str
    user: str
    ts: int


class PullReposterDelta(NamedTuple):
    """``reader`` starts (``insert``) or stops (``delete``) merging in ``reposter``'s reposts at read:
    ``reposter`` is a pull reposter and ``reader`` sees it (docs/reposts-and-replies.md, hybrid fan-out)."""

    op: str
    reader: str
    reposter: str
    ts: int
