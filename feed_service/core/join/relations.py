"""Phase: the readers whose relation to the author changed, from the follow and hide phases' diffs.

A reader R's relation to author A is (R sees A, A is hidden from R, R sees A but turned A's reposts
off): R sees A while R actively follows A and no block or mute between them hides
(docs/blocks-and-mutes.md); the reposts are off by the follow's option (docs/lists.md#per-follow-options).
It changes only for a reader whose follow edge turned active or inactive or changed its options
(:mod:`.follows`) or whose block and mute edges changed (:mod:`.hides`); the per-reader stage keeps
the audiences from these changes
(:class:`~feed_service.core.per_reader.messages.Relation`).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from feed_service.core.join.follows import FollowsDiff
from feed_service.core.join.hides import HidesDiff
from feed_service.core.rules import shows_reposts
from feed_service.core.state import AuthorState, Edge, HideEdges, excludes_reader, hides_reader

_NONE: tuple = ()
_new = tuple.__new__


class RelationChange(NamedTuple):
    """A reader's relation to the author after a batch that changed it."""

    reader: str
    sees: bool
    hidden: bool
    quiet: bool = False
    """The reader sees the author but turned the author's reposts off."""
    excluded: bool = False
    """The reader sees the author, a member of one of its exclusive lists: no source of its home."""


def _status(followers: Mapping[str, Edge], hides: Mapping[str, HideEdges], reader: str
            ) -> tuple[bool, bool, bool, bool]:
    h = hides.get(reader)
    hidden = h is not None and hides_reader(h)
    e = followers.get(reader)
    sees = e is not None and e[1] and not hidden
    return sees, hidden, sees and not shows_reposts(e), sees and h is not None and excludes_reader(h)


def relation_changes(state: AuthorState, follows: FollowsDiff, hides: HidesDiff) -> tuple[RelationChange, ...]:
    """The readers (sorted) whose relation the batch changed, ``state`` being the key's state before it."""
    active = follows.active
    if not (active.added or active.dropped or hides.changed or follows.toggled):
        return _NONE
    out = []
    for reader in sorted({*active.added, *active.dropped, *hides.changed, *follows.toggled}):
        old = _status(state.followers, state.hides, reader)
        new = _status(follows.followers, hides.hides, reader)
        if old != new:
            out.append(_new(RelationChange, (reader, *new)))
    return tuple(out)
