"""The hide antijoin: blocks and mutes (the ▷H of T⋈F▷H, docs/blocks-and-mutes.md).

A reader does not see an author's tweets while the reader mutes or blocks the author or the author
blocks the reader. Every such pair involving the author is in its state (``AuthorState.hides``), so
who *sees* the author (an active follow edge, nothing hiding) is decided at the author's key.
"""

from __future__ import annotations

from typing import AbstractSet, Mapping, NamedTuple, Sequence

from feed_service.core.rules import hide_rank
from feed_service.core.join.follows import FollowsDiff
from feed_service.core.join.readers import Audience, with_, without
from feed_service.core.rows import BlockDelta
from feed_service.core.state import (
    BLOCKED_BY_AUTHOR,
    NO_HIDES,
    AuthorState,
    Edge,
    HideEdges,
    visible_followers,
    withholds,
)

_NONE: tuple = ()
_new = tuple.__new__  # builds the records: docs/join-engine.md, named records on the hot path
_NO_READERS: AbstractSet[str] = frozenset()


class HidesDiff(NamedTuple):
    """The block and mute edges after one batch, and what changed."""

    hides: Mapping[str, HideEdges]
    dead_at: Mapping[str, int]
    """Stamps of the readers none of whose edges hides any more."""
    changed: AbstractSet[str]
    """The readers whose edges the batch changed."""
    blocks: Sequence[BlockDelta]
    """The author's own blocks that changed side: rows of the ``blocks`` table."""


def unchanged_hides(state: AuthorState) -> HidesDiff:
    """The diff of a batch without block or mute changes."""
    return _new(HidesDiff, (state.hides, state.hides_dead_at, _NO_READERS, _NONE))


def apply_hides(state: AuthorState, changes: dict[tuple[str, int], Edge], since: int) -> HidesDiff:
    """Apply the batch's winning block and mute edge changes. Readers whose edges all stop hiding
    are stamped with ``since`` in ``dead_at``; the author's own blocks changing side become
    block rows."""
    before = state.hides
    after: dict[str, HideEdges] | None = None
    dead_at = state.hides_dead_at
    changed: set[str] = set()
    blocks: list[BlockDelta] = []
    for (reader, kind), h in sorted(changes.items()):
        current = (after if after is not None else before).get(reader, NO_HIDES)
        old = current[kind] if kind < len(current) else None
        if old is not None and hide_rank(*h) <= hide_rank(*old):
            continue
        if after is None:
            after, dead_at = dict(before), dict(dead_at)
        edges = list(current)
        if kind >= len(edges):
            edges.extend([None] * (kind + 1 - len(edges)))
        edges[kind] = h
        after[reader] = new = tuple(edges)
        changed.add(reader)
        dead_at.pop(reader, None)  # type: ignore[attr-defined]
        if not withholds(new):
            dead_at[reader] = since  # type: ignore[index]
        if kind == BLOCKED_BY_AUTHOR and (old is not None and old[1]) != h[1]:
            blocks.append(_new(BlockDelta, ("insert" if h[1] else "delete", state.key, reader)))
    if after is None:
        return _new(HidesDiff, (before, dead_at, _NO_READERS, _NONE))
    return _new(HidesDiff, (after, dead_at, changed, blocks))


def visible_diff(state: AuthorState, follows: FollowsDiff, hides: HidesDiff) -> Audience:
    """The followers who see the author's tweets before and after the batch (active and not
    hidden), who stayed, came or left: the follow diff, less the hidden pairs (ΔH meets ΔF here,
    once, since both are diffs of final against initial state).

    Only the readers the batch changed are examined; the followers who see the author before come
    from the state (``seen``), so a block at a key with many followers costs the changed readers
    and at most one pass to drop them, as a follow or an unfollow does.
    """
    if not state.edges_loaded:  # edges not needed (needs_edges): no follow or hide changed, no fan-out
        return follows.active
    hides_before, hides_after = state.hides, hides.hides
    if not hides_before and not hides_after:  # nothing hidden, before or after: the follow diff as it is
        return follows.active
    seen_before = visible_followers(state)
    added, dropped = follows.active.added, follows.active.dropped
    if not added and not dropped and not hides.changed:
        return _new(Audience, (seen_before, seen_before, seen_before, _NONE, _NONE))
    followers_before, followers_after = state.followers, follows.followers
    came: list[str] = []
    left: list[str] = []
    for r in {*added, *dropped, *hides.changed}:
        before, after = _sees(r, followers_before, hides_before), _sees(r, followers_after, hides_after)
        if before != after:
            (came if after else left).append(r)
    came.sort()
    left.sort()
    stayed_seen = without(seen_before, left) if left else seen_before
    seen_after = with_(stayed_seen, came) if came else stayed_seen
    return _new(Audience, (seen_before, seen_after, stayed_seen, came, left))


def seen_field(seen: tuple[str, ...], active: tuple[str, ...]) -> tuple[str, ...] | None:
    """``AuthorState.seen`` for the followers who see the author: None when that is every active one."""
    return None if seen is active or len(seen) == len(active) else seen


def _sees(reader: str, followers: Mapping[str, Edge], hides: Mapping[str, HideEdges]) -> bool:
    """Whether ``reader`` follows the author and nothing withholds the author's rows from its inbox
    (a hide, or an exclusion: docs/lists.md#exclusive-lists)."""
    e = followers.get(reader)
    if e is None or not e[1]:
        return False
    h = hides.get(reader)
    return h is None or not withholds(h)
