"""One author key's step: the phases of :mod:`feed_service.core.join` in order, and what they return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from feed_service.core.events import (
    BlockChange,
    Event,
    Exclusion,
    FollowChange,
    ListFollow,
    MuteChange,
    Profile,
    RefillRequest,
    TweetContent,
    TweetDelete,
    TweetUpsert,
)
from feed_service.core.join.audience import fan_out
from feed_service.core.join.deltas import outputs
from feed_service.core.join.fold import fold, key_of
from feed_service.core.join.follows import apply_follows, unchanged_follows
from feed_service.core.join.forget import History, forget
from feed_service.core.join.hides import apply_hides, unchanged_hides
from feed_service.core.join.horizon import timely
from feed_service.core.join.profiles import apply_profiles
from feed_service.core.join.refill import refill_deltas
from feed_service.core.join.relations import RelationChange, relation_changes
from feed_service.core.join.replies import inbox_rows
from feed_service.core.join.tweets import apply_tweets
from feed_service.core.retention import NO_WATERMARK, Retention
from feed_service.core.rules import is_pull_author
from feed_service.core.rows import AuthorTimelineDelta, BlockDelta, ProfileRow, PullFollowDelta, TimelineDelta, TweetChange
from feed_service.core.state import AuthorState

DEFAULT_INBOX_CAP = 800
"""Entries kept per home timeline, and tweets kept per author key (docs/design.md, the inbox cap)."""

DEFAULT_PULL_THRESHOLD = 2_000
"""Active followers from which an author's tweets are merged in at read time instead of written to
inboxes (docs/fan-out.md says how this default was measured)."""

_NONE: tuple = ()
_new = tuple.__new__  # builds the records: docs/join-engine.md, named records on the hot path
_NO_RETENTION = Retention(None)


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one :func:`step` produced for one key.

    ``ts`` is the write timestamp of every output of this step: the key's clock, incremented once
    if and only if the step emitted something. Replaying a batch from the same state gives the same
    ``ts`` and outputs; each row is owned by one key, so per-key clocks never compete.
    """

    state: AuthorState
    ts: int
    deltas: tuple[TimelineDelta, ...]
    tweets: tuple[TweetChange, ...]
    profiles: tuple[ProfileRow, ...]
    author_timeline: tuple[AuthorTimelineDelta, ...] = ()
    """Changes of the author's own timeline (its retained tweets)."""
    pull_follows: tuple[PullFollowDelta, ...] = ()
    """Followers who start or stop merging this author in at read time."""
    late: tuple[int, ...] = ()
    """Positions in ``changes`` of the changes rejected as beyond the history horizon (not applied)."""
    blocks: tuple[BlockDelta, ...] = ()
    """Users this key's author starts or stops blocking (the ``blocks`` table)."""
    relations: tuple[RelationChange, ...] = ()
    """Readers whose relation to the author changed (:mod:`.relations`): messages for the per-reader
    stage, not rows (they do not count as emitted)."""

    @property
    def delta_count(self) -> int:
        """Timeline row changes once exploded: the sum of ``len(timeline_ids)``."""
        return sum(len(d.timeline_ids) for d in self.deltas)

    @property
    def emitted(self) -> bool:
        """Whether the step produced any output."""
        return bool(self.deltas or self.tweets or self.profiles or self.author_timeline or self.pull_follows
                    or self.blocks)


#: The changes that change a key's edges, or read them all (a list follow is a follow, an exclusion a
#: hide edge: docs/lists.md#in-the-engine; a refill answers the inbox holders).
_EDGE_CHANGES = frozenset({FollowChange, BlockChange, MuteChange, ListFollow, Exclusion, RefillRequest})


def needs_edges(state: AuthorState | None, changes: Sequence[Event], *, pull_threshold: int) -> bool:
    """Whether :func:`step` of ``changes`` will read the key's follow edges and the block and mute
    edges stored with them (else a state decoded without them will do): the batch changes edges (a
    list's follow and an exclusion too),
    the key is a push author whose tweets change, or the key crosses the pull threshold (a changed
    threshold). A pull author's new tweet does not.
    """
    if state is None:
        return False  # a new key's edges are empty
    if any(type(ev) in _EDGE_CHANGES for ev in changes):
        return True  # a refill answers the inbox holders, who are read from the edges
    if is_pull_author(len(state.active), pull_threshold) != state.pull:
        return True
    return not state.pull and any(type(ev) is TweetUpsert or type(ev) is TweetDelete for ev in changes)


