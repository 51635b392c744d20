"""Change events of the source tables, their parser, and the rules that order versions.

The envelope (JSON Schema in ``schemas/events/``)::

    {"type":"tweet","op":"upsert","tweet_id","author_id","version","created_at","text","profile_version"}
    {"type":"tweet","op":"delete","tweet_id","author_id","version"}
    {"type":"follow","op":"follow"|"unfollow","follower_id","followee_id","version"}
    {"type":"profile","user_id","version","display_name"[,"avatar_url"][,"bio"]}
    {"type":"block","op":"block"|"unblock","blocker_id","blocked_id","version"}
    {"type":"mute","op":"mute"|"unmute","muter_id","muted_id","version"}

Bad input never raises anything but :class:`InvalidEvent`, whose ``code`` names the kind of fault
(for metrics) and whose message says which field was wrong. Unknown extra fields are ignored.

The version-ordering rules live here, next to the types, because the incremental engine
(:mod:`feed_service.core.join`) and the batch reference (:mod:`feed_service.core.reference`) must
apply exactly the same ones.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping, NamedTuple, TypeAlias
from feed_service.errors import InvalidEvent

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


@dataclass(frozen=True, slots=True)
class TweetDelete:
    """Deletes a tweet for good: a delete is final whatever its version."""

    tweet_id: str
    author_id: str
    version: int


@dataclass(frozen=True, slots=True)
class FollowChange:
    """Sets the edge follower -> followee; the highest version wins, ``unfollow`` on a tie."""

    follower_id: str
    followee_id: str
    version: int
    op: FollowOp

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


Event: TypeAlias = TweetUpsert | TweetDelete | FollowChange | ProfileVersion | BlockChange | MuteChange
"""Any valid change event."""

RawEvent: TypeAlias = Mapping[str, Any] | str | bytes | bytearray
"""What :func:`parse_event` accepts: a decoded JSON object or its text."""


def join_key(event: Event) -> str:
    """Return the author key whose state owns ``event`` (tweets.author_id = follows.followee_id =
    mutes.muted_id); a block has two (:func:`join_keys`) and raises ``ValueError`` here.

    >>> join_key(FollowChange("ann", "bob", 1, "follow"))
    'bob'
    """
    if isinstance(event, (TweetUpsert, TweetDelete)):
        return event.author_id
    if isinstance(event, FollowChange):
        return event.followee_id
    if isinstance(event, MuteChange):
        return event.muted_id
    if isinstance(event, BlockChange):
        raise ValueError(f"a block belongs to two keys, use join_keys: {event!r}")
    return event.user_id


def join_keys(event: Event) -> tuple[str, ...]:
    """Every author key whose state needs ``event``: one, or two for a block (blocker, blocked).

    >>> join_keys(BlockChange("ann", "bob", 1, "block"))
    ('ann', 'bob')
    >>> join_keys(MuteChange("ann", "bob", 1, "mute"))
    ('bob',)
    """
    if isinstance(event, BlockChange):
        return (event.blocker_id, event.blocked_id)
    return (join_key(event),)


# --- parsing -----------------------------------------------------------------------------------

_MISSING = object()

MIN_INT64 = -(2**63)
MAX_INT64 = 2**63 - 1
"""Largest version or timestamp accepted: what Cassandra's ``bigint`` and Spark's ``LongType`` hold."""


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _field(obj: Mapping[str, Any], name: str) -> Any:
    value = obj.get(name, _MISSING)
    if value is _MISSING:
        raise InvalidEvent("missing_field", f"missing field {name!r}")
    return value


def _id(obj: Mapping[str, Any], name: str) -> str:
    value = _field(obj, name)
    if type(value) is not str:
        raise InvalidEvent("wrong_type", f"field {name!r} must be a string, got {_type_name(value)}")
    if not value:
        raise InvalidEvent("empty_id", f"field {name!r} must not be empty")
    return value


def _text(obj: Mapping[str, Any], name: str) -> str:
    value = _field(obj, name)
    if type(value) is not str:
        raise InvalidEvent("wrong_type", f"field {name!r} must be a string, got {_type_name(value)}")
    return value


def _optional_text(obj: Mapping[str, Any], name: str) -> str | None:
    value = obj.get(name)
    if value is not None and type(value) is not str:
        raise InvalidEvent("wrong_type", f"field {name!r} must be a string or null, got {_type_name(value)}")
    return value


def _natural(obj: Mapping[str, Any], name: str) -> int:
    value = _field(obj, name)
    # type() rather than isinstance(): JSON true must not pass for 1.
    if type(value) is not int:
        raise InvalidEvent("wrong_type", f"field {name!r} must be an integer, got {_type_name(value)}")
    if value > MAX_INT64 or value < MIN_INT64:
        # Cassandra's bigint and Spark's LongType stop here; the stream rejects the same records.
        raise InvalidEvent("wrong_type", f"field {name!r} must fit in a signed 64-bit integer, got {value}")
    if value < 0:
        raise InvalidEvent("negative_value", f"field {name!r} must be non-negative, got {value}")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"key {repeated!r} appears more than once")
    return obj


def _not_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


_decode = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_not_json_constant).decode
"""Strict JSON (RFC 8259): no NaN/Infinity, no repeated keys: what the stream's native parser accepts."""

