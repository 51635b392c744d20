"""The messages between the author, reposter and reader steps (docs/reposts-and-replies.md).

Each one *assigns* a value to an identity (a relation, an audience member, a conditional reply, a
joined repost, a repost candidate) at the sender key's clock ``ts``. One key sends every message of
an identity, and its clock only grows, so a receiver keeps the highest ``ts`` per identity and ends
in the same state whatever order, batching or duplication the messages came in.
"""

from __future__ import annotations

from typing import NamedTuple

from feed_service.core.rows import Entry

REPOSTER_STAGE = "reposter"
"""The step keyed by a reposter (:mod:`~feed_service.core.per_reader.reposter_step`)."""
READER_STAGE = "reader"
"""The step keyed by a reader (:mod:`~feed_service.core.per_reader.reader_step`)."""


class Relation(NamedTuple):
    """To the reader step of ``reader``: whether ``reader`` sees ``user`` (actively follows, nothing
    hides) and whether ``user``'s tweets are hidden from ``reader`` (a block or mute in force)."""

    reader: str
    user: str
    visible: bool
    hidden: bool
    ts: int


class AudienceDelta(NamedTuple):
    """To the reposter step of ``user``: whether ``reader`` sees ``user`` (its copy of the audience)."""

    user: str
    reader: str
    visible: bool
    ts: int


class ConditionalReply(NamedTuple):
    """To the reader step of ``reader``: a reply of ``entry.author_id`` (whom ``reader`` sees) to a
    third user, shown only if ``reader`` sees that user too; ``present`` False withdraws it."""

    reader: str
    entry: Entry
    present: bool
    ts: int


class RepostEdge(NamedTuple):
    """To the reposter step of ``reposter`` (from its own author key, where every change of the edge
    meets): the winning change of its edge to ``tweet_id``: ``(version, unreposted, author_id,
    created_at, profile_version)`` as :func:`~feed_service.core.events.repost_rank` ranks it."""

    reposter: str
    tweet_id: str
    rank: tuple[int, bool, str, int, int]
    ts: int


class RepostedTweet(NamedTuple):
    """To the reposter step of ``reposter`` (from the author key of ``author_id``, which a change of
    the edge named): the tweet's current content as an entry, or None while it is not live."""

    reposter: str
    author_id: str
    tweet_id: str
    entry: Entry | None
    ts: int


class RepostCandidate(NamedTuple):
    """To the reader step of ``reader``: ``reposter`` (whom ``reader`` sees) reposted ``tweet_id``
    (``entry`` as in :class:`JoinedRepost`), or None when that no longer holds."""

    reader: str
    reposter: str
    author_id: str
    tweet_id: str
    entry: Entry | None
    ts: int


class ExtrasDelta(NamedTuple):
    """One change of a row of ``reader``'s ``home_extras`` table, at the reader step's clock."""

    op: str
    reader: str
    entry: Entry
    ts: int


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


class PullReposterDelta(NamedTuple):
    """``reader`` starts (``insert``) or stops (``delete``) merging in ``reposter``'s reposts at read:
    ``reposter`` is a pull reposter and ``reader`` sees it (docs/reposts-and-replies.md, hybrid fan-out)."""

    op: str
    reader: str
    reposter: str
    ts: int