def step(
    state: AuthorState | None,
    changes: Sequence[Event],
    *,
    inbox_cap: int = DEFAULT_INBOX_CAP,
    pull_threshold: int = DEFAULT_PULL_THRESHOLD,
    clock_start: int = 0,
    times: Sequence[int] | None = None,
    retention: Retention = _NO_RETENTION,
    key: str | None = None,
) -> StepResult:
    """Apply one micro-batch of one author key's changes; return the new state and the deltas.

    Pure: ``state`` is not modified (the result shares its unchanged containers, and is ``state``
    itself when nothing of it changed). ``state`` None means a new key, whose clock starts at
    ``clock_start``; its ``key`` may be omitted when the changes name it (not when they are all
    blocks between the same two users, which belong to both). Every change must have this key among
    its :func:`~feed_service.core.events.join_keys`, otherwise ``ValueError`` (a routing bug, not
    bad input). ``inbox_cap`` must be the same for every step of a key.

    ``times`` are the changes' event times (Kafka record timestamps, ms), one per change; with a
    ``retention`` horizon, changes more than the horizon behind the key's watermark (its newest
    event time, this batch included) are not applied but listed in ``StepResult.late``, and history
    stamped more than two horizons back is forgotten (docs/retention.md). Without ``times`` nothing
    is rejected or forgotten.

    Step table. ``t`` a tweet of this author, ``u`` a reader; "retained" = among the author's newest
    ``inbox_cap`` live tweets by (created_at, tweet_id); ``u`` *sees* the author while u's follow
    edge is active and no block or mute between them is in force; the *inbox holders* are the
    readers who see a push author, nobody for a pull author (``pull_threshold`` active followers or
    more). Terms of ΔV = ΔT⋈(F▷H) + T⋈Δ(F▷H) + ΔT⋈Δ(F▷H), T, F, H the key's tables before the batch:

    ==========================================  ===========  ==========================================
    change, compared with the state before      term         outputs
    ==========================================  ===========  ==========================================
    new retained tweet t                        ΔT⋈(F▷H)     insert t -> holders after; tweets row,
                                                             author timeline insert
    edit of retained t, same created_at         ΔT⋈(F▷H)     update t -> holders before & after;
                                                             tweets row, author timeline update
    edit of t that changes created_at           ΔT⋈(F▷H)     delete old t -> holders before, insert
                                                             new t -> holders after
    delete of retained t                        ΔT⋈(F▷H)     delete t -> holders before; tombstone
                                                             row, author timeline delete
    t pushed out by the cap (goes cold)         ΔT⋈(F▷H)     delete t -> holders before; author
                                                             timeline delete
    upsert older than every retained t at cap   ΔT           tweets row only (it goes cold)
    u starts seeing: follow, unblock, unmute    T⋈Δ(F▷H)     insert each retained t (after) -> (u,);
                                                             pull author: pull_follows insert (u,)
    u stops seeing: unfollow, block, mute       T⋈Δ(F▷H)     delete each retained t (before) -> (u,);
                                                             pull author: pull_follows delete (u,)
    tweet and follow (or unblock) in one batch  ΔT⋈Δ(F▷H)    met once: insert t -> holders after
    follow and block of u in one batch          Δ(F▷H) = 0   nothing (u never saw the author)
    block or mute of a reader who doesn't see   Δ(F▷H) = 0   nothing; the author's own block: a
                                                             ``blocks`` row (unblock: its delete)
    push -> pull: followers reach threshold     holders:     delete each retained t (before) -> every
                                                all -> none  holder before; pull_follows insert ->
                                                             every reader who sees it after
    pull -> push: followers fall below it       holders:     insert each retained t (after) -> every
                                                none -> all  reader who sees it after; pull_follows
                                                             delete -> every one before
    tweet change of a pull author               ΔT           no inbox row; tweets and author
                                                             timeline rows as above
    late change (> horizon behind watermark)    none         nothing applied; its position in
                                                             ``late`` (a dead letter)
    history stamped > 2 horizons back           none         forgotten from the state, no output
    stale or duplicate change                   0            nothing
    profile version                             none         profile row only
    refill request of reader u (internal)       none         update of the newest ``need`` retained t
                                                             below its line shown in u's inbox -> (u,)
                                                             if u is a holder after (docs/trimming.md)
    ==========================================  ===========  ==========================================

    Whenever the author's own block of a user changes side, a ``blocks`` row is written too. A step
    that emits anything ticks the key's clock once; every output carries it as ``ts``.

    >>> r1 = step(None, [FollowChange("ann", "bob", 1, "follow"), TweetUpsert("t1", "bob", 1, 100, "hi", 1)])
    >>> [(d.op, d.entry.tweet_id, d.timeline_ids) for d in r1.deltas], r1.ts
    ([('insert', 't1', ('ann',))], 1)
    >>> r2 = step(r1.state, [TweetUpsert("t1", "bob", 2, 100, "hi!", 1), FollowChange("cat", "bob", 1, "follow")])
    >>> [(d.op, d.entry.text, d.timeline_ids) for d in r2.deltas], r2.ts
    ([('update', 'hi!', ('ann',)), ('insert', 'hi!', ('cat',))], 2)
    >>> r3 = step(r2.state, [TweetUpsert("t1", "bob", 1, 100, "hi", 1)])  # stale: no output, no tick
    >>> r3.deltas, r3.tweets, r3.ts
    ((), (), 2)
    >>> r4 = step(r3.state, [TweetDelete("t1", "bob", 0)])
    >>> [(d.op, d.entry.tweet_id, d.timeline_ids) for d in r4.deltas], r4.tweets[0].entry, r4.ts
    ([('delete', 't1', ('ann', 'cat'))], None, 3)
    """
    state = _initial(state, changes, inbox_cap=inbox_cap, pull_threshold=pull_threshold, clock_start=clock_start,
                     key=key)
    key = state.key
    watermark, late = state.watermark, _NONE
    if times is not None:
        changes, watermark, late = timely(key, watermark, changes, times, retention)
    batch = fold(key, changes)
    # The usual batch is one author's new tweet: the phases with nothing to do are skipped inline.
    tweets = apply_tweets(state, batch.upserts, batch.deletes, inbox_cap, watermark)
    follows = apply_follows(state, batch.follows, watermark) if batch.follows else unchanged_follows(state)
    hides = apply_hides(state, batch.hides, watermark) if batch.hides else unchanged_hides(state)
    profiles, profile_rows = apply_profiles(state, batch.profiles) if batch.profiles else (state.profiles, _NONE)
    pull = is_pull_author(len(follows.active.after), pull_threshold)
    fanout = fan_out(state, follows, hides, pull, bool(batch.follows or batch.hides))
    relations = relation_changes(state, follows, hides) if batch.follows or batch.hides else _NONE
    out = outputs(key, tweets, fanout.inbox)
    deltas = inbox_rows(key, state.tweets, out.deltas) if out.deltas else out.deltas
    if batch.refills:  # a trimmed inbox's rows written again (docs/trimming.md#refill)
        touched_ids = {*tweets.changed, *tweets.removed, *tweets.evicted}
        deltas = [*deltas, *refill_deltas(key, batch.refills, tweets.after, fanout.inbox, touched_ids)]
    emitted = bool(deltas or out.tweets or profile_rows or out.author_timeline or fanout.pull_follows
                   or hides.blocks)
    history = _new(History, (tweets.cold, tweets.deleted, follows.followers, follows.dead_at, hides.hides, hides.dead_at))
    if retention.enabled and watermark != NO_WATERMARK:
        history = forget(retention.forget_floor(watermark), watermark, history, edges_loaded=state.edges_loaded)
    new_state = _successor(state, history, state.clock + 1 if emitted else state.clock, tweets.after,
                           follows.active.after, profiles, pull, watermark, fanout.seen)
    return StepResult(new_state, new_state.clock, tuple(deltas), tuple(out.tweets), tuple(profile_rows),
                      tuple(out.author_timeline), tuple(fanout.pull_follows), late, tuple(hides.blocks), relations)