_MAYBE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")


def _has_lone_surrogate(value: Any) -> bool:
    if type(value) is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if type(value) is dict:
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if type(value) is list:
        return any(_has_lone_surrogate(v) for v in value)
    return False


def _loads(raw: str | bytes | bytearray) -> Any:
    """Parse one record's JSON by the rules the stream applies to Kafka values: UTF-8 only (no BOM,
    no UTF-16/32 sniffing), strict JSON, nothing after the value, no lone surrogates."""
    if isinstance(raw, (bytes, bytearray)):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEvent("bad_json", f"bad JSON: not UTF-8: {exc}") from None
    else:
        text = raw
    try:
        obj = _decode(text)
    except ValueError as exc:  # JSONDecodeError, a repeated key, NaN/Infinity
        raise InvalidEvent("bad_json", f"bad JSON: {exc}") from None
    if _MAYBE_SURROGATE.search(text) and _has_lone_surrogate(obj):
        raise InvalidEvent("bad_json", "bad JSON: a string holds a lone UTF-16 surrogate")
    return obj


def parse_event(raw: RawEvent) -> Event:
    """Validate one envelope and return its event, or raise :class:`InvalidEvent` with a reason.

    >>> parse_event('{"type":"follow","op":"follow","follower_id":"a","followee_id":"b","version":3}')
    FollowChange(follower_id='a', followee_id='b', version=3, op='follow')
    >>> parse_event({"type": "profile", "user_id": "a", "version": True, "display_name": "A"})
    Traceback (most recent call last):
    ...
    feed_service.errors.InvalidEvent: field 'version' must be an integer, got bool
    """
    obj = _loads(raw) if isinstance(raw, (str, bytes, bytearray)) else raw
    if not isinstance(obj, Mapping):
        raise InvalidEvent("not_object", f"event must be a JSON object, got {_type_name(obj)}")
    kind = _field(obj, "type")
    if kind == "tweet":
        op = _field(obj, "op")
        if op == "upsert":
            return TweetUpsert(
                tweet_id=_id(obj, "tweet_id"),
                author_id=_id(obj, "author_id"),
                version=_natural(obj, "version"),
                created_at=_natural(obj, "created_at"),
                text=_text(obj, "text"),
                profile_version=_natural(obj, "profile_version"),
            )
        if op == "delete":
            return TweetDelete(
                tweet_id=_id(obj, "tweet_id"),
                author_id=_id(obj, "author_id"),
                version=_natural(obj, "version"),
            )
        raise InvalidEvent("unknown_op", f"unknown tweet op {op!r}")
    if kind == "follow":
        op = _field(obj, "op")
        if op != "follow" and op != "unfollow":
            raise InvalidEvent("unknown_op", f"unknown follow op {op!r}")
        follower = _id(obj, "follower_id")
        followee = _id(obj, "followee_id")
        version = _natural(obj, "version")
        if follower == followee:
            raise InvalidEvent("self_follow", f"self-follow of {follower!r}")
        return FollowChange(follower, followee, version, op)
    if kind == "block" or kind == "mute":
        return _hide_change(obj, kind)
    if kind == "profile":
        return ProfileVersion(
            user_id=_id(obj, "user_id"),
            version=_natural(obj, "version"),
            display_name=_text(obj, "display_name"),
            avatar_url=_optional_text(obj, "avatar_url"),
            bio=_optional_text(obj, "bio"),
        )
    raise InvalidEvent("unknown_type", f"unknown event type {kind!r}")


class HideEdgeShape(NamedTuple):
    """How a block or mute envelope is written: what the parsers check and producers fill in."""

    cls: type[BlockChange] | type[MuteChange]
    hide_op: str
    undo_op: str
    subject: str
    """The field of the user who blocks or mutes."""
    target: str
    """The field of the user blocked or muted."""
    self_code: RejectCode


HIDE_EDGE_SHAPES: dict[str, HideEdgeShape] = {
    "block": HideEdgeShape(BlockChange, "block", "unblock", "blocker_id", "blocked_id", "self_block"),
    "mute": HideEdgeShape(MuteChange, "mute", "unmute", "muter_id", "muted_id", "self_mute"),
}
"""Envelope ``type`` -> its shape, for the two edge types that hide (one source for every parser)."""


