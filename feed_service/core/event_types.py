"""The change events of the six source tables, as typed values: what every parser returns.

The envelope of each type, its fields and rules, are declared once in
:mod:`feed_service.core.event_kinds`; the parser and the version-ordering rules are in
:mod:`feed_service.core.events`, which re-exports these types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

FollowOp: TypeAlias = Literal["follow", "unfollow"]
"""``follow`` makes the edge active, ``unfollow`` inactive; on a version tie ``unfollow`` wins."""

RejectCode: TypeAlias = Literal[
    "bad_json",
    "not_object",
    "missing_field",
    "wrong_type",
    "empty_id",
    "negative_value",
    "unknown_type",
    "unknown_op",
    "self_follow",
    "self_block",
    "self_mute",
    "incomplete_reply",
    "unknown_value",
]
"""Why an event was rejected; one value per kind of fault so rejects can be counted by kind."""


@dataclass(frozen=True, slots=True)
class TweetUpsert:
    """A tweet's content at ``version``; the highest version wins (ties: see :func:`tweet_payload_digest`)."""

    tweet_id: str
    author_id: str
    version: int
    created_at: int
    text: str
    profile_version: int
    in_reply_to_tweet_id: str | None = None
    """The parent tweet of a reply (None: not a reply); set together with ``in_reply_to_author_id``.
    Part of the versioned content: an edit carries it again (docs/event-kinds.md)."""
    in_reply_to_author_id: str | None = None
    """The parent tweet's author of a reply (None: not a reply)."""

    @property
    def is_reply(self) -> bool:
        """Whether the tweet answers another one."""
        return self.in_reply_to_tweet_id is not None


@dataclass(frozen=True, slots=True)
class TweetDelete:
    """Deletes a tweet for good: a delete is final whatever its version."""

    tweet_id: str
    author_id: str
    version: int


@dataclass(frozen=True, slots=True)
class FollowChange:
    """Sets the edge follower -> followee; the highest version wins, ``unfollow`` on a tie. The winning
    follow's ``show_reposts`` is the edge's option."""

    follower_id: str
    followee_id: str
    version: int
    op: FollowOp
    show_reposts: bool = True
    """A follow's option: whether the followee's reposts show in the follower's home timeline (absent
    or null in the envelope: True). An unfollow does not carry it (it keeps the default)."""

    @property
    def active(self) -> bool:
        """Whether this change makes the edge active."""
        return self.op == "follow"


@dataclass(frozen=True, slots=True)
class ProfileVersion:
    """One version of a user profile; stored by (user_id, version), never overwritten by another version."""

    user_id: str
    version: int
    display_name: str
    avatar_url: str | None = None
    bio: str | None = None


BlockOp: TypeAlias = Literal["block", "unblock"]
"""``block`` hides both users from each other's home timelines, ``unblock`` ends that; ``block`` wins a tie."""

MuteOp: TypeAlias = Literal["mute", "unmute"]
"""``mute`` hides the muted user's tweets from the muter's home timeline; ``mute`` wins a tie."""


@dataclass(frozen=True, slots=True)
class BlockChange:
    """Sets the block edge blocker -> blocked; the highest version wins, ``block`` on a tie.

    A block relates two authors, so it belongs to two join keys (:func:`join_keys`): at the
    blocker's key it hides the blocker's tweets from the blocked user, at the blocked user's key
    it hides the blocked user's tweets from the blocker (docs/blocks-and-mutes.md).
    """

    blocker_id: str
    blocked_id: str
    version: int
    op: BlockOp

    @property
    def hiding(self) -> bool:
        """Whether this change makes the edge hide (a block)."""
        return self.op == "block"


@dataclass(frozen=True, slots=True)
class MuteChange:
    """Sets the mute edge muter -> muted; the highest version wins, ``mute`` on a tie. It hides
    the muted user's tweets from the muter only, so it belongs to the muted user's key."""

    muter_id: str
    muted_id: str
    version: int
    op: MuteOp

    @property
    def hiding(self) -> bool:
        """Whether this change makes the edge hide (a mute)."""
        return self.op == "mute"


RepostOp: TypeAlias = Literal["repost", "unrepost"]
"""``repost`` puts a tweet on the reposter's list of reposts, ``unrepost`` takes it off; ``unrepost`` wins a tie."""


@dataclass(frozen=True, slots=True)
class RepostChange:
    """Sets the repost edge reposter -> tweet; the highest version wins, ``unrepost`` on a tie.

    ``author_id`` is the original tweet's author. A repost carries its time (``created_at``, ms)
    and the reposter's profile version shown with it; an unrepost carries neither (None). A user
    may repost their own tweet.
    """

    reposter_id: str
    tweet_id: str
    author_id: str
    version: int
    op: RepostOp
    created_at: int | None = None
    profile_version: int | None = None

    @property
    def reposting(self) -> bool:
        """Whether this change makes the edge a repost (``repost``)."""
        return self.op == "repost"


@dataclass(frozen=True, slots=True)
class RefillRequest:
    """The stream's own request to ``author_id``'s key: write ``reader_id``'s inbox rows again, the
    newest ``need`` of them below the inbox's cut line ``(below_created_at, below_tweet_id)``.

    Not a change of any table: it changes nothing in the definition, so any number of them in any
    order leave the view as it is, only making a trimmed inbox whole again (docs/trimming.md#refill).
    """

    reader_id: str
    author_id: str
    below_created_at: int
    below_tweet_id: str
    need: int


#: The cut line and need of a rebuild (docs/activity.md): above every row (created_at is a signed
#: 64-bit number of ms; the tweet id only needs to be a valid one) and every row, so a refill with them
#: is all of an author's rows of the reader's, as a follow writes them.
REBUILD_LINE: tuple[int, str] = (2**63 - 1, "~")
REBUILD_NEED = 2**63 - 1


Event: TypeAlias = (TweetUpsert | TweetDelete | FollowChange | ProfileVersion | BlockChange | MuteChange | RepostChange
                    | RefillRequest)
"""Any valid change event."""
