"""The registry of event kinds: every envelope ``(type, op)`` declared once.

A kind names its envelope fields with their rule, the self-edge rule, the join keys, the op that
wins a version tie, its topic and its record key. Everything that reads or writes envelopes reads
this table instead of spelling the contract again:

- :func:`feed_service.core.events.parse_event` and :func:`~feed_service.core.events.event_to_json`;
- the stream's native parser (``spark_jobs/envelope.py``: field checks, join-key column, routing);
- the JSON Schema ``schemas/events/event.schema.json`` (:func:`event_json_schema`; a unit test holds
  the file equal to it, ``feedctl schema events`` prints it);
- record keys and topics (``feed_service/kafka/keys.py``), the backfill's winners per edge, the
  workload generator and ``feedctl publish``.

So a new kind is one declaration here plus its meaning in the engine (docs/event-kinds.md walks
through one). The engine's own semantics (which state a change touches) stay in ``core/join``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields as dataclass_fields
from typing import Any, Literal, Mapping, TypeAlias

from feed_service.core.event_types import (
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    RejectCode,
    TweetDelete,
    TweetUpsert,
)

FieldRule: TypeAlias = Literal["id", "text", "natural", "optional_text"]
"""How a field is checked: ``id`` a non-empty string, ``text`` a string, ``natural`` a signed 64-bit
integer >= 0 (JSON ``true`` and ``1.0`` are not integers), ``optional_text`` a string, null or absent."""

MAX_INT64 = 2**63 - 1
"""Largest version or timestamp accepted: what Cassandra's ``bigint`` and Spark's ``LongType`` hold."""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One envelope field: its name, its rule and, for the JSON Schema, what it means."""

    name: str
    rule: FieldRule
    description: str = ""

    @property
    def sql_type(self) -> str:
        """The Spark SQL type of the field's column in the stream."""
        return "bigint" if self.rule == "natural" else "string"

    @property
    def required(self) -> bool:
        return self.rule != "optional_text"


@dataclass(frozen=True, slots=True)
class EdgeShape:
    """A kind that sets an edge ``subject -> target``: the two id fields and the self-edge rule."""

    subject: str
    target: str
    self_code: RejectCode | None = None
    """The reject code of an edge whose two ends are the same user; None: no such rule (the two
    ends name different things, e.g. a user and a tweet)."""


@dataclass(frozen=True)
class EventKind:
    """One kind of change event: one dataclass of :mod:`~feed_service.core.event_types`."""

    type: str
    """The envelope's ``type``."""
    cls: type
    """What the parser returns for it."""
    fields: tuple[FieldSpec, ...]
    """Checked in this order (the first fault decides the reject code), after ``type`` and ``op``."""
    join_keys: tuple[str, ...]
    """Fields naming the author keys whose state needs the change (two for a block)."""
    topic_role: str
    """``Settings.topics`` role of the topic it is published to."""
    record_key: tuple[str, ...]
    """Fields of the Kafka record key: the entity whose latest record compaction keeps."""
    ops: Mapping[str, str] = field(default_factory=dict)
    """The envelope's ``op`` values of this kind, each with what it does; empty when the type has no op.
    For an edge the first op turns the edge on (follow, block, mute), the second off."""
    tie_winner: str | None = None
    """For an edge: the op that wins a version tie between two changes of one edge."""
    edge: EdgeShape | None = None
    keyed_by_type: bool = False
    """Whether the record key starts with ``type``: kinds sharing a topic keep their entities apart."""
    title: str = ""
    description: str = ""

    @property
    def key(self) -> str:
        """``type`` or ``type:op``: what names the kind in a table (its JSON Schema definition too)."""
        return self.type if len(self.ops) != 1 else f"{self.type}:{next(iter(self.ops))}"

    @property
    def carries_op(self) -> bool:
        """Whether the dataclass keeps the ``op`` (a kind with one op does not need to)."""
        return any(f.name == "op" for f in dataclass_fields(self.cls))

    @property
    def on_op(self) -> str:
        """The op that turns an edge on (``follow``, ``block``, ``mute``)."""
        return next(iter(self.ops))

    @property
    def off_op(self) -> str:
        """The op that turns an edge off (``unfollow``, ``unblock``, ``unmute``)."""
        return list(self.ops)[1]

    @property
    def reject_codes(self) -> frozenset[str]:
        """The reject codes a record of this kind can get once its ``type`` is known."""
        codes = {"missing_field", "wrong_type"}
        rules = {f.rule for f in self.fields}
        if "id" in rules:
            codes.add("empty_id")
        if "natural" in rules:
            codes.add("negative_value")
        if self.ops:
            codes.add("unknown_op")
        if self.edge is not None and self.edge.self_code is not None:
            codes.add(self.edge.self_code)
        return frozenset(codes)


