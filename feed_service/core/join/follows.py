"""Follow edges: the batch's winning follows and unfollows against the author's edges (the F of
T⋈F), and which followers become active or inactive."""

from __future__ import annotations

from typing import Mapping, NamedTuple

from feed_service.core.rules import edge_rank, shows_reposts
from feed_service.core.join.readers import Audience, with_, without
from feed_service.core.state import AuthorState, Edge

_NONE: tuple = ()
_new = tuple.__new__  # builds the records: docs/join-engine.md, named records on the hot path


class FollowsDiff(NamedTuple):
    """The follow edges after one batch and the active followers before and after it."""

    followers: Mapping[str, Edge]
    """Every edge after the batch, dead ones included."""
    active: Audience
    """The active followers before and after the batch, who stayed, became active or inactive."""
    dead_at: Mapping[str, int]
    """Stamps of the inactive edges."""
    toggled: tuple[str, ...] = ()
    """Followers active before and after whose options changed (reposts turned off or on), sorted."""


def unchanged_follows(state: AuthorState) -> FollowsDiff:
    """The diff of a batch without follow changes (most batches: an author's new tweets)."""
    active = state.active
    return _new(FollowsDiff, (state.followers, _new(Audience, (active, active, active, _NONE, _NONE)), state.dead_at,
                              _NONE))


def apply_follows(state: AuthorState, edges: dict[str, Edge], since: int) -> FollowsDiff:
    """Apply the batch's winning edge changes; which followers became active or inactive. Every
    inactive edge the batch changed is stamped with ``since`` in ``dead_at``."""
    before = state.followers
    after = before
    dead_at = state.dead_at
    added: list[str] = []
    dropped: list[str] = []
    toggled: list[str] = []
    for follower, e in edges.items():
        old = before.get(follower)
        if old is not None and edge_rank(*e) <= edge_rank(*old):
            continue
        if after is before:
            after = dict(before)
            dead_at = dict(dead_at)
        after[follower] = e  # type: ignore[index]
        dead_at.pop(follower, None)  # type: ignore[attr-defined]
        if not e[1]:
            dead_at[follower] = since  # type: ignore[index]
        was_active = old is not None and old[1]
        if e[1] and not was_active:
            added.append(follower)
        elif was_active and not e[1]:
            dropped.append(follower)
        elif was_active and shows_reposts(e) != shows_reposts(old):
            toggled.append(follower)
    active_before = state.active
    stayed = active_after = active_before
    if dropped:
        dropped.sort()
        stayed = active_after = without(active_before, dropped)
    if added:
        added.sort()
        active_after = with_(stayed, added)
    return _new(FollowsDiff, (after, _new(Audience, (active_before, active_after, stayed, added, dropped)), dead_at,
                              tuple(sorted(toggled))))
