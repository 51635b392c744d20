"""Change events: the parser, the envelope writer, join keys, and the rules that order versions.

The envelopes (declared once, with their rules, in :mod:`feed_service.core.event_kinds`; JSON Schema
in ``schemas/events/``)::

    {"type":"tweet","op":"upsert","tweet_id","author_id","version","created_at","text","profile_version"
     [,"in_reply_to_tweet_id","in_reply_to_author_id"]}                     (a reply: both or neither)
    {"type":"tweet","op":"delete","tweet_id","author_id","version"}
    {"type":"follow","op":"follow","follower_id","followee_id","version"[,"show_reposts"]}   (default true)
    {"type":"follow","op":"unfollow","follower_id","followee_id","version"}
    {"type":"profile","user_id","version","display_name"[,"avatar_url"][,"bio"]}
    {"type":"block","op":"block"|"unblock","blocker_id","blocked_id","version"}
    {"type":"mute","op":"mute"|"unmute","muter_id","muted_id","version"}
    {"type":"repost","op":"repost","reposter_id","tweet_id","author_id","version","created_at","profile_version"}
    {"type":"repost","op":"unrepost","reposter_id","tweet_id","author_id","version"}

Bad input never raises anything but :class:`InvalidEvent`, whose ``code`` names the kind of fault
(for metrics) and whose message says which field was wrong. Unknown extra fields are ignored.

The version-ordering rules live here, next to the parser, because the incremental engine
(:mod:`feed_service.core.join`) and the batch reference (:mod:`feed_service.core.reference`) must
apply exactly the same ones. The event types themselves are in :mod:`feed_service.core.event_types`
and re-exported here.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Collection, Mapping, NamedTuple, TypeAlias

from feed_service.core.event_kinds import EVENT_KINDS, MAX_INT64, TYPES, EventKind, FieldSpec, kind_of
from feed_service.core.event_types import (
    BlockChange,
    BlockOp,
    Event,
    FollowChange,
    FollowOp,
    MuteChange,
    MuteOp,
    ProfileVersion,
    RejectCode,
    REBUILD_LINE,
    REBUILD_NEED,
    RefillRequest,
    RepostChange,
    RepostOp,
    TweetDelete,
    TweetUpsert,
)
from feed_service.core.rows import Entry
from feed_service.errors import InvalidEvent

_new = tuple.__new__

__all__ = [
    "BlockChange", "BlockOp", "Event", "FollowChange", "FollowOp", "InvalidEvent", "MuteChange", "MuteOp",
    "ProfileVersion", "RawEvent", "REBUILD_LINE", "REBUILD_NEED", "RejectCode", "RefillRequest", "RepostChange", "RepostOp", "TweetDelete", "TweetUpsert", "content_beats", "content_digest",
    "content_of", "reply_of", "event_to_json", "join_key", "join_keys", "parse_event",
    "profile_of", "tweet_payload_digest", "TweetFields", "content_entry", "fields_of", "no_replies", "parent_author_of",
]

RawEvent: TypeAlias = Mapping[str, Any] | str | bytes | bytearray
"""What :func:`parse_event` accepts: a decoded JSON object or its text."""


_JOIN_KEY_FIELDS: dict[type, tuple[str, ...]] = {kind.cls: kind.join_keys for kind in EVENT_KINDS}


def join_key(event: Event) -> str:
    """Return the author key whose state owns ``event`` (tweets.author_id = follows.followee_id =
    mutes.muted_id); a block has two (:func:`join_keys`) and raises ``ValueError`` here, and so does a
    repost when its kind names two (the registry's ``join_keys``).

    >>> join_key(FollowChange("ann", "bob", 1, "follow"))
    'bob'
    """
    fields = _JOIN_KEY_FIELDS[type(event)]
    if len(fields) != 1:
        raise ValueError(f"a {kind_of(event).type} belongs to {len(fields)} keys, use join_keys: {event!r}")
    return getattr(event, fields[0])


def join_keys(event: Event) -> tuple[str, ...]:
    """Every author key whose state needs ``event``: one, or two for a block (blocker, blocked); a
    repost goes to the keys its kind declares (reposter and original author: docs/event-kinds.md).

    >>> join_keys(BlockChange("ann", "bob", 1, "block"))
    ('ann', 'bob')
    >>> join_keys(MuteChange("ann", "bob", 1, "mute"))
    ('bob',)

    Each key once, should two join-key fields name one user (a user reposting their own tweet).
    """
    names = _JOIN_KEY_FIELDS[type(event)]
    if len(names) == 1:
        return (getattr(event, names[0]),)
    return tuple(dict.fromkeys(getattr(event, name) for name in names))


# --- parsing -----------------------------------------------------------------------------------

_MISSING = object()

MIN_INT64 = -(2**63)


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


def _optional_id(obj: Mapping[str, Any], name: str) -> str | None:
    value = _optional_text(obj, name)
    if value == "":
        raise InvalidEvent("empty_id", f"field {name!r} must not be empty")
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


def _bool(obj: Mapping[str, Any], name: str) -> bool:
    value = _field(obj, name)
    if type(value) is not bool:  # JSON 0, 1 and "true" are not booleans
        raise InvalidEvent("wrong_type", f"field {name!r} must be a boolean, got {_type_name(value)}")
    return value


def _optional_bool(obj: Mapping[str, Any], name: str) -> bool | None:
    value = obj.get(name)
    if value is not None and type(value) is not bool:
        raise InvalidEvent("wrong_type", f"field {name!r} must be a boolean or null, got {_type_name(value)}")
    return value


def _choice_of(spec: FieldSpec) -> Any:
    """The check of a ``choice`` or ``optional_choice`` field: a string among ``spec.choices``."""
    choices, optional = frozenset(spec.choices), not spec.required
    unknown = f"field {spec.name!r} must be one of {spec.choices_text()}"

    def check(obj: Mapping[str, Any], name: str) -> str | None:
        value = obj.get(name) if optional else _field(obj, name)
        if value is None and optional:
            return None
        if type(value) is not str:
            raise InvalidEvent("wrong_type", f"field {name!r} must be a string{' or null' if optional else ''}, "
                                             f"got {_type_name(value)}")
        if value not in choices:
            raise InvalidEvent("unknown_value", unknown)
        return value

    return check


_CHECKS = {"id": _id, "text": _text, "natural": _natural, "bool": _bool, "optional_text": _optional_text,
           "optional_id": _optional_id, "optional_bool": _optional_bool}
"""Field rule (:data:`~feed_service.core.event_kinds.FieldRule`) -> its check (a choice's: :func:`_choice_of`)."""


def _check_of(spec: FieldSpec) -> Any:
    """The check of one field: its rule's, and for an optional field with a default, absent or null
    gives the default."""
    check = _choice_of(spec) if spec.choices else _CHECKS[spec.rule]
    default = spec.default
    if default is None:
        return check

    def with_default(obj: Mapping[str, Any], name: str) -> Any:
        value = check(obj, name)
        return default if value is None else value

    return with_default


class _KindParser:
    """One (kind, op)'s parser, built once from its declaration: the checks of the fields the op
    carries, in order, then the groups of fields that go together, then the self-edge rule."""

    __slots__ = ("cls", "type", "checks", "op", "together", "edge")

    def __init__(self, kind: EventKind, op: str | None) -> None:
        self.cls = kind.cls
        self.type = kind.type
        self.checks = tuple((f.name, _check_of(f)) for f in kind.fields_of(op))
        self.op = kind.carries_op
        self.together = kind.together
        self.edge = kind.edge if kind.edge is not None and kind.edge.self_code is not None else None

    def __call__(self, obj: Mapping[str, Any], op: str | None) -> Event:
        values = {name: check(obj, name) for name, check in self.checks}
        for group in self.together:
            given = [name for name in group.names if values[name] is not None]
            if given and len(given) < len(group.names):
                missing = next(name for name in group.names if values[name] is None)
                raise InvalidEvent(group.code, group.reason(given[0], missing))
        edge = self.edge
        if edge is not None and values[edge.subject] == values[edge.target]:
            raise InvalidEvent(edge.self_code, f"self-{self.type} of {values[edge.subject]!r}")  # type: ignore[arg-type]
        if self.op:
            values["op"] = op
        return self.cls(**values)


_PARSERS: dict[str, dict[str, _KindParser] | _KindParser] = {
    type_: ({op: _KindParser(kind, op) for kind in kinds for op in kind.ops} if kinds[0].ops
            else _KindParser(kinds[0], None))
    for type_, kinds in TYPES.items()
}
"""Envelope ``type`` -> its parser, or for a type with ops, ``op`` -> its parser."""


def parse_event(raw: RawEvent) -> Event:
    """Validate one envelope and return its event, or raise :class:`InvalidEvent` with a reason.

    The checks run in the order the stream's native parser applies them (``spark_jobs/envelope.py``),
    so both give the same code and reason for the same record: type, op, the fields the op carries in
    declaration order, the fields that go together (a reply's parent), the self-edge rule.

    >>> parse_event('{"type":"follow","op":"follow","follower_id":"a","followee_id":"b","version":3}')
    FollowChange(follower_id='a', followee_id='b', version=3, op='follow', show_reposts=True)
    >>> parse_event({"type": "profile", "user_id": "a", "version": True, "display_name": "A"})
    Traceback (most recent call last):
    ...
    feed_service.errors.InvalidEvent: field 'version' must be an integer, got bool
    """
    obj = _loads(raw) if isinstance(raw, (str, bytes, bytearray)) else raw
    if not isinstance(obj, Mapping):
        raise InvalidEvent("not_object", f"event must be a JSON object, got {_type_name(obj)}")
    kind = _field(obj, "type")
    parser = _PARSERS.get(kind) if type(kind) is str else None
    if parser is None:
        raise InvalidEvent("unknown_type", f"unknown event type {kind!r}")
    if isinstance(parser, _KindParser):
        return parser(obj, None)
    op = _field(obj, "op")
    by_op = parser.get(op) if type(op) is str else None
    if by_op is None:
        raise InvalidEvent("unknown_op", f"unknown {kind} op {op!r}")
    return by_op(obj, op)


_ENVELOPE_FIELDS: dict[type, tuple[str | None, tuple[FieldSpec, ...]]] = {
    kind.cls: (None if kind.carries_op else next(iter(kind.ops), None), kind.fields) for kind in EVENT_KINDS
}
"""Class -> (the op its envelope carries when the class has no ``op`` field, its fields)."""


def event_to_json(event: Event) -> dict[str, Any]:
    """Return the envelope of ``event`` (inverse of :func:`parse_event`), for replay files and tests.

    An optional field that is ``None`` is left out, and so is a field the op does not carry (an
    unrepost's ``created_at``); one with a default is written out (a follow's ``show_reposts``).
    """
    kind = kind_of(event)
    fixed_op, specs = _ENVELOPE_FIELDS[type(event)]
    out: dict[str, Any] = {"type": kind.type}
    op = None
    if kind.ops:
        op = out["op"] = fixed_op if fixed_op is not None else event.op  # type: ignore[union-attr]
    for spec in specs:
        if not spec.carried_by(op):
            continue
        value = getattr(event, spec.name)
        if value is not None or spec.required:
            out[spec.name] = value
    return out


# --- version-ordering rules ------------------------------------------------------------------------

TweetContent: TypeAlias = tuple
"""A tweet's winning upsert as kept in state: ``(version, created_at, text, profile_version)``, and
for a reply two more, ``in_reply_to_tweet_id, in_reply_to_author_id``. A non-reply keeps the
four-tuple (and its digest) it had before replies existed, so states and cold digests stored then
still compare equal (docs/reposts-and-replies.md). Read it by name through :class:`TweetFields`."""

Profile: TypeAlias = tuple[str, str | None, str | None]
"""(display_name, avatar_url, bio): one profile version's payload."""


def tweet_payload_digest(created_at: int, text: str, profile_version: int,
                         reply_to: tuple[str, str] | None = None) -> int:
    """Break ties between different upserts of one tweet at the same version: the greater digest wins.

    A digest rather than the payload itself so that a tweet that has left the per-author state
    (beyond the inbox cap) can still be compared: the state keeps its (version, digest) only.
    64-bit BLAKE2b over a canonical encoding; equal payloads give equal digests, so duplicates are
    no-ops.
    """
    blob = b"%d\x00%d\x00" % (created_at, profile_version) + text.encode("utf-8", "surrogatepass")
    if reply_to is not None:  # a reply's parent is content too; a non-reply's digest is unchanged
        blob += b"\x00\x01" + "\x00".join(reply_to).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "big")


def content_of(event: TweetUpsert | Entry) -> TweetContent:
    """Return the state form of an upsert (or of a timeline entry's tweet)."""
    parent = getattr(event, "in_reply_to_tweet_id", None)
    if parent is None:
        return (event.version, event.created_at, event.text, event.profile_version)
    return (event.version, event.created_at, event.text, event.profile_version, parent, event.in_reply_to_author_id)


class TweetFields(NamedTuple):
    """A stored :data:`TweetContent` read by name (:func:`fields_of`): the one place that knows its
    layout. The state keeps the plain tuple, which pickles as a tuple and reads by position in C
    (docs/join-engine.md, "Named records on the hot path"); code off the hot path reads this record,
    code on it reads through :func:`parent_author_of` and :func:`content_entry`."""

    version: int
    created_at: int
    text: str
    profile_version: int
    in_reply_to_tweet_id: str | None = None
    in_reply_to_author_id: str | None = None


_NO_PARENT = (None, None)


def fields_of(content: TweetContent) -> TweetFields:
    """``content`` as a :class:`TweetFields` (a non-reply's parent fields None).

    >>> fields_of((3, 10, "hi", 1)).in_reply_to_author_id is None
    True
    >>> fields_of((3, 10, "hi", 1, "t0", "cat")).in_reply_to_author_id
    'cat'
    """
    return _new(TweetFields, content if len(content) > 4 else content + _NO_PARENT)


def parent_author_of(content: TweetContent) -> str | None:
    """The author a stored content replies to, None for a non-reply (:attr:`TweetFields.in_reply_to_author_id`)."""
    return content[5] if len(content) > 4 else None


def no_replies(contents: Collection[TweetContent]) -> bool:
    """Whether none of ``contents`` is a reply (every one the four-field layout), without a frame per item.

    >>> no_replies([(3, 10, "hi", 1)]), no_replies([(3, 10, "hi", 1), (3, 10, "re", 1, "t0", "cat")])
    (True, False)
    """
    return sum(map(len, contents)) == 4 * len(contents)


def reply_of(content: TweetContent) -> tuple[str, str] | None:
    """``(in_reply_to_tweet_id, in_reply_to_author_id)`` of a stored content, None for a non-reply."""
    return (content[4], content[5]) if len(content) > 4 else None


def content_entry(tweet_id: str, author_id: str, content: TweetContent) -> Entry:
    """The timeline entry of a stored content (no repost), built without the constructor's frame
    (hot: one per output row).

    >>> content_entry("t1", "ann", (3, 10, "hi", 1, "t0", "cat")).in_reply_to_author_id
    'cat'
    """
    c = content
    if len(c) == 4:
        return _new(Entry, (tweet_id, author_id, c[1], c[0], c[2], c[3], None, None, None, None, None))
    return _new(Entry, (tweet_id, author_id, c[1], c[0], c[2], c[3], c[4], c[5], None, None, None))


def content_digest(content: TweetContent) -> int:
    """:func:`tweet_payload_digest` of a stored content tuple."""
    return tweet_payload_digest(content[1], content[2], content[3], reply_of(content))


def content_beats(new: TweetContent, old: TweetContent) -> bool:
    """Whether upsert content ``new`` replaces ``old``: higher version, or same version and greater digest."""
    if new[0] != old[0]:
        return new[0] > old[0]
    return new != old and content_digest(new) > content_digest(old)


def profile_of(event: ProfileVersion) -> Profile:
    """Return the state form of a profile version."""
    return (event.display_name, event.avatar_url, event.bio)
