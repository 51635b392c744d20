"""Hybrid fan-out: whose inboxes hold an author's tweets, and who merges it in at read time
(docs/fan-out.md).

A push author's inbox audience is the followers who see it; a pull author's is nobody, and those
followers get ``pull_follows`` rows instead. Crossing the threshold either way is an audience change
computed like a follow or an unfollow of every follower who sees the author at once.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from feed_service.core.join.follows import FollowsDiff
from feed_service.core.join.hides import HidesDiff, seen_field, visible_diff
from feed_service.core.join.readers import NOBODY, Audience
from feed_service.core.rows import PullFollowDelta
from feed_service.core.state import AuthorState

_NONE: tuple = ()
_new = tuple.__new__  # builds the records: docs/join-engine.md, named records on the hot path


class Fanout(NamedTuple):
    """Where one batch's timeline rows go and which read-time merges change."""

    inbox: Audience
    """Whose inboxes hold the author's tweets before and after the batch."""
    pull_follows: Sequence[PullFollowDelta]
    """Followers who start or stop merging the author in at read time."""
    seen: tuple[str, ...] | None
    """``AuthorState.seen`` after the batch."""


def fan_out(state: AuthorState, follows: FollowsDiff, hides: HidesDiff, pull_after: bool, edges_changed: bool, /
            ) -> Fanout:
    """The inbox audience and pull-follow rows of one batch, given whether the author is pull
    before (``state.pull``) and after it, and whether the batch has follow, block or mute changes."""
    pull_before = state.pull
    if pull_before and pull_after and not edges_changed:
        return _new(Fanout, (NOBODY, _NONE, state.seen))  # a pull author's tweets: no reader changes
    visible = visible_diff(state, follows, hides)
    if pull_before or pull_after:
        inbox = inbox_audience(visible, pull_before, pull_after)
        pull_follows = pull_follow_deltas(state.key, visible, pull_before, pull_after)
    else:  # a push author, before and after: its inbox audience is the followers who see it
        inbox, pull_follows = visible, _NONE
    return _new(Fanout, (inbox, pull_follows, seen_field(visible.after, follows.active.after)))


def inbox_audience(visible: Audience, pull_before: bool, pull_after: bool) -> Audience:
    """Whose inboxes hold the author's tweets before and after the batch.

    A push author's are the followers who see it (``visible``), a pull author's nobody's; so
    becoming pull retracts every retained tweet from every inbox, and falling back pushes them all
    again (a real transition, computed by the same diff as a follow or an unfollow).
    """
    if not pull_before and not pull_after:
        return visible
    if pull_before and pull_after:
        return NOBODY
    if pull_after:  # push -> pull
        return _new(Audience, (visible.before, (), (), (), visible.before))  # everyone leaves
    return _new(Audience, ((), visible.after, (), visible.after, ()))  # pull -> push: everyone comes


def pull_follow_deltas(key: str, visible: Audience, pull_before: bool, pull_after: bool) -> list[PullFollowDelta]:
    """Changes of the set of followers who merge this author in at read time (while it is a pull
    author, the followers who see it; nobody otherwise): so reads never merge a hidden pair."""
    if pull_before and pull_after:
        inserts, deletes = visible.added, visible.dropped
    elif pull_after:
        inserts, deletes = visible.after, ()
    elif pull_before:
        inserts, deletes = (), visible.before
    else:
        return []
    out = []
    if deletes:
        out.append(_new(PullFollowDelta, ("delete", key, tuple(deletes))))
    if inserts:
        out.append(_new(PullFollowDelta, ("insert", key, tuple(inserts))))
    return out