def _version(meaning: str = "Per-entity version; the highest wins.") -> FieldSpec:
    return FieldSpec("version", "natural", meaning)


def _edge_kind(type_: str, cls: type, subject: str, target: str, self_code: RejectCode, *, ops: dict[str, str],
               tie_winner: str, join_keys: tuple[str, ...], topic_role: str, title: str,
               description: str) -> EventKind:
    return EventKind(
        type=type_, cls=cls, ops=ops, tie_winner=tie_winner, edge=EdgeShape(subject, target, self_code),
        fields=(FieldSpec(subject, "id"), FieldSpec(target, "id"), _version()),
        join_keys=join_keys, topic_role=topic_role, record_key=(subject, target),
        keyed_by_type=topic_role == "blocks_mutes", title=title, description=description,
    )


EVENT_KINDS: tuple[EventKind, ...] = (
    EventKind(
        type="tweet", cls=TweetUpsert, ops={"upsert": "a tweet's content at a version"},
        fields=(FieldSpec("tweet_id", "id"), FieldSpec("author_id", "id"), _version(),
                FieldSpec("created_at", "natural",
                          "Milliseconds since the epoch; timeline order is (created_at, tweet_id) descending."),
                FieldSpec("text", "text"),
                FieldSpec("profile_version", "natural",
                          "Version of the author's profile the tweet was written under; its display_name is "
                          "joined at read time.")),
        join_keys=("author_id",), topic_role="tweets", record_key=("tweet_id",),
        title="tweet upsert",
        description="A tweet's content at a version. Content = the highest-version upsert; a delete of the "
                    "tweet, at any version, wins over every upsert.",
    ),
    EventKind(
        type="tweet", cls=TweetDelete, ops={"delete": "delete a tweet for good"},
        fields=(FieldSpec("tweet_id", "id"), FieldSpec("author_id", "id"), _version()),
        join_keys=("author_id",), topic_role="tweets", record_key=("tweet_id",),
        title="tweet delete", description="Deletes a tweet for good, whatever its version.",
    ),
    _edge_kind(
        "follow", FollowChange, "follower_id", "followee_id", "self_follow",
        ops={"follow": "follow a user", "unfollow": "unfollow a user"}, tie_winner="unfollow",
        join_keys=("followee_id",), topic_role="follows", title="follow or unfollow",
        description="Sets the edge follower_id -> followee_id. The edge is active iff its highest-version "
                    "change is a follow; on a version tie unfollow wins.",
    ),
    EventKind(
        type="profile", cls=ProfileVersion,
        fields=(FieldSpec("user_id", "id"), _version(), FieldSpec("display_name", "text"),
                FieldSpec("avatar_url", "optional_text"), FieldSpec("bio", "optional_text")),
        join_keys=("user_id",), topic_role="profiles", record_key=("user_id", "version"),
        title="profile version",
        description="One version of a user's profile, stored under (user_id, version). Of two different "
                    "payloads with the same version, the greater by (display_name, avatar_url, bio) wins, "
                    "null below any string.",
    ),
    _edge_kind(
        "block", BlockChange, "blocker_id", "blocked_id", "self_block",
        ops={"block": "block a user: neither sees the other's tweets in home timelines", "unblock": "end a block"},
        tie_winner="block", join_keys=("blocker_id", "blocked_id"), topic_role="blocks_mutes",
        title="block or unblock",
        description="Sets the edge blocker_id -> blocked_id. The block is in force iff the edge's "
                    "highest-version change is a block; on a version tie block wins. A block hides each "
                    "user's tweets from the other's home timeline; follow edges are not changed "
                    "(docs/blocks-and-mutes.md).",
    ),
    _edge_kind(
        "mute", MuteChange, "muter_id", "muted_id", "self_mute",
        ops={"mute": "mute a user: the muted user's tweets leave the muter's home timeline", "unmute": "end a mute"},
        tie_winner="mute", join_keys=("muted_id",), topic_role="blocks_mutes", title="mute or unmute",
        description="Sets the edge muter_id -> muted_id. The mute is in force iff the edge's highest-version "
                    "change is a mute; on a version tie mute wins. A mute hides the muted user's tweets from "
                    "the muter's home timeline only.",
    ),
)
"""Every kind, in the order of the stream's event columns (changing the order changes them)."""

KIND_OF_CLASS: dict[type, EventKind] = {kind.cls: kind for kind in EVENT_KINDS}

TYPES: dict[str, tuple[EventKind, ...]] = {}
"""Envelope ``type`` -> its kinds (tweet has two: upsert and delete), in declaration order."""
for _kind in EVENT_KINDS:
    TYPES[_kind.type] = (*TYPES.get(_kind.type, ()), _kind)
del _kind

