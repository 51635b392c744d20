"""Per-author-key state of the timeline join, and its byte codec.

One :class:`AuthorState` holds everything the deltas of one author key need (docs/design.md, "one key
holds both sides"): the author's follow edges, the author's newest live tweets up to the inbox cap,
what is known of its older and deleted tweets, its profile versions, and the key's logical clock.

The state is immutable; :func:`feed_service.core.join.step` returns a new one that shares the
containers it did not change. Containers must therefore never be mutated in place.

Codec: ``encode_state`` writes one format byte and a pickle (protocol 5) of plain tuples, dicts and
a frozenset. Pickle was measured against json+zlib and marshal in ``bench/bench_engine.py``: it is
the fastest to decode of the portable choices and stable across Python versions (marshal is not).
State bytes are only ever read back by this module, never from outside input.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from types import MappingProxyType
from typing import AbstractSet, Mapping, TypeAlias

from feed_service.core.events import Profile, TweetContent

Edge: TypeAlias = tuple[int, bool]
"""(version, active) of the highest-ranked change of one follow edge."""

ColdTweet: TypeAlias = tuple[int, int]
"""(version, payload digest) of a live tweet that is not among the author's newest ``inbox_cap``."""

STATE_FORMAT = 1
"""First byte of every encoded state; bump it when the tuple layout changes."""

_EMPTY_MAP: Mapping = MappingProxyType({})


@dataclass(frozen=True, slots=True, eq=False)
class AuthorState:
    """Everything one author key knows; bounded except for the history noted per field.

    - ``followers``: follower -> (version, active) for every edge ever seen, dead ones included
      (their versions keep a late, older follow from reviving them). Grows with dead edges.
    - ``active``: the active followers, sorted; derived from ``followers``, kept so that fan-out
      reuses one tuple instead of filtering the edges on every tweet.
    - ``tweets``: tweet_id -> content of the newest live tweets by (created_at, tweet_id), at most
      the inbox cap: an older tweet can never be in any follower's newest-N. Iterates in ascending
      (created_at, tweet_id) order, so the oldest is evicted and backfill walks it backwards
      without sorting (dicts and the codec keep insertion order).
    - ``cold``: tweet_id -> (version, digest) of live tweets pushed out of ``tweets``, so a late
      older upsert cannot bring back stale content. Grows with the author's history.
    - ``deleted``: tombstones; a delete is final. Grows with the author's deletes.
    - ``profiles``: version -> profile payload. Grows with the author's profile versions.
    - ``clock``: logical write timestamp of the last step that emitted anything.
    """

    key: str
    clock: int
    followers: Mapping[str, Edge]
    active: tuple[str, ...]
    tweets: Mapping[str, TweetContent]
    cold: Mapping[str, ColdTweet]
    deleted: AbstractSet[str]
    profiles: Mapping[int, Profile]

    @classmethod
    def empty(cls, key: str, *, clock: int = 0) -> AuthorState:
        """Return the state of a key never seen, its clock starting at ``clock``."""
        return cls(key, clock, _EMPTY_MAP, (), _EMPTY_MAP, _EMPTY_MAP, frozenset(), _EMPTY_MAP)

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
        frozenset(state.deleted),
        dict(state.profiles),
    )


def encode_state(state: AuthorState) -> bytes:
    """Serialize ``state`` for a keyed state store (one value per key, written once per batch).

    >>> s = AuthorState.empty("bob", clock=7)
    >>> decode_state(encode_state(s)) == s
    True
    """
    payload = (
        state.key,
        state.clock,
        state.followers if type(state.followers) is dict else dict(state.followers),
        state.active,
        state.tweets if type(state.tweets) is dict else dict(state.tweets),
        state.cold if type(state.cold) is dict else dict(state.cold),
        state.deleted if type(state.deleted) is frozenset else frozenset(state.deleted),
        state.profiles if type(state.profiles) is dict else dict(state.profiles),
    )
    return bytes((STATE_FORMAT,)) + pickle.dumps(payload, protocol=5)


def decode_state(blob: bytes) -> AuthorState:
    """Inverse of :func:`encode_state`; raises ``ValueError`` on an unknown format byte."""
    if not blob or blob[0] != STATE_FORMAT:
        raise ValueError(f"decode_state: unknown state format {blob[:1]!r}, expected {STATE_FORMAT}")
    key, clock, followers, active, tweets, cold, deleted, profiles = pickle.loads(memoryview(blob)[1:])
    return AuthorState(key, clock, followers, active, tweets, cold, deleted, profiles)
