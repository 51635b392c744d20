"""The registry of event kinds: every envelope ``(type, op)`` declared once.

A kind names its envelope fields with their rule, the self-edge rule, the join keys, the op that
wins a version tie, its topic and its record key. Everything that reads or writes envelopes reads
this table instead of spelling the contract again:

- :func:`feed_service.core.events.parse_event` and :func:`~feed_service.core.events.event_to_json`;
- the stream's native parser (``spark_jobs/envelope.py``: field checks, join-key column, routing);
- the JSON Schema ``schemas/events/event.schema.json`` (:func:`feed_service.core.event_schema.event_json_schema`; a unit test holds
  the file equal to it, ``feedctl schema events`` prints it);
- record keys and topics (``feed_service/kafka/keys.py``), the backfill's winners per edge, the
  workload generator and ``feedctl publish``.

So a new kind is one declaration here plus its meaning in the engine (docs/event-kinds.md walks
through one). The engine's own semantics (which state a change touches) stay in ``core/join``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields as dataclass_fields
from typing import Any, Literal, Mapping, TypeAlias

from feed_service.core.event_types import (
    BlockChange,
    Event,
    Exclusion,
    FollowChange,
    ListChange,
    ListFollow,
    ListMemberChange,
    MuteChange,
    ProfileVersion,
    RejectCode,
    RefillRequest,
    RepostChange,
    TweetDelete,
    TweetUpsert,
)

FieldRule: TypeAlias = Literal["id", "text", "natural", "bool", "choice", "optional_text", "optional_id",
                                "optional_bool", "optional_choice"]
"""How a field is checked: ``id`` a non-empty string (in a kind producers write, not starting with
:data:`RESERVED_ID_PREFIX`: ``reserved_id``), ``text`` a string, ``natural`` a signed 64-bit
integer >= 0 (JSON ``true`` and ``1.0`` are not integers), ``bool`` a JSON ``true`` or ``false`` (``0``,
``1`` and ``"true"`` are not booleans), ``choice`` a string among the field's ``choices`` (another string:
``unknown_value``), ``optional_text`` a string, null or absent, ``optional_id`` a non-empty string, null
or absent, ``optional_bool`` and ``optional_choice`` as ``bool`` and ``choice`` or null or absent (null
and absent both mean absent: the field's ``default``)."""

OPTIONAL_RULES: frozenset[str] = frozenset({"optional_text", "optional_id", "optional_bool", "optional_choice"})
"""The rules a field may be absent under."""

BOOL_RULES: frozenset[str] = frozenset({"bool", "optional_bool"})
"""The rules of a JSON boolean (a ``boolean`` column)."""

CHOICE_RULES: frozenset[str] = frozenset({"choice", "optional_choice"})
"""The rules of a string among ``FieldSpec.choices``."""

RULE_REJECT_CODES: dict[str, frozenset[str]] = {
    "id": frozenset({"missing_field", "wrong_type", "empty_id"}),
    "text": frozenset({"missing_field", "wrong_type"}),
    "natural": frozenset({"missing_field", "wrong_type", "negative_value"}),
    "bool": frozenset({"missing_field", "wrong_type"}),
    "choice": frozenset({"missing_field", "wrong_type", "unknown_value"}),
    "optional_text": frozenset({"wrong_type"}),
    "optional_id": frozenset({"wrong_type", "empty_id"}),
    "optional_bool": frozenset({"wrong_type"}),
    "optional_choice": frozenset({"wrong_type", "unknown_value"}),
}
"""The reject codes a field of each rule can give (and ``reserved_id``, :attr:`EventKind.reserves_ids`)."""

RESERVED_ID_PREFIX = "\u001f"
"""What no id of a kind producers write may start with (U+001F, a control character): the namespace of
the stream's own ids, the lists' virtual readers (:mod:`feed_service.core.list_readers`)."""

RESERVED_ID_RULES: frozenset[str] = frozenset({"id", "optional_id"})
"""The rules whose values :data:`RESERVED_ID_PREFIX` is reserved in."""


def reserved_id_reason(name: str) -> str:
    """The reason of a ``reserved_id`` reject, the same in both parsers."""
    return f"field '{name}' must not start with U+001F (reserved for the stream's own ids)"

MAX_INT64 = 2**63 - 1
"""Largest version or timestamp accepted: what Cassandra's ``bigint`` and Spark's ``LongType`` hold."""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One envelope field: its name, its rule and, for the JSON Schema, what it means."""

    name: str
    rule: FieldRule
    description: str = ""
    ops: tuple[str, ...] = ()
    """The ops whose envelopes carry the field; empty: every op of the kind. Under any other op the
    field is not read at all (present or not, whatever its value: like an unknown extra field)."""
    since: int = 0
    """The registry revision that added the field's column: the stream's event columns are ordered
    by it first (:data:`ENVELOPE_COLUMNS`), so a field added to an old kind still comes after every
    older column (a stream checkpoint holds their order). 0: the first five tables; 1: replies and
    reposts; 2: refill requests; 3: a follow's show_reposts, lists, list members and the stream's list edges."""
    choices: tuple[str, ...] = ()
    """The values a ``choice`` or ``optional_choice`` field may take (none for the other rules)."""
    default: Any = None
    """What an optional field absent or null means: the parsed event holds it (None: absent). The
    dataclass field declares the same default (``_check_registry`` holds them equal)."""

    @property
    def sql_type(self) -> str:
        """The Spark SQL type of the field's column in the stream."""
        if self.rule == "natural":
            return "bigint"
        return "boolean" if self.rule in BOOL_RULES else "string"

    def choices_text(self) -> str:
        """The allowed values as reject reasons name them: ``followed, list, none``."""
        return ", ".join(self.choices)

    @property
    def required(self) -> bool:
        """Whether an envelope (of an op that carries the field) must hold it."""
        return self.rule not in OPTIONAL_RULES

    def carried_by(self, op: str | None) -> bool:
        """Whether an envelope with ``op`` carries this field (``op`` None: a kind without ops)."""
        return not self.ops or op in self.ops


@dataclass(frozen=True, slots=True)
class Together:
    """Optional fields given all together or not at all (a reply's parent tweet and its author).

    Checked after every field, before the self-edge rule; the first field given and the first one
    missing (declaration order) name the fault. Null counts as missing, as for any optional field.
    """

    names: tuple[str, ...]
    code: RejectCode
    """The reject code of a record that gives some of the fields but not all."""

    def reason(self, given: str, missing: str) -> str:
        """The reject reason, the same in both parsers."""
        return f"field {given!r} needs {missing!r}: give all of {', '.join(self.names)} or none"


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
    """The op that wins a version tie between two changes of one entity (an edge; a list: delete)."""
    edge: EdgeShape | None = None
    together: tuple[Together, ...] = ()
    """Groups of optional fields that go together (a reply's ``in_reply_to_*``)."""
    internal: bool = False
    """Whether the stream writes it for itself (a refill request): not a changelog of a table, so the
    backfill never reads its topic and producers never write it."""
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
    def reserves_ids(self) -> bool:
        """Whether its ids must not start with :data:`RESERVED_ID_PREFIX` (``reserved_id``): every kind
        producers write; the stream's own kinds carry its reserved ids (a list's reader)."""
        return not self.internal

    @property
    def reject_codes(self) -> frozenset[str]:
        """The reject codes a record of this kind can get once its ``type`` is known."""
        codes = {"missing_field", "wrong_type"}
        for f in self.fields:
            codes.update(RULE_REJECT_CODES[f.rule])
            if self.reserves_ids and f.rule in RESERVED_ID_RULES:
                codes.add("reserved_id")
        if self.ops:
            codes.add("unknown_op")
        if self.edge is not None and self.edge.self_code is not None:
            codes.add(self.edge.self_code)
        codes.update(group.code for group in self.together)
        return frozenset(codes)

    def fields_of(self, op: str | None) -> tuple[FieldSpec, ...]:
        """The fields an envelope with ``op`` carries, in checking order."""
        return tuple(f for f in self.fields if f.carried_by(op))


def _version(meaning: str = "Per-entity version; the highest wins.") -> FieldSpec:
    return FieldSpec("version", "natural", meaning)


def _edge_kind(type_: str, cls: type, subject: str, target: str, self_code: RejectCode, *, ops: dict[str, str],
               tie_winner: str, join_keys: tuple[str, ...], topic_role: str, title: str,
               description: str, extra: tuple[FieldSpec, ...] = ()) -> EventKind:
    return EventKind(
        type=type_, cls=cls, ops=ops, tie_winner=tie_winner, edge=EdgeShape(subject, target, self_code),
        fields=(FieldSpec(subject, "id"), FieldSpec(target, "id"), _version(), *extra),
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
                          "joined at read time."),
                FieldSpec("in_reply_to_tweet_id", "optional_id",
                          "A reply's parent tweet; null or absent: not a reply. Given with in_reply_to_author_id.",
                          since=1),
                FieldSpec("in_reply_to_author_id", "optional_id",
                          "Author of a reply's parent tweet; null or absent: not a reply. Given with "
                          "in_reply_to_tweet_id.", since=1)),
        together=(Together(("in_reply_to_tweet_id", "in_reply_to_author_id"), "incomplete_reply"),),
        join_keys=("author_id",), topic_role="tweets", record_key=("tweet_id",),
        title="tweet upsert",
        description="A tweet's content at a version. Content = the highest-version upsert; a delete of the "
                    "tweet, at any version, wins over every upsert. A reply names its parent tweet and that "
                    "tweet's author (both or neither); they are content like the text.",
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
                    "change is a follow; on a version tie unfollow wins. A follow's show_reposts (default "
                    "true) says whether the followee's reposts show in the follower's home timeline; an "
                    "unfollow does not carry it.",
        extra=(FieldSpec("show_reposts", "optional_bool",
                         "Whether the followee's reposts show in the follower's home timeline; null or absent: "
                         "true.", ops=("follow",), since=3, default=True),),
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
    EventKind(
        type="repost", cls=RepostChange,
        ops={"repost": "repost a tweet: it shows on the reposter's behalf", "unrepost": "take a repost back"},
        tie_winner="unrepost",
        # No self-edge rule: the two ends are a user and a tweet, and reposting one's own tweet is allowed.
        edge=EdgeShape("reposter_id", "tweet_id"),
        fields=(FieldSpec("reposter_id", "id", since=1), FieldSpec("tweet_id", "id"),
                FieldSpec("author_id", "id", "Author of the reposted (original) tweet."),
                _version(),
                FieldSpec("created_at", "natural", "Milliseconds since the epoch: the time of the repost.",
                          ops=("repost",)),
                FieldSpec("profile_version", "natural",
                          "Version of the reposter's profile shown with the repost.", ops=("repost",))),
        join_keys=("reposter_id", "author_id"), topic_role="reposts", record_key=("reposter_id", "tweet_id"),
        keyed_by_type=True, title="repost or unrepost",
        description="Sets the edge reposter_id -> tweet_id (author_id: the original's author). The edge is a "
                    "repost iff its highest-version change is a repost; on a version tie unrepost wins. The "
                    "winning repost's created_at is the repost time, its profile_version the reposter's profile "
                    "shown with it. An unrepost carries neither (they are ignored if present).",
    ),
    EventKind(
        type="list", cls=ListChange,
        ops={"create": "create or update a list", "delete": "delete a list"},
        tie_winner="delete",
        fields=(FieldSpec("list_id", "id", "The list.", since=3),
                FieldSpec("owner_id", "id", "The user who owns the list.", since=3),
                _version("Per-list version; the highest wins."),
                FieldSpec("name", "text", "The list's name.", ops=("create",), since=3),
                FieldSpec("replies_policy", "optional_choice",
                          "Which replies the list's timeline shows: to followed users, to the list's members, "
                          "or none; null or absent: list.", ops=("create",), since=3,
                          choices=("followed", "list", "none"), default="list"),
                FieldSpec("exclusive", "optional_bool",
                          "Whether the members' posts leave the owner's home timeline; null or absent: false.",
                          ops=("create",), since=3, default=False)),
        join_keys=("owner_id",), topic_role="lists", record_key=("list_id",),
        title="list create or delete",
        description="create also updates: the highest version wins, delete wins a tie; two creates at one "
                    "version: the greater (name, replies_policy, exclusive) wins",
    ),
    EventKind(
        type="list_member", cls=ListMemberChange,
        ops={"add": "add a user to a list", "remove": "remove a user from a list"},
        tie_winner="remove",
        # No self-edge rule: the two ends are a list and a user.
        edge=EdgeShape("list_id", "member_id"),
        fields=(FieldSpec("list_id", "id", "The list."), FieldSpec("member_id", "id", "The user.", since=3),
                _version("Per-membership version; the highest wins.")),
        join_keys=("member_id",), topic_role="list_members", record_key=("list_id", "member_id"),
        title="list member add or remove",
        description="Sets the edge list_id -> member_id. The user is a member iff the edge's highest-version "
                    "change is an add; on a version tie remove wins.",
    ),
    EventKind(
        type="refill", cls=RefillRequest,
        fields=(FieldSpec("reader_id", "id", "The reader whose inbox is refilled.", since=2),
                FieldSpec("author_id", "id", "The push author asked to write the rows again."),
                FieldSpec("below_created_at", "natural", "The inbox's cut line: rows strictly below "
                          "(below_created_at, below_tweet_id) are written again.", since=2),
                FieldSpec("below_tweet_id", "id", "The cut line's tweet id.", since=2),
                FieldSpec("need", "natural", "How many rows at most: the inbox's shortfall below the cap.",
                          since=2)),
        join_keys=("author_id",), topic_role="refills", record_key=("reader_id", "author_id"), internal=True,
        title="refill request (internal)",
        description="Written by the stream itself, never by producers: asks an author key to write a "
                    "trimmed inbox's rows again below its cut line after removals (docs/trimming.md#refill). "
                    "It changes no table, so the view is the same with or without it.",
    ),
    EventKind(
        type="list_follow", cls=ListFollow,
        ops={"follow": "a list's reader follows a member of the list", "unfollow": "it no longer does"},
        tie_winner="unfollow",
        # No self-edge rule: the two ends are a list's virtual reader and a user.
        edge=EdgeShape("reader_id", "member_id"),
        fields=(FieldSpec("reader_id", "id", "The list's virtual reader (docs/lists.md#in-the-engine)."),
                FieldSpec("member_id", "id", "The member."),
                FieldSpec("owner_id", "id", "The list's owner, whose mutes and blocks the reader has."),
                FieldSpec("list_id", "id", "The list."),
                _version("The per-reader stage's clock; the highest wins.")),
        join_keys=("member_id",), topic_role="list_edges", record_key=("reader_id", "member_id"),
        internal=True, keyed_by_type=True, title="list follow (internal)",
        description="Written by the stream itself, never by producers: the per-reader stage's derived edge "
                    "reader_id -> member_id, in force iff the member is a member of the live list list_id "
                    "(docs/lists.md#in-the-engine); on a version tie unfollow wins.",
    ),
    EventKind(
        type="exclusion", cls=Exclusion,
        ops={"exclude": "set a member aside from its owner's home timeline", "include": "end that"},
        tie_winner="exclude",
        # No self-edge rule: an owner may be a member of its own exclusive list.
        edge=EdgeShape("owner_id", "member_id"),
        fields=(FieldSpec("owner_id", "id", "The owner of the exclusive lists."),
                FieldSpec("member_id", "id", "The member set aside."),
                _version("The per-reader stage's clock; the highest wins.")),
        join_keys=("member_id",), topic_role="list_edges", record_key=("owner_id", "member_id"),
        internal=True, keyed_by_type=True, title="exclusion (internal)",
        description="Written by the stream itself, never by producers: the per-reader stage's derived edge "
                    "owner_id -> member_id, in force iff the member is in some live exclusive list of the "
                    "owner (docs/lists.md#exclusive-lists); on a version tie exclude wins.",
    ),
)
"""Every kind, in declaration order: the order fields are checked in, and (with ``FieldSpec.since``)
of the stream's event columns (changing it changes them)."""