EDGE_KINDS: dict[str, EventKind] = {kind.type: kind for kind in EVENT_KINDS if kind.edge is not None}
"""The kinds that set an edge (follow, block, mute), by type."""

HIDE_KINDS: dict[str, EventKind] = {t: k for t, k in EDGE_KINDS.items() if k.tie_winner == k.on_op}
"""The edges that hide tweets (block, mute): their hiding op wins a tie, the safer side."""

BASE_REJECT_CODES: frozenset[str] = frozenset({"bad_json", "not_object", "missing_field", "unknown_type"})
"""Reject codes of a record whose kind is not known yet."""

ENVELOPE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("type", "string"), ("op", "string"),
    *dict.fromkeys((f.name, f.sql_type) for kind in EVENT_KINDS for f in kind.fields),
)
"""(name, Spark SQL type) of every envelope field, each once: the stream's typed event columns."""


def kind_of(event: Event) -> EventKind:
    """The kind of a parsed event."""
    return KIND_OF_CLASS[type(event)]


def type_join_keys(type_: str) -> tuple[str, ...]:
    """The join-key fields of an envelope type (every kind of one type shares them)."""
    return TYPES[type_][0].join_keys


def _check_registry() -> None:
    """Rules of the table itself, checked at import: a broken declaration fails loudly and early."""
    for type_, kinds in TYPES.items():
        if len({k.join_keys for k in kinds}) != 1:
            raise AssertionError(f"kinds of type {type_!r} must share their join keys")
        if len(kinds) > 1 and not all(len(k.ops) == 1 for k in kinds):
            raise AssertionError(f"kinds sharing type {type_!r} must have one op each")
    for kind in EVENT_KINDS:
        names = {f.name for f in kind.fields}
        for name in (*kind.join_keys, *kind.record_key):
            if name not in names:
                raise AssertionError(f"{kind.key}: {name!r} is not one of its fields")
        if kind.edge is not None and (len(kind.ops) != 2 or kind.tie_winner not in kind.ops):
            raise AssertionError(f"{kind.key}: an edge has an on and an off op, one of which wins a tie")


_check_registry()


# --- the JSON Schema -------------------------------------------------------------------------------

SCHEMA_ID = "https://feed-service.invalid/schemas/events/event.schema.json"


def _schema_of_field(spec: FieldSpec) -> dict[str, Any]:
    if spec.rule == "id":
        return {"$ref": "#/$defs/id"}
    if spec.rule == "natural":
        if spec.name == "version":
            return {"$ref": "#/$defs/version"}
        out: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": MAX_INT64}
    elif spec.rule == "text":
        out = {"type": "string"}
    else:
        out = {"type": ["string", "null"]}
    if spec.description:
        out["description"] = spec.description
    return out


def _definition_name(kind: EventKind) -> str:
    """``TweetUpsert`` -> ``tweet_upsert``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind.cls.__name__).lower()


def event_json_schema() -> dict[str, Any]:
    """The JSON Schema of the envelope (draft 2020-12), made from the registry.

    ``schemas/events/event.schema.json`` is this, written out (``feedctl schema events``): the
    published contract for producers that do not use this package.
    """
    defs: dict[str, Any] = {
        "id": {"type": "string", "minLength": 1},
        "version": {"type": "integer", "minimum": 0, "maximum": MAX_INT64,
                    "description": "Per-entity version; the highest wins."},
    }
    for kind in EVENT_KINDS:
        properties: dict[str, Any] = {"type": {"const": kind.type}}
        if kind.ops:
            ops = list(kind.ops)
            properties["op"] = {"const": ops[0]} if len(ops) == 1 else {"enum": ops}
        properties.update((f.name, _schema_of_field(f)) for f in kind.fields)
        required = ["type", *(["op"] if kind.ops else []), *(f.name for f in kind.fields if f.required)]
        defs[_definition_name(kind)] = {"title": kind.title, "description": kind.description, "type": "object",
                                        "required": required, "properties": properties}
    self_rules = " and ".join(f"{k.edge.subject} != {k.edge.target}" for k in EDGE_KINDS.values()
                              if k.edge and k.edge.self_code)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "Change event envelope",
        "description": (
            "One change of the tweets, follows, profiles, blocks or mutes table (docs/design.md): one JSON object "
            "per Kafka record or replay-file line. Unknown extra properties are allowed and ignored. Versions "
            "increase per entity (tweet, follow edge, user profile). Two rules are enforced by "
            "feed_service.core.events.parse_event but not expressible here: " + self_rules + ", and integers "
            "must be written without a fraction or exponent (1.0 is rejected). Generated from "
            "feed_service/core/event_kinds.py (feedctl schema events)."
        ),
        "oneOf": [{"$ref": f"#/$defs/{_definition_name(kind)}"} for kind in EVENT_KINDS],
        "$defs": defs,
    }