def _hide_change(obj: Mapping[str, Any], kind: str) -> BlockChange | MuteChange:
    cls, hide_op, undo_op, subject_field, object_field, self_code = HIDE_EDGE_SHAPES[kind]
    op = _field(obj, "op")
    if op != hide_op and op != undo_op:
        raise InvalidEvent("unknown_op", f"unknown {kind} op {op!r}")
    subject = _id(obj, subject_field)
    target = _id(obj, object_field)
    version = _natural(obj, "version")
    if subject == target:
        raise InvalidEvent(self_code, f"self-{kind} of {subject!r}")
    return cls(subject, target, version, op)


def event_to_json(event: Event) -> dict[str, Any]:
    """Return the envelope of ``event`` (inverse of :func:`parse_event`), for replay files and tests."""
    if isinstance(event, TweetUpsert):
        return {
            "type": "tweet", "op": "upsert", "tweet_id": event.tweet_id, "author_id": event.author_id,
            "version": event.version, "created_at": event.created_at, "text": event.text,
            "profile_version": event.profile_version,
        }
    if isinstance(event, TweetDelete):
        return {"type": "tweet", "op": "delete", "tweet_id": event.tweet_id,
                "author_id": event.author_id, "version": event.version}
    if isinstance(event, FollowChange):
        return {"type": "follow", "op": event.op, "follower_id": event.follower_id,
                "followee_id": event.followee_id, "version": event.version}
    if isinstance(event, BlockChange):
        return {"type": "block", "op": event.op, "blocker_id": event.blocker_id,
                "blocked_id": event.blocked_id, "version": event.version}
    if isinstance(event, MuteChange):
        return {"type": "mute", "op": event.op, "muter_id": event.muter_id,
                "muted_id": event.muted_id, "version": event.version}
    out: dict[str, Any] = {"type": "profile", "user_id": event.user_id, "version": event.version,
                           "display_name": event.display_name}
    if event.avatar_url is not None:
        out["avatar_url"] = event.avatar_url
    if event.bio is not None:
        out["bio"] = event.bio
    return out


# --- version-ordering rules ------------------------------------------------------------------------

TweetContent: TypeAlias = tuple[int, int, str, int]
"""(version, created_at, text, profile_version): a tweet's winning upsert, as kept in state."""

Profile: TypeAlias = tuple[str, str | None, str | None]
"""(display_name, avatar_url, bio): one profile version's payload."""


def tweet_payload_digest(created_at: int, text: str, profile_version: int) -> int:
    """Break ties between different upserts of one tweet at the same version: the greater digest wins.

    A digest rather than the payload itself so that a tweet that has left the per-author state
    (beyond the inbox cap) can still be compared: the state keeps its (version, digest) only.
    64-bit BLAKE2b over a canonical encoding; equal payloads give equal digests, so duplicates are
    no-ops.
    """
    blob = b"%d\x00%d\x00" % (created_at, profile_version) + text.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "big")


def content_of(event: TweetUpsert) -> TweetContent:
    """Return the state form of an upsert."""
    return (event.version, event.created_at, event.text, event.profile_version)


def content_digest(content: TweetContent) -> int:
    """:func:`tweet_payload_digest` of a stored content tuple."""
    return tweet_payload_digest(content[1], content[2], content[3])


def content_beats(new: TweetContent, old: TweetContent) -> bool:
    """Whether upsert content ``new`` replaces ``old``: higher version, or same version and greater digest."""
    if new[0] != old[0]:
        return new[0] > old[0]
    return new != old and content_digest(new) > content_digest(old)


def profile_of(event: ProfileVersion) -> Profile:
    """Return the state form of a profile version."""
    return (event.display_name, event.avatar_url, event.bio)


def profile_rank(profile: Profile) -> tuple[str, tuple[bool, str], tuple[bool, str]]:
    """Total order of profile payloads; of two different payloads at one (user, version) the greater wins.

    Compares display_name, then avatar_url, then bio, with null below every string.
    """
    name, avatar, bio = profile
    return (name, (avatar is not None, avatar or ""), (bio is not None, bio or ""))


def edge_rank(version: int, active: bool) -> tuple[int, bool]:
    """Total order of follow-edge changes: higher version wins, and on a tie unfollow (inactive) wins."""
    return (version, not active)


def hide_rank(version: int, hiding: bool) -> tuple[int, bool]:
    """Total order of block and mute edge changes: higher version wins, and on a tie the hiding op
    (``block``, ``mute``) wins, as ``unfollow`` wins a follow tie: the safer side of a tie."""
    return (version, hiding)