KIND_OF_CLASS: dict[type, EventKind] = {kind.cls: kind for kind in EVENT_KINDS}

TYPES: dict[str, tuple[EventKind, ...]] = {}
"""Envelope ``type`` -> its kinds (tweet has two: upsert and delete), in declaration order."""
for _kind in EVENT_KINDS:
    TYPES[_kind.type] = (*TYPES.get(_kind.type, ()), _kind)
del _kind

EDGE_KINDS: dict[str, EventKind] = {kind.type: kind for kind in EVENT_KINDS if kind.edge is not None}
"""The kinds that set an edge (follow, block, mute, repost, list_member, and the stream's own
list_follow and exclusion), by type."""

HIDE_KINDS: dict[str, EventKind] = {t: k for t, k in EDGE_KINDS.items() if k.tie_winner == k.on_op and not k.internal}
"""The edges that hide tweets (block, mute): their hiding op wins a tie, the safer side (of the
changelogs: the stream's own exclusion is not a user's hide)."""

BASE_REJECT_CODES: frozenset[str] = frozenset({"bad_json", "not_object", "missing_field", "unknown_type"})
"""Reject codes of a record whose kind is not known yet."""

def _envelope_columns() -> tuple[tuple[str, str], ...]:
    first: dict[tuple[str, str], int] = {}
    for kind in EVENT_KINDS:
        for f in kind.fields:
            first.setdefault((f.name, f.sql_type), f.since)
    return (("type", "string"), ("op", "string"), *sorted(first, key=first.__getitem__))  # sorted is stable


