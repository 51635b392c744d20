"""Forgetting: history stamped more than two horizons back leaves the state (docs/retention.md).

History is what stops a late older change from undoing a newer one: tombstones (``deleted``), the
digests of tweets pushed out of the retained ones (``cold``), dead follow edges (``dead_at``) and
readers no block or mute hides any more (``hides_dead_at``). Each map is in stamp order (the
watermark never goes down), so only its front is read unless something is dropped.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

from feed_service.core.retention import NO_WATERMARK
from feed_service.core.state import ColdTweet, Edge, HideEdges

_new = tuple.__new__  # builds the records: docs/join-engine.md, named records on the hot path


class History(NamedTuple):
    """The maps :func:`forget` may shorten, as they are after the batch."""

    cold: Mapping[str, ColdTweet]
    deleted: Mapping[str, int]
    followers: Mapping[str, Edge]
    dead_at: Mapping[str, int]
    hides: Mapping[str, HideEdges]
    hides_dead_at: Mapping[str, int]


def forget(floor: int, watermark: int, history: History, *, edges_loaded: bool) -> History:
    """Drop the history entries stamped before ``floor``; stamp entries of unknown age (a state
    written before the horizon existed) with ``watermark``, so they expire one horizon from now.

    Dead edges and hides live with the follow edges and are forgotten only when those are loaded.

    >>> h = History(cold={}, deleted={"t1": 10, "t2": 90}, followers={"ann": (1, False)}, dead_at={"ann": 5},
    ...             hides={}, hides_dead_at={})
    >>> f = forget(50, 100, h, edges_loaded=True)
    >>> f.deleted, f.followers, f.dead_at
    ({'t2': 90}, {}, {})
    """
    cold, deleted, followers, dead_at, hides, hides_dead_at = history
    if cold and _expired(cold, floor, lambda c: c[2]):
        cold = _restamped({t: c for t, c in cold.items() if not NO_WATERMARK < c[2] < floor},
                          lambda c: c[2], lambda c: (c[0], c[1], watermark))
    if deleted and _expired(deleted, floor, lambda s: s):
        deleted = _restamped({t: s for t, s in deleted.items() if not NO_WATERMARK < s < floor},
                             lambda s: s, lambda s: watermark)
    if edges_loaded:
        if dead_at:
            followers, dead_at = _forget_dead(floor, watermark, followers, dead_at)
        if hides_dead_at:
            hides, hides_dead_at = _forget_dead(floor, watermark, hides, hides_dead_at)
    return _new(History, (cold, deleted, followers, dead_at, hides, hides_dead_at))


def _forget_dead(floor: int, watermark: int, edges: Mapping[str, Any], dead_at: Mapping[str, int]
                 ) -> tuple[Mapping[str, Any], Mapping[str, int]]:
    """Drop the edges (follow edges, or a reader's block and mute edges) dead since before ``floor``."""
    if not _expired(dead_at, floor, lambda s: s):
        return edges, dead_at
    gone = [r for r, s in dead_at.items() if NO_WATERMARK < s < floor]
    dead_at = _restamped({r: s for r, s in dead_at.items() if not NO_WATERMARK < s < floor},
                         lambda s: s, lambda s: watermark)
    if gone:
        edges = dict(edges)
        for r in gone:
            del edges[r]
    return edges, dead_at


def _expired(entries: Mapping, floor: int, since: Callable[[Any], int]) -> bool:
    """Whether the oldest entry is due: expired, or of unknown age (then it gets a stamp)."""
    first = since(next(iter(entries.values())))
    return first < floor or first == NO_WATERMARK


def _restamped(entries: dict, since: Callable[[Any], int], stamp: Callable[[Any], Any]) -> dict:
    """``entries`` with the unknown-age ones stamped and moved behind the others (keeps stamp order)."""
    unknown = [k for k, v in entries.items() if since(v) == NO_WATERMARK]
    for k in unknown:
        entries[k] = stamp(entries.pop(k))
    return entries
