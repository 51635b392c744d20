"""Fold one key's micro-batch: per entity, the highest-ranked change of the batch.

Folding first is what makes the step independent of the order of ``changes`` and of duplicates:
every later phase sees one change per entity, the maximum under that entity's version rank
(docs/join-engine.md, rules of the final state).
"""

from __future__ import annotations

from typing import NamedTuple, NoReturn, Sequence

from feed_service.core.events import (
    BlockChange,
    Event,
    Exclusion,
    FollowChange,
    ListChange,
    ListFollow,
    ListMemberChange,
    MuteChange,
    Profile,
    ProfileVersion,
    RefillRequest,
    RepostChange,
    TweetContent,
    TweetDelete,
    TweetUpsert,
    content_beats,
    content_of,
    join_keys,
    profile_of,
)
from feed_service.core.rules import edge_rank, follow_edge, hide_rank, profile_rank
from feed_service.core.state import BLOCKED_BY_AUTHOR, BLOCKS_AUTHOR, EXCLUDES, MUTES, Edge


_new = tuple.__new__  # builds the records: docs/join-engine.md, named records on the hot path


class Batch(NamedTuple):
    """Each entity's highest-ranked change in one batch of one key."""

    upserts: dict[str, TweetContent]
    """tweet_id -> content of the winning upsert."""
    deletes: set[str]
    """tweet ids deleted (any version: a delete is final)."""
    follows: dict[str, Edge]
    """follower -> the winning follow or unfollow (:func:`~feed_service.core.rules.follow_edge`)."""
    profiles: dict[int, Profile]
    """version -> payload of the winning profile change."""
    hides: dict[tuple[str, int], Edge]
    """(reader, kind) -> (version, hiding) of the winning block or mute, ``kind`` an index of
    :data:`~feed_service.core.state.HideEdges`."""
    refills: dict[str, set[tuple[int, str, int]]]
    """reader -> the (below_created_at, below_tweet_id, need) of its refill requests (all of them:
    answering each is idempotent)."""


def foreign(event: Event, key: str) -> NoReturn:
    """A change routed to a key it does not belong to: a routing bug, never bad input."""
    raise ValueError(f"step: event for keys {join_keys(event)!r} routed to key {key!r}: {event!r}")


def fold(key: str, changes: Sequence[Event]) -> Batch:
    """Each entity's highest-ranked change in the batch; every change must belong to ``key``.

    A block or mute becomes a hide edge (reader, kind) of this author: a mute of this author by
    the reader, a block of this author by the reader, or this author's block of the reader.

    >>> b = fold("bob", [FollowChange("ann", "bob", 2, "follow"), FollowChange("ann", "bob", 1, "unfollow"),
    ...                  MuteChange("cat", "bob", 1, "mute")])
    >>> b.follows, b.hides
    ({'ann': (2, True)}, {('cat', 0): (1, True)})
    """
    ups: dict[str, TweetContent] = {}
    dels: set[str] = set()
    edges: dict[str, Edge] = {}
    profs: dict[int, Profile] = {}
    hides: dict[tuple[str, int], Edge] = {}
    refills: dict[str, set[tuple[int, str, int]]] = {}
    for ev in changes:
        cls = type(ev)
        if cls is TweetUpsert:
            if ev.author_id != key:
                foreign(ev, key)
            c = content_of(ev)
            prev = ups.get(ev.tweet_id)
            if prev is None or content_beats(c, prev):
                ups[ev.tweet_id] = c
        elif cls is FollowChange:
            if ev.followee_id != key:
                foreign(ev, key)
            if ev.follower_id == key:
                raise ValueError(f"step: self-follow reached the engine: {ev!r}")
            e = follow_edge(ev.version, ev.op == "follow", ev.show_reposts)
            prev_e = edges.get(ev.follower_id)
            if prev_e is None or edge_rank(*e) > edge_rank(*prev_e):
                edges[ev.follower_id] = e
        elif cls is TweetDelete:
            if ev.author_id != key:
                foreign(ev, key)
            dels.add(ev.tweet_id)
        elif cls is ProfileVersion:
            if ev.user_id != key:
                foreign(ev, key)
            p = profile_of(ev)
            prev_p = profs.get(ev.version)
            if prev_p is None or profile_rank(p) > profile_rank(prev_p):
                profs[ev.version] = p
        elif cls is BlockChange or cls is MuteChange:
            if cls is MuteChange:
                if ev.muted_id != key:
                    foreign(ev, key)
                reader, kind = ev.muter_id, MUTES
            elif ev.blocker_id == key:
                reader, kind = ev.blocked_id, BLOCKED_BY_AUTHOR
            elif ev.blocked_id == key:
                reader, kind = ev.blocker_id, BLOCKS_AUTHOR
            else:
                foreign(ev, key)
            if reader == key:
                raise ValueError(f"step: self-block or self-mute reached the engine: {ev!r}")
            h = (ev.version, ev.op == "block" or ev.op == "mute")
            prev_h = hides.get((reader, kind))
            if prev_h is None or hide_rank(*h) > hide_rank(*prev_h):
                hides[(reader, kind)] = h
        elif cls is RefillRequest:
            if ev.author_id != key:
                foreign(ev, key)
            refills.setdefault(ev.reader_id, set()).add((ev.below_created_at, ev.below_tweet_id, ev.need))
        elif cls is ListFollow:  # a list's reader follows a member (docs/lists.md#in-the-engine)
            if ev.member_id != key:
                foreign(ev, key)
            e = (ev.version, ev.op == "follow")
            prev_e = edges.get(ev.reader_id)
            if prev_e is None or edge_rank(*e) > edge_rank(*prev_e):
                edges[ev.reader_id] = e
        elif cls is Exclusion:  # the owner's exclusive list holds this member (docs/lists.md#in-the-engine)
            if ev.member_id != key:
                foreign(ev, key)
            if ev.owner_id == key:
                continue  # one's own tweets are in no home timeline of one's own: nothing to set aside
            h = (ev.version, ev.op == "exclude")
            prev_h = hides.get((ev.owner_id, EXCLUDES))
            if prev_h is None or hide_rank(*h) > hide_rank(*prev_h):
                hides[(ev.owner_id, EXCLUDES)] = h
        elif cls is ListChange or cls is ListMemberChange:
            continue  # the list stage's (docs/lists.md#in-the-engine), never an author key's
        elif cls is RepostChange:
            # Not joined by this engine yet: reposts are kept by their compacted topic and meet the
            # view once the reader-keyed steps exist (docs/reposts-and-replies.md, "Building it").
            continue
        else:
            raise TypeError(f"step: not an event: {ev!r}")
    return _new(Batch, (ups, dels, edges, profs, hides, refills))


def key_of(changes: Sequence[Event]) -> str:
    """The one key every change belongs to (``ValueError`` if that is not exactly one)."""
    keys = set(join_keys(changes[0]))
    for ev in changes[1:]:
        if len(keys) < 2:
            break
        keys.intersection_update(join_keys(ev))
    if len(keys) != 1:
        raise ValueError(f"step: the changes of a new key name {sorted(keys)!r}, not one key: pass key=")
    return keys.pop()
