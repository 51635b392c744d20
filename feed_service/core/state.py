"""Per-author-key state of the timeline join, and its byte codec.

One :class:`AuthorState` holds everything the deltas of one author key need (docs/design.md, "one key
holds both sides"): the author's follow edges, the author's newest live tweets up to the inbox cap,
what is known of its older and deleted tweets, its profile versions, and the key's logical clock.

The state is immutable; :func:`feed_service.core.join.step` returns a new one that shares the
containers it did not change. Containers must therefore never be mutated in place.

Codec: one format byte and a pickle (protocol 5) of plain tuples and dicts. Pickle was
measured against json+zlib and marshal in ``bench/bench_engine.py``: it is the fastest to decode of
the portable choices and stable across Python versions (marshal is not). State bytes are only ever
read back by this module, never from outside input.

The state is stored in two parts (:func:`encode_core`, :func:`encode_edges`) so that the cost of a
batch does not grow with what it does not touch: the follow edges of a popular author (a million
entries is a few megabytes) are decoded only when the batch changes edges or fans out
(:func:`feed_service.core.join.needs_edges`); a state decoded without them has placeholders that
fail loudly if the engine ever reaches for them. :func:`encode_state` is the whole state in one
blob (the backfill's bootstrap files, tests).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import AbstractSet, Mapping, TypeAlias

from feed_service.core.events import Profile, TweetContent
from feed_service.core.retention import NO_WATERMARK
from feed_service.errors import EdgesNotLoaded  # raised by the placeholders below; one class in the error tree

# The values inside the state (Edge, HideEdges, ColdTweet, events.TweetContent) are plain tuples read
# by position: they are the codec's format (a NamedTuple pickles as a reference to its class, so
# naming them would change the bytes of every checkpoint), and the engine reads millions of them.
Edge: TypeAlias = tuple[int, bool] | tuple[int, bool, bool]
"""(version, active) of the highest-ranked change of one follow edge, or (version, True, False) for
an active follow with the followee's reposts turned off (:func:`~feed_service.core.rules.follow_edge`);
a block or mute edge is (version, hiding)."""

HideEdges: TypeAlias = tuple["Edge | None", ...]
"""One reader's block and mute edges with this author, each (version, hiding) or None if never seen,
at :data:`MUTES`, :data:`BLOCKS_AUTHOR` and :data:`BLOCKED_BY_AUTHOR`, and, once there is one, the
reader's exclusion of the author at :data:`EXCLUDES` (a fourth item). The reader is hidden from the
author's tweets while any of the first three hides (docs/blocks-and-mutes.md); an exclusion in force
keeps the author's rows out of the reader's home inbox without hiding it (docs/lists.md#exclusive-lists)."""

MUTES = 0
"""Index in :data:`HideEdges` of the reader's mute of the author."""
BLOCKS_AUTHOR = 1
"""Index in :data:`HideEdges` of the reader's block of the author."""
BLOCKED_BY_AUTHOR = 2
"""Index in :data:`HideEdges` of the author's block of the reader."""
EXCLUDES = 3
"""Index in :data:`HideEdges` of the reader's exclusion of the author: the author is a member of one
of the reader's exclusive lists (the list stage's :class:`~feed_service.core.events.Exclusion`)."""
NO_HIDES: HideEdges = (None, None, None)

ColdTweet: TypeAlias = tuple[int, int, int]
"""(version, payload digest, since) of a live tweet that is not among the author's newest ``inbox_cap``;
``since`` is the key's watermark when it went cold (docs/retention.md)."""

STATE_FORMAT = 4
"""First byte of every encoded state or part; bump it when a tuple layout changes."""
_HORIZON_FORMAT = 3
"""The layout before blocks and mutes: edges parts without hide edges."""
_TWO_PART_FORMAT = 2
"""The two-part layout before the history horizon: no watermark, no times on history entries."""
_LEGACY_FORMAT = 1
"""The whole-state layout before pull mode existed (no ``pull`` flag: such keys were push)."""


class _UnloadedFollowers(Mapping):
    """Stands in for ``followers`` when only the core part was decoded."""

    def __getitem__(self, key: str) -> Edge:
        raise EdgesNotLoaded(f"follow edge {key!r} read from a state decoded without edges")

    def __iter__(self):
        raise EdgesNotLoaded("followers iterated in a state decoded without edges")

    def __len__(self) -> int:
        raise EdgesNotLoaded("followers counted in a state decoded without edges")


class UnloadedActive:
    """Stands in for ``active`` when only the core part was decoded: knows its length, nothing else."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self):
        raise EdgesNotLoaded("active followers iterated in a state decoded without edges")

    def __add__(self, other: object):
        raise EdgesNotLoaded("active followers extended in a state decoded without edges")


_UNLOADED_FOLLOWERS = _UnloadedFollowers()
_UNLOADED_HIDES = _UnloadedFollowers()
"""Stands in for ``hides`` and ``hides_dead_at``, which are stored with the follow edges."""

_EMPTY_MAP: Mapping = MappingProxyType({})


@dataclass(frozen=True, slots=True, eq=False, kw_only=True)
class AuthorState:
    """Everything one author key knows; bounded except for the history noted per field.

    - ``followers``: follower -> :data:`Edge` for every edge seen, dead ones included (their
      versions keep a late, older follow from reviving them) until the horizon forgets them.
    - ``active``: the active followers, sorted; derived from ``followers``, kept so that fan-out
      reuses one tuple instead of filtering the edges on every tweet.
    - ``tweets``: tweet_id -> content of the newest live tweets by (created_at, tweet_id), at most
      the inbox cap: an older tweet can never be in any follower's newest-N. Iterates in ascending
      (created_at, tweet_id) order, so the oldest is evicted and backfill walks it backwards
      without sorting (dicts and the codec keep insertion order).
    - ``cold``: tweet_id -> (version, digest, since) of live tweets pushed out of ``tweets``, so a
      late older upsert cannot bring back stale content; forgotten past the horizon.
    - ``deleted``: tweet_id -> since: tombstones (a delete is final); forgotten past the horizon.
    - ``profiles``: version -> profile payload. Grows with the author's profile versions.
    - ``clock``: logical write timestamp of the last step that emitted anything.
    - ``pull``: whether the author was a pull author after its last step (its tweets are merged in
      at read time, not written to inboxes); kept rather than recomputed so that a changed
      threshold moves a key over at its next batch, with a real transition.
    - ``watermark``: the newest event time (Kafka timestamp, ms) the key has seen, or
      ``NO_WATERMARK``; history entries (``cold``, ``deleted``, ``dead_at``) are stamped with it.
    - ``dead_at``: follower -> since, for the inactive edges of ``followers`` (stored with them).
    - ``hides``: reader -> :data:`HideEdges`, the block and mute edges between a user and this
      author (stored with the follow edges); ``hides_dead_at``: reader -> since, for the readers
      none of whose edges hides any more, forgotten past the horizon like dead follow edges.
    - ``seen``: the active followers nothing hides the author from, sorted, when some hidden reader
      is an active follower; None when that is ``active`` itself (the usual case). Derived, kept
      (like ``active``) so that a push author's tweet fans out without filtering its followers.

    ``cold`` and ``deleted`` are dicts in ``since`` order (the watermark never goes down), so the
    horizon forgets from their front, in time proportional to what it forgets.
    """

    key: str
    clock: int
    followers: Mapping[str, Edge]
    active: tuple[str, ...]
    tweets: Mapping[str, TweetContent]
    cold: Mapping[str, ColdTweet]
    deleted: Mapping[str, int]
    profiles: Mapping[int, Profile]
    pull: bool = False
    watermark: int = NO_WATERMARK
    dead_at: Mapping[str, int] = field(default_factory=lambda: _EMPTY_MAP)
    hides: Mapping[str, HideEdges] = field(default_factory=lambda: _EMPTY_MAP)
    hides_dead_at: Mapping[str, int] = field(default_factory=lambda: _EMPTY_MAP)
    seen: tuple[str, ...] | None = None
    side: tuple | None = None
    """The per-reader side of the key (reposts and replies, docs/reposts-and-replies.md) as its plain
    payload (:func:`feed_service.core.per_reader.author_side.side_of` reads it), None while it has
    none: a key without reposts stores exactly what it stored before they existed."""

    @classmethod
    def empty(cls, key: str, *, clock: int = 0) -> AuthorState:
        """Return the state of a key never seen, its clock starting at ``clock``."""
        return cls(key=key, clock=clock, followers=_EMPTY_MAP, active=(), tweets=_EMPTY_MAP, cold=_EMPTY_MAP,
                   deleted=_EMPTY_MAP, profiles=_EMPTY_MAP)

    @property
    def edges_loaded(self) -> bool:
        """False for a state decoded from its core part only."""
        return self.followers is not _UNLOADED_FOLLOWERS

    def __eq__(self, other: object) -> bool:
        # Field-wise with plain-dict comparison: a MappingProxyType never equals a dict.
        if not isinstance(other, AuthorState):
            return NotImplemented
        return _fields(self) == _fields(other)


def _fields(state: AuthorState) -> tuple:
    return (
        state.key,
        state.clock,
        dict(state.followers),
        state.active,
        dict(state.tweets),
        dict(state.cold),
        _since_map(state.deleted),
        dict(state.profiles),
        state.pull,
        state.watermark,
        dict(state.dead_at) if state.edges_loaded else None,
        dict(state.hides) if state.edges_loaded else None,
        dict(state.hides_dead_at) if state.edges_loaded else None,
        visible_followers(state) if state.edges_loaded else None,
        state.side,
    )


def hides_reader(edges: HideEdges) -> bool:
    """Whether any of one reader's block and mute edges with an author is in force."""
    mute, reader_blocks, author_blocks = edges[0], edges[1], edges[2]
    return ((mute is not None and mute[1]) or (reader_blocks is not None and reader_blocks[1])
            or (author_blocks is not None and author_blocks[1]))


def excludes_reader(edges: HideEdges) -> bool:
    """Whether one reader's exclusion of an author is in force (the author sets no entry in the
    reader's home timeline, docs/lists.md#exclusive-lists)."""
    return len(edges) > EXCLUDES and edges[EXCLUDES] is not None and edges[EXCLUDES][1]  # type: ignore[index]


def withholds(edges: HideEdges) -> bool:
    """Whether the author's rows stay out of the reader's inbox: a hide or an exclusion in force."""
    return hides_reader(edges) or excludes_reader(edges)


def visible_followers(state: AuthorState) -> tuple[str, ...]:
    """The active followers the author's tweets are not hidden from, sorted: the audience of a push
    author's inbox writes (``state.active`` itself when nothing hides, the usual case)."""
    return state.active if state.seen is None else state.seen


def visible_of(active: tuple[str, ...], hides: Mapping[str, HideEdges], followers: Mapping[str, Edge]
               ) -> tuple[str, ...]:
    """``active`` without the readers ``hides`` withholds the author from (hidden or excluded),
    computed from scratch (what ``seen`` caches); ``active`` itself when no such reader is an active
    follower."""
    if not hides:
        return active
    hidden = {r for r, h in hides.items() if withholds(h) and (e := followers.get(r)) is not None and e[1]}
    if not hidden:
        return active
    return tuple(f for f in active if f not in hidden)


def _since_map(entries: Mapping[str, int] | AbstractSet[str]) -> dict[str, int]:
    """A history map; a plain set (tests, the layouts before the horizon) means "since unknown"."""
    if isinstance(entries, Mapping):
        return _plain(entries)
    return dict.fromkeys(entries, NO_WATERMARK)


def _plain(mapping: Mapping) -> dict:
    return mapping if type(mapping) is dict else dict(mapping)


_PART_FORMATS = (STATE_FORMAT, _HORIZON_FORMAT, _TWO_PART_FORMAT)
"""The layouts of parts (and whole states) :func:`decode_parts` reads; older ones are upgraded."""

INLINE_EDGES_LIMIT = 1024
"""Follow edges up to which a key's edges live inside its core part: one state read and write per
batch for ordinary keys, a separate part only for keys whose edges are worth skipping."""


def _core_payload(state: AuthorState, edges: tuple | None = None) -> tuple:
    core = (state.key, state.clock, len(state.active), state.pull, _plain(state.tweets), _plain(state.cold),
            _since_map(state.deleted), _plain(state.profiles), edges, state.watermark)
    return core if state.side is None else core + (state.side,)


def _edges_payload(state: AuthorState) -> tuple:
    if not state.edges_loaded:
        raise EdgesNotLoaded(f"cannot encode the edges of {state.key!r}: they were never decoded")
    return (_plain(state.followers), state.active, _plain(state.dead_at), _plain(state.hides),
            _plain(state.hides_dead_at), state.seen)


def encode_state(state: AuthorState) -> bytes:
    """The whole state in one blob (both parts).

    >>> s = AuthorState.empty("bob", clock=7)
    >>> decode_state(encode_state(s)) == s
    True
    """
    return bytes((STATE_FORMAT,)) + pickle.dumps((_core_payload(state), _edges_payload(state)), protocol=5)


def decode_state(blob: bytes) -> AuthorState:
    """Inverse of :func:`encode_state` (also reads the layouts before pull mode and before the
    horizon); ``ValueError`` on an unknown format byte."""
    fmt = blob[0] if blob else None
    if fmt == _LEGACY_FORMAT:
        key, clock, followers, active, tweets, cold, deleted, profiles = pickle.loads(memoryview(blob)[1:])
        return _upgraded(AuthorState(key=key, clock=clock, followers=followers, active=active, tweets=tweets,
                                     cold=cold, deleted=deleted, profiles=profiles, pull=False))
    if fmt not in _PART_FORMATS:
        raise ValueError(f"decode_state: unknown state format {blob[:1]!r}, expected {STATE_FORMAT}")
    core, edges = pickle.loads(memoryview(blob)[1:])
    return _assemble(core, edges)


def _upgraded(state: AuthorState) -> AuthorState:
    """A state of a layout before the horizon, with its history entries stamped "since unknown"
    (``NO_WATERMARK``): kept until a later step stamps them (docs/retention.md, upgrading)."""
    from dataclasses import replace

    cold = {tid: (c[0], c[1], NO_WATERMARK) for tid, c in state.cold.items()}
    if state.edges_loaded and not state.dead_at:
        dead_at = {f: NO_WATERMARK for f, e in state.followers.items() if not e[1]}
    else:
        dead_at = state.dead_at
    return replace(state, cold=cold, deleted=_since_map(state.deleted), dead_at=dead_at)


def encode_core(state: AuthorState, *, with_edges: bool = False) -> bytes:
    """Everything but the follow edges (with the number of active followers); ``with_edges`` puts
    the edges inside too (see :data:`INLINE_EDGES_LIMIT`)."""
    return bytes((STATE_FORMAT,)) + pickle.dumps(_core_payload(state, _edges_payload(state) if with_edges else None),
                                                 protocol=5)


def is_whole_state(blob: bytes) -> bool:
    """Whether ``blob`` is a whole state of the layout before the two parts (a key a checkpoint
    has not stepped since): :func:`decode_state` reads it."""
    return bool(blob) and blob[0] == _LEGACY_FORMAT


def encode_edges(state: AuthorState) -> bytes:
    """The follow edges and the active followers (``EdgesNotLoaded`` if they were never decoded)."""
    return bytes((STATE_FORMAT,)) + pickle.dumps(_edges_payload(state), protocol=5)


def decode_parts(core_blob: bytes, edges_blob: bytes | None) -> AuthorState:
    """A state from its parts; without ``edges_blob`` its edges are placeholders.

    >>> s = AuthorState(key="bob", clock=3, followers={"ann": (1, True)}, active=("ann",), tweets={}, cold={},
    ...                 deleted=frozenset(), profiles={})
    >>> decode_parts(encode_core(s), encode_edges(s)) == s
    True
    >>> t = decode_parts(encode_core(s), None)
    >>> t.edges_loaded, len(t.active), t.clock
    (False, 1, 3)
    """
    for blob in (core_blob, edges_blob):
        if blob is not None and (not blob or blob[0] not in _PART_FORMATS):
            raise ValueError(f"decode_parts: unknown state format {blob[:1]!r}, expected {STATE_FORMAT}")
    core = pickle.loads(memoryview(core_blob)[1:])
    edges = pickle.loads(memoryview(edges_blob)[1:]) if edges_blob is not None else None
    return _assemble(core, edges)


def _assemble(core: tuple, edges: tuple | None) -> AuthorState:
    """A state from decoded payloads; the layout before the horizon (a shorter core tuple, edges
    without ``dead_at``) is upgraded, so a key may hold parts of both layouts until both are rewritten."""
    side = None
    if len(core) == 9:  # before the horizon
        key, clock, active_count, pull, tweets, cold, deleted, profiles, inline = core
        watermark, upgrade = NO_WATERMARK, True
    elif len(core) == 10:  # no per-reader side
        key, clock, active_count, pull, tweets, cold, deleted, profiles, inline, watermark = core
        upgrade = False
    else:
        key, clock, active_count, pull, tweets, cold, deleted, profiles, inline, watermark, side = core
        upgrade = False
    if edges is None:
        edges = inline
    hides, hides_dead_at, seen = _EMPTY_MAP, _EMPTY_MAP, None
    if edges is None:
        followers, active, dead_at = _UNLOADED_FOLLOWERS, UnloadedActive(active_count), _EMPTY_MAP
        hides = hides_dead_at = _UNLOADED_HIDES
    elif len(edges) == 2:  # before the horizon
        (followers, active), dead_at = edges, {f: NO_WATERMARK for f, e in edges[0].items() if not e[1]}
    elif len(edges) == 3:  # before blocks and mutes
        followers, active, dead_at = edges
    else:
        followers, active, dead_at, hides, hides_dead_at, seen = edges
    state = AuthorState(key=key, clock=clock, followers=followers, active=active, tweets=tweets, cold=cold,
                        deleted=deleted, profiles=profiles, pull=pull, watermark=watermark, dead_at=dead_at,
                        hides=hides, hides_dead_at=hides_dead_at, seen=seen, side=side)
    return _upgraded(state) if upgrade else state
