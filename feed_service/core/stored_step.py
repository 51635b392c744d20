"""One key's step against a keyed state store that keeps the state in two parts.

A keyed store (Spark's ``ValueState``, or the in-memory one of :class:`~feed_service.core.view.Materializer`)
holds per author key a *core* part and, for keys with many follow edges, a separate *edges* part
(:mod:`feed_service.core.state`). :func:`step_stored` reads the edges part only when the step needs it
(:func:`~feed_service.core.join.needs_edges`) and says which parts to write back, so the cost of a
batch follows what it changes: a pull author's new tweet neither reads nor writes its follower set.
Spark's state calls are socket round trips, so the common key (few edges) costs one read and at most
one write, as with a single blob.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from feed_service.core.events import Event
from feed_service.core.join import DEFAULT_INBOX_CAP, DEFAULT_PULL_THRESHOLD, StepResult, needs_edges
from feed_service.core.per_reader.author_side import SideResult
from feed_service.core.per_reader.author_step import step_with_side
from feed_service.core.retention import Retention
from feed_service.core.state import (
    INLINE_EDGES_LIMIT,
    AuthorState,
    decode_parts,
    decode_state,
    encode_core,
    encode_edges,
    is_whole_state,
)


@dataclass(frozen=True, slots=True)
class StoredStep:
    """A step's result and the state writes it needs (``None``: leave that part as it is)."""

    result: StepResult
    core: bytes | None
    edges: bytes | None
    clear_edges: bool = False
    """The edges moved inside the core part: remove the separate part."""
    side: SideResult | None = None
    """The messages the key owes the per-reader stage this batch (docs/reposts-and-replies.md)."""


def _parts(state: AuthorState, *, had_separate_edges: bool, edges_changed: bool) -> tuple[bytes, bytes | None, bool]:
    if not state.edges_loaded:  # edges neither read nor changed: they stay where they are
        return encode_core(state), None, False
    if len(state.followers) + len(state.hides) <= INLINE_EDGES_LIMIT:
        return encode_core(state, with_edges=True), None, had_separate_edges
    edges = encode_edges(state) if edges_changed or not had_separate_edges else None
    return encode_core(state), edges, False


def step_stored(
    core_blob: bytes | None,
    load_edges: Callable[[], bytes | None],
    changes: Sequence[Event],
    *,
    inbox_cap: int = DEFAULT_INBOX_CAP,
    pull_threshold: int = DEFAULT_PULL_THRESHOLD,
    clock_start: int = 0,
    times: Sequence[int] | None = None,
    retention: Retention = Retention(None),
    key: str | None = None,
) -> StoredStep:
    """Step ``changes`` (with their event ``times``, under ``retention``: see :func:`step`) against
    the stored parts of one key (``key``: needed for a new key whose changes are all blocks between
    the same two users); ``load_edges`` is called at most once."""
    previous: AuthorState | None = None
    had_separate_edges = False
    if core_blob is not None and is_whole_state(core_blob):
        previous = decode_state(core_blob)  # written before the two parts: rewritten as parts below
    elif core_blob is not None:
        previous = decode_parts(core_blob, None)
        had_separate_edges = not previous.edges_loaded
        if had_separate_edges and needs_edges(previous, changes, pull_threshold=pull_threshold):
            edges_blob = load_edges()
            if edges_blob is None:
                raise ValueError(f"state of {previous.key!r}: the core part says its edges are stored apart, "
                                 "but there is no edges part")
            previous = decode_parts(core_blob, edges_blob)
    result, side = step_with_side(previous, changes, inbox_cap=inbox_cap, pull_threshold=pull_threshold,
                                  clock_start=clock_start, times=times, retention=retention, key=key)
    if result.state is previous and not (core_blob is not None and is_whole_state(core_blob)):
        return StoredStep(result, None, None, side=side)
    edges_changed = (previous is None or result.state.followers is not previous.followers
                     or result.state.hides is not previous.hides)
    core, edges, clear = _parts(result.state, had_separate_edges=had_separate_edges, edges_changed=edges_changed)
    return StoredStep(result, core, edges, clear, side)


def stored_parts(whole_blob: bytes) -> tuple[bytes, bytes | None]:
    """The (core, edges) parts of a whole-state blob (:func:`~feed_service.core.state.encode_state`),
    as :func:`step_stored` keeps them: how a backfill's states seed a new checkpoint."""
    state = decode_state(whole_blob)
    core, edges, _ = _parts(state, had_separate_edges=False, edges_changed=True)
    return core, edges
