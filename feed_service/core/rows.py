"""The rows of the view, one definition each: what the engine emits, the stores hold and readers get.

Named tuples: fields by name everywhere, tuple speed on the hot paths (the engine builds them with
``tuple.__new__``: about half the cost of the generated constructor with positional arguments, a
quarter of it with keywords; docs/join-engine.md, named records on the hot path).

- :class:`Entry`: a tweet as it appears in a timeline (and in the ``tweets`` table): no display
  name, which is joined at read time by ``(author_id, profile_version)``.
- :class:`ProfileRow`: one immutable profile version, keyed by ``(user_id, version)``.
- :class:`TimelineDelta` / :class:`TweetChange`: the engine's outputs for one key and batch; a
  delta is compact (one entry, many timelines) and is exploded only where rows are written.
- :class:`BlockDelta`: an author starts or stops blocking a user (the ``blocks`` table).
- :class:`TimelineWrite` / :class:`TweetWrite` / :class:`ProfileWrite`: one Cassandra row each,
  with the write timestamp of the step that produced it (docs/idempotent-writes.md).
- :class:`TimelineFanout`: one timeline row's write in many timelines at once, as the stream
  writes a delta (one statement per chunk of timelines: docs/idempotent-writes.md, fan-out writes).
"""

from __future__ import annotations

from typing import Literal, NamedTuple, TypeAlias

Cursor: TypeAlias = tuple[int, str]
"""A position in a timeline: the clustering key ``(created_at, tweet_id)`` of an entry."""

ProfileKey: TypeAlias = tuple[str, int]
"""``(user_id, version)``: the versioned key of one immutable profile version."""

DeltaOp: TypeAlias = Literal["insert", "update", "delete"]
"""``insert``: the rows did not exist; ``update``: they exist and their content changed in place
(same created_at, so the same clustering key); ``delete``: remove the rows, ``entry`` is the old
content (a retraction carries what it retracts)."""


class Entry(NamedTuple):
    """One tweet's content as a timeline row holds it (display names joined at read time).

    A reply names its parent (``in_reply_to_*``, part of the tweet's versioned content). A home
    timeline entry brought by a repost names the reposter, the repost time and the reposter's
    profile version (``reposted_*``); it sits in the timeline at ``reposted_at``, every other entry
    at ``created_at`` (docs/reposts-and-replies.md). The optional fields come last with defaults, so
    every row written before they existed reads back unchanged.
    """

    tweet_id: str
    author_id: str
    created_at: int
    version: int
    text: str
    profile_version: int
    in_reply_to_tweet_id: str | None = None
    in_reply_to_author_id: str | None = None
    reposted_by: str | None = None
    reposted_at: int | None = None
    reposter_profile_version: int | None = None

    @property
    def at(self) -> int:
        """Where the entry sits in a timeline: the repost time of a repost entry, else ``created_at``."""
        return self.created_at if self.reposted_at is None else self.reposted_at

    @property
    def cursor(self) -> Cursor:
        """The entry's position in a timeline, newest first by this key."""
        return (self.at, self.tweet_id)


class ProfileRow(NamedTuple):
    """One version of a user's profile; a version's content never changes once written."""

    user_id: str
    version: int
    display_name: str
    avatar_url: str | None
    bio: str | None


class TimelineDelta(NamedTuple):
    """One change to the same row of several timelines (compact: explode ``timeline_ids`` to write)."""

    op: DeltaOp
    entry: Entry
    timeline_ids: tuple[str, ...]


class TweetChange(NamedTuple):
    """New row of the tweets table; ``entry`` is None when the tweet is deleted (tombstone)."""

    tweet_id: str
    author_id: str
    entry: Entry | None


class TimelineWrite(NamedTuple):
    """One ``home_timeline`` row to write: ``insert``/``update`` write it whole, ``delete`` removes it."""

    op: DeltaOp
    timeline_id: str
    entry: Entry
    ts: int


class TimelineFanout(NamedTuple):
    """The same ``home_timeline`` row written in every timeline of ``timeline_ids``: a delta kept
    compact down to the store, which writes it with one statement per chunk of timelines rather
    than one per row (the rows differ only in their partition key)."""

    op: DeltaOp
    timeline_ids: tuple[str, ...]
    entry: Entry
    ts: int

    def rows(self) -> list[TimelineWrite]:
        """The one-row writes this stands for.

        >>> e = Entry("t1", "bob", 5, 1, "hi", 1)
        >>> [(w.op, w.timeline_id) for w in TimelineFanout("insert", ("ann", "cat"), e, 7).rows()]
        [('insert', 'ann'), ('insert', 'cat')]
        """
        return [TimelineWrite(self.op, tid, self.entry, self.ts) for tid in self.timeline_ids]


class TweetWrite(NamedTuple):
    """One ``tweets`` row to write; ``entry`` None deletes the tweet."""

    tweet_id: str
    author_id: str
    entry: Entry | None
    ts: int


class ProfileWrite(NamedTuple):
    """One ``profiles`` row to write."""

    profile: ProfileRow
    ts: int


class AuthorTimelineDelta(NamedTuple):
    """One change to an author's own timeline (its newest live tweets, up to the inbox cap): the
    rows readers merge in for pull authors, and the profile page of every author."""

    op: DeltaOp
    entry: Entry


FollowOp: TypeAlias = Literal["insert", "delete"]


class PullFollowDelta(NamedTuple):
    """Followers who start (``insert``) or stop (``delete``) reading ``author_id`` at read time:
    the rows of the table that tells the read service which pull authors a user follows."""

    op: FollowOp
    author_id: str
    follower_ids: tuple[str, ...]


class AuthorTimelineWrite(NamedTuple):
    """One ``author_timeline`` row to write (``delete`` removes it)."""

    op: DeltaOp
    entry: Entry
    ts: int


class PullFollowWrite(NamedTuple):
    """One ``pull_follows`` row to write: ``follower_id`` reads ``author_id`` at read time."""

    op: FollowOp
    follower_id: str
    author_id: str
    ts: int


class BlockDelta(NamedTuple):
    """``blocker_id`` starts (``insert``) or stops (``delete``) blocking ``blocked_id``: a row of the
    table the read service checks before answering a user for the blocker's tweets (docs/api.md)."""

    op: FollowOp
    blocker_id: str
    blocked_id: str


class BlockWrite(NamedTuple):
    """One ``blocks`` row to write (``delete`` removes it), at the blocker key's write timestamp."""

    op: FollowOp
    blocker_id: str
    blocked_id: str
    ts: int