def _initial(state: AuthorState | None, changes: Sequence[Event], *, inbox_cap: int, pull_threshold: int,
             clock_start: int, key: str | None) -> AuthorState:
    """The state the step starts from (a new key's empty one), once the arguments are checked."""
    if inbox_cap < 1:
        raise ValueError(f"step: inbox_cap must be >= 1, got {inbox_cap}")
    if pull_threshold < 1:
        raise ValueError(f"step: pull_threshold must be >= 1, got {pull_threshold}")
    if state is None:
        if not changes:
            raise ValueError("step: a new key needs at least one change")
        return AuthorState.empty(key if key is not None else key_of(changes), clock=clock_start)
    if key is not None and key != state.key:
        raise ValueError(f"step: key {key!r} given for the state of {state.key!r}")
    return state


def _successor(state: AuthorState, history: History, clock: int, tweets: Mapping[str, TweetContent],
               active: tuple[str, ...], profiles: Mapping[int, Profile], pull: bool, watermark: int,
               seen: tuple[str, ...] | None, /) -> AuthorState:
    """The state after the step: ``state`` itself when the step changed nothing in it (then the
    store writes nothing back), else a new one sharing the unchanged containers. (Positional: it runs
    on every step, and keyword arguments cost more.)"""
    cold, deleted, followers, dead_at = history.cold, history.deleted, history.followers, history.dead_at
    hides, hides_dead_at = history.hides, history.hides_dead_at
    if (tweets is state.tweets and followers is state.followers and profiles is state.profiles
            and deleted is state.deleted and cold is state.cold and clock == state.clock and pull == state.pull
            and watermark == state.watermark and dead_at is state.dead_at and hides is state.hides
            and hides_dead_at is state.hides_dead_at and seen is state.seen):
        return state
    return AuthorState(key=state.key, clock=clock, followers=followers, active=active, tweets=tweets, cold=cold,
                       deleted=deleted, profiles=profiles, pull=pull, watermark=watermark, dead_at=dead_at,
                       hides=hides, hides_dead_at=hides_dead_at, seen=seen, side=state.side)