ENVELOPE_COLUMNS: tuple[tuple[str, str], ...] = _envelope_columns()
"""(name, Spark SQL type) of every envelope field, each once: the stream's typed event columns, in
order of ``FieldSpec.since``, then of first declaration."""

TOPIC_ROLES: tuple[str, ...] = tuple(dict.fromkeys(kind.topic_role for kind in EVENT_KINDS))
"""The roles of the topics the stream reads (``schemas/topics.json``), in registry order."""

CHANGELOG_ROLES: tuple[str, ...] = tuple(dict.fromkeys(kind.topic_role for kind in EVENT_KINDS if not kind.internal))
"""The changelog topics' roles: the tables' changes, what the backfill reads and producers write
(``TOPIC_ROLES`` less the stream's own internal topics)."""


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
    sql_types: dict[str, str] = {}
    for kind in EVENT_KINDS:
        every_op = {f.name for f in kind.fields if not f.ops}
        for name in (*kind.join_keys, *kind.record_key):
            if name not in every_op:
                raise AssertionError(f"{kind.key}: {name!r} is not one of the fields of its every op")
        if kind.edge is not None and (len(kind.ops) != 2 or kind.tie_winner not in kind.ops):
            raise AssertionError(f"{kind.key}: an edge has an on and an off op, one of which wins a tie")
        if kind.tie_winner is not None and kind.tie_winner not in kind.ops:
            raise AssertionError(f"{kind.key}: the tie winner {kind.tie_winner!r} is not one of its ops")
        defaults = {f.name: f.default for f in dataclass_fields(kind.cls)}
        for f in kind.fields:
            if not set(f.ops) <= set(kind.ops):
                raise AssertionError(f"{kind.key}: field {f.name!r} names ops the kind does not have")
            if bool(f.choices) != (f.rule in CHOICE_RULES) or len(set(f.choices)) != len(f.choices):
                raise AssertionError(f"{kind.key}: field {f.name!r}: choices belong to a choice rule, each once")
            if f.default is not None and (f.required or (f.rule in CHOICE_RULES and f.default not in f.choices)
                                          or (f.rule in BOOL_RULES and type(f.default) is not bool)):
                raise AssertionError(f"{kind.key}: field {f.name!r}: a default belongs to an optional field, "
                                     "and is one of its values")
            if f.default is not None and defaults.get(f.name) != f.default:
                raise AssertionError(f"{kind.key}: field {f.name!r}: the dataclass default must be {f.default!r}")
            if sql_types.setdefault(f.name, f.sql_type) != f.sql_type:
                raise AssertionError(f"field {f.name!r}: one column, so one type in every kind")
        for group in kind.together:
            specs = [f for f in kind.fields if f.name in group.names]
            if len(specs) != len(group.names) or len(specs) < 2 or any(f.required or f.ops or f.default is not None
                                                                        for f in specs):
                raise AssertionError(f"{kind.key}: a group of {group.names} needs two or more optional fields "
                                     "of every op")


_check_registry()
