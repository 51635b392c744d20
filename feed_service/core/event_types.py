"""The change events of the source tables, as typed values: what every parser returns.

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
    "reserved_id",
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


ListOp: TypeAlias = Literal["create", "delete"]
"""``create`` creates or updates a list (the highest version wins), ``delete`` deletes it; ``delete`` wins a tie."""

RepliesPolicy: TypeAlias = Literal["followed", "list", "none"]
"""Which replies a list's timeline shows (as Mastodon's lists): to ``followed`` users, to the list's
members (``list``, the default), or ``none``."""


@dataclass(frozen=True, slots=True)
class ListChange:
    """Creates, updates or deletes the list ``list_id`` of ``owner_id``: the highest version wins, a
    delete on a tie; two creates at one version: the greater ``(name, replies_policy, exclusive)``.

    A delete carries neither name nor options (``name`` None, the options their defaults).
    ``exclusive``: the members' posts leave the owner's home timeline (docs/event-kinds.md).
    """

    list_id: str
    owner_id: str
    version: int
    op: ListOp
    name: str | None = None
    replies_policy: RepliesPolicy = "list"
    exclusive: bool = False

    @property
    def live(self) -> bool:
        """Whether this change leaves the list in existence (a create or update)."""
        return self.op == "create"


ListMemberOp: TypeAlias = Literal["add", "remove"]
"""``add`` puts a user on a list, ``remove`` takes them off; ``remove`` wins a tie."""


@dataclass(frozen=True, slots=True)
class ListMemberChange:
    """Sets the membership edge list -> member; the highest version wins, ``remove`` on a tie."""

    list_id: str
    member_id: str
    version: int
    op: ListMemberOp

    @property
    def active(self) -> bool:
        """Whether this change makes the user a member (``add``)."""
        return self.op == "add"


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


ListFollowOp: TypeAlias = Literal["follow", "unfollow"]
"""``follow`` makes a list's virtual reader follow a member, ``unfollow`` ends it; ``unfollow`` wins a tie."""


@dataclass(frozen=True, slots=True)
class ListFollow:
    """The stream's own edge ``reader_id -> member_id``: the virtual reader of the list ``list_id``
    (of ``owner_id``) follows the member while the membership is in force (docs/lists.md#in-the-engine).

    Derived by the per-reader stage from the lists and memberships and versioned by its clock: the
    highest version wins, ``unfollow`` on a tie. Not a change of any table (the reference ignores it).
    """

    reader_id: str
    member_id: str
    owner_id: str
    list_id: str
    version: int
    op: ListFollowOp

    @property
    def active(self) -> bool:
        """Whether this change makes the list's reader follow the member (``follow``)."""
        return self.op == "follow"


ExclusionOp: TypeAlias = Literal["exclude", "include"]
"""``exclude`` sets a member aside from its owner's home timeline, ``include`` ends that; ``exclude`` wins a tie."""


@dataclass(frozen=True, slots=True)
class Exclusion:
    """The stream's own edge ``owner_id -> member_id``: the member is in some live exclusive list of
    the owner with the membership in force, so its entries leave the owner's home timeline
    (docs/lists.md#exclusive-lists).

    Derived by the per-reader stage and versioned by its clock: the highest version wins,
    ``exclude`` on a tie. Not a change of any table (the reference ignores it).
    """

    owner_id: str
    member_id: str
    version: int
    op: ExclusionOp

    @property
    def excluding(self) -> bool:
        """Whether this change sets the member aside (``exclude``)."""
        return self.op == "exclude"


#: The cut line and need of a rebuild (docs/activity.md): above every row (created_at is a signed
#: 64-bit number of ms; the tweet id only needs to be a valid one) and every row, so a refill with them
#: is all of an author's rows of the reader's, as a follow writes them.
REBUILD_LINE: tuple[int, str] = (2**63 - 1, "~")
REBUILD_NEED = 2**63 - 1


Event: TypeAlias = (TweetUpsert | TweetDelete | FollowChange | ProfileVersion | BlockChange | MuteChange | RepostChange
                    | ListChange | ListMemberChange | RefillRequest | ListFollow | Exclusion)
"""Any valid change event."""
