"""Join operator: incremental maintenance of ``tweets ⋈ follows ▷ hidden`` for one author key per call.

The view is the join of tweets and follows less the hidden (reader, author) pairs, an antijoin:
a reader does not see an author's tweets while the reader mutes or blocks the author or the author
blocks the reader (docs/blocks-and-mutes.md). Over one micro-batch it changes by the discrete
product rule (docs/design.md), with H the hidden pairs as one more input::

    ΔV = ΔT⋈(F▷H) + T⋈Δ(F▷H) + ΔT⋈Δ(F▷H)      (T, F, H = the key's tables before the batch)

:func:`step` gets it without enumerating the terms: it folds the batch into the key's final
state (per entity, the maximum under that entity's version rank, so the order of ``changes`` does
not matter and duplicates are no-ops), then diffs only what the batch touched. Every pair an author
key's rows depend on is in its state: its follow edges, and per reader the block and mute edges
between that reader and this author (a block is routed to both of its users' keys, a mute to the
muted user's key). Rows (follower, tweet) split by whether the follower *sees* the author (an
active edge, nothing hiding) before/after the batch:

- followers who see it before and after (``stay``): rows differ only for touched tweets (ΔT⋈(F▷H));
- followers who start seeing it (a follow, an unblock, an unmute): every retained tweet after the
  batch (T'⋈Δ(F▷H), which is T⋈Δ(F▷H) + ΔT⋈Δ(F▷H): a tweet and a follow in one batch meet once);
- followers who stop seeing it (an unfollow, a block, a mute): every retained tweet before the batch.

Δ(F▷H) is itself a diff of final against initial state, so a follow and a block of the same pair
in one batch meet once too: the reader never saw the author, before or after, and nothing is
emitted. Diffing final against initial state nets everything within the batch: an insert and a
removal of the same row in one batch cancel.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from types import MappingProxyType
from itertools import islice
from typing import AbstractSet, Any, Callable, Iterator, Mapping, NoReturn, Sequence, TypeAlias

from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    Profile,
    ProfileVersion,
    TweetContent,
    TweetDelete,
    TweetUpsert,
    content_beats,
    content_digest,
    edge_rank,
    hide_rank,
    join_keys,
    profile_of,
    profile_rank,
)
from feed_service.core.rows import (
    AuthorTimelineDelta,
    BlockDelta,
    DeltaOp,
    Entry,
    ProfileRow,
    PullFollowDelta,
    TimelineDelta,
    TweetChange,
)
from feed_service.core.retention import NO_WATERMARK, Retention
from feed_service.core.state import (
    BLOCKED_BY_AUTHOR,
    BLOCKS_AUTHOR,
    MUTES,
    NO_HIDES,
    AuthorState,
    ColdTweet,
    Edge,
    HideEdges,
    hides_reader,
    visible_followers,
)

DEFAULT_INBOX_CAP = 800
"""Entries kept per home timeline, and tweets kept per author key (docs/design.md, the inbox cap)."""

DEFAULT_PULL_THRESHOLD = 2_000
"""Active followers from which an author's tweets are merged in at read time instead of written to
inboxes (docs/fan-out.md says how this default was measured)."""

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

    @property
    def delta_count(self) -> int:
        """Timeline row changes once exploded: the sum of ``len(timeline_ids)``."""
        return sum(len(d.timeline_ids) for d in self.deltas)

    @property
    def emitted(self) -> bool:
        """Whether the step produced any output."""
        return bool(self.deltas or self.tweets or self.profiles or self.author_timeline or self.pull_follows
                    or self.blocks)


# NamedTuple constructors are Python functions; tuple.__new__ builds the same objects ~5x faster.
_tuple_new = tuple.__new__
_NONE: tuple = ()
_NO_ENTRIES: Mapping[str, Entry] = MappingProxyType({})


def _entry(tweet_id: str, author_id: str, c: TweetContent) -> Entry:
    return _tuple_new(Entry, (tweet_id, author_id, c[1], c[0], c[2], c[3]))


def _delta(op: DeltaOp, entry: Entry, timeline_ids: tuple[str, ...]) -> TimelineDelta:
    return _tuple_new(TimelineDelta, (op, entry, timeline_ids))


_NO_RETENTION = Retention(None)


def _beats_cold(c: TweetContent, cold: ColdTweet) -> bool:
    if c[0] != cold[0]:
        return c[0] > cold[0]
    return content_digest(c) > cold[1]


def _order(item: tuple[str, TweetContent]) -> tuple[int, str]:
    return (item[1][1], item[0])


def _merge_ordered(r: dict[str, TweetContent], changed: dict[str, TweetContent]) -> dict[str, TweetContent]:
    """Apply ``changed`` to ``r`` (owned), keeping ascending (created_at, tweet_id) iteration order.

    The usual case, new tweets newer than every retained one, appends in place; anything else
    (an older tweet arriving late, an edit moving created_at) re-sorts once.
    """
    last = next(reversed(r.items()), None)
    floor = _order(last) if last is not None else None
    in_order = True
    for item in sorted(changed.items(), key=_order):
        tid, c = item
        old = r.get(tid)
        if old is not None and old[1] == c[1]:
            r[tid] = c  # same position
        elif in_order and old is None and (floor is None or _order(item) > floor):
            r[tid] = c
            floor = _order(item)
        else:
            in_order = False
            r[tid] = c
    return r if in_order else dict(sorted(r.items(), key=_order))


def _newest_first(tweets: Mapping[str, TweetContent]) -> Iterator[tuple[str, TweetContent]]:
    return reversed(tweets.items())  # type: ignore[call-overload]


def _foreign(event: Event, key: str) -> NoReturn:
    raise ValueError(f"step: event for keys {join_keys(event)!r} routed to key {key!r}: {event!r}")


# The phases of :func:`step` hand each other plain tuples, unpacked into named locals at each call
# (a NamedTuple per phase cost ~6% of a step in bench/bench_engine.py). Their layouts:

_Batch: TypeAlias = tuple[dict[str, TweetContent], set[str], dict[str, Edge], dict[int, Profile],
                          dict[tuple[str, int], Edge]]
"""(upserts, deletes, edges, profiles, hides): each entity's highest-ranked change in the batch;
hides by (reader, kind) with kind an index of :data:`~feed_service.core.state.HideEdges`."""

_TweetsDiff: TypeAlias = tuple[Mapping[str, TweetContent], Mapping[str, TweetContent], Mapping[str, ColdTweet],
                               Mapping[str, int], dict[str, TweetContent], list[str], list[str], set[str]]
"""(before, after, cold, deleted, changed, removed, evicted, new_deletes): the retained tweets before
and after the batch, the cold and deleted maps after it; ``changed`` the upserts that beat what the
state knew, ``removed`` retained tweets the batch deleted, ``evicted`` retained tweets pushed out of
the newest ``inbox_cap`` (now cold), ``new_deletes`` tombstones new in this batch."""

_EdgesDiff: TypeAlias = tuple[Mapping[str, Edge], tuple[str, ...], tuple[str, ...], tuple[str, ...], Sequence[str],
                              Sequence[str], Mapping[str, int]]
"""(followers, active_before, active_after, stayed, added, dropped, dead_at): the edges after the
batch, the active followers before and after it, those active on both sides, who changed side, and
the stamps of the inactive edges."""

_Audience: TypeAlias = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], Sequence[str], Sequence[str]]
"""(before, after, stayed, added, dropped): whose inboxes hold the author's tweets before and after
the batch (the active followers of a push author, nobody for a pull author), who stayed, came or left."""

_NOBODY: _Audience = ((), (), (), (), ())

_HidesDiff: TypeAlias = tuple[Mapping[str, HideEdges], Mapping[str, int], AbstractSet[str], Sequence[BlockDelta]]
"""(hides, hides_dead_at, changed, blocks): the block and mute edges after the batch and the stamps
of the readers they no longer hide, the readers whose edges changed, and the author's block rows."""

_NO_READERS: AbstractSet[str] = frozenset()


def needs_edges(state: AuthorState | None, changes: Sequence[Event], *, pull_threshold: int) -> bool:
    """Whether :func:`step` of ``changes`` will read the key's follow edges and the block and mute
    edges stored with them (else a state decoded without them will do): the batch changes edges,
    the key is a push author whose tweets change, or the key crosses the pull threshold (a changed
    threshold). A pull author's new tweet does not.
    """
    if state is None:
        return False  # a new key's edges are empty
    if any(type(ev) is FollowChange or type(ev) is BlockChange or type(ev) is MuteChange for ev in changes):
        return True
    if (len(state.active) >= pull_threshold) != state.pull:
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

    Pure: ``state`` is not modified (the result shares its unchanged containers). ``state`` None
    means a new key, whose clock starts at ``clock_start``; its ``key`` may be omitted when the
    changes name it (not when they are all blocks between the same two users, which belong to
    both). Every change must have this key among its :func:`join_keys`, otherwise ``ValueError``
    (a routing bug, not bad input). ``inbox_cap`` must be the same for every step of a key.

    ``times`` are the changes' event times (Kafka record timestamps, ms), one per change; with a
    ``retention`` horizon, changes more than the horizon behind the key's watermark (its newest
    event time, this batch included) are not applied but listed in ``StepResult.late``, and history
    stamped more than two horizons back is forgotten (docs/retention.md). Without ``times`` nothing is rejected or
    forgotten.

    Step table (t a tweet of this author, u a follower; "retained" = among the author's newest
    ``inbox_cap`` live tweets by (created_at, tweet_id)):

    ============================================  ===========================================
    change, compared with the state before         timeline deltas
    ============================================  ===========================================
    new retained tweet t                           insert t -> followers active after
    edit of retained t, same created_at            update t -> followers active before & after
    edit of t that changes created_at              delete old t -> active before,
                                                   insert new t -> active after
    delete of retained t / t pushed out by cap     delete t -> followers active before
    u becomes active (follow)                      insert each retained t (after) -> (u,)
    u becomes inactive (unfollow)                  delete each retained t (before) -> (u,)
    stale or duplicate change                      nothing
    profile version                                nothing (profile row only)
    ============================================  ===========================================

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
    if inbox_cap < 1:
        raise ValueError(f"step: inbox_cap must be >= 1, got {inbox_cap}")
    if pull_threshold < 1:
        raise ValueError(f"step: pull_threshold must be >= 1, got {pull_threshold}")
    if state is None:
        if not changes:
            raise ValueError("step: a new key needs at least one change")
        state = AuthorState.empty(key if key is not None else _new_key(changes), clock=clock_start)
    elif key is not None and key != state.key:
        raise ValueError(f"step: key {key!r} given for the state of {state.key!r}")
    key = state.key
    watermark, late = state.watermark, _NONE
    if times is not None:
        if len(times) != len(changes):
            raise ValueError(f"step: {len(times)} times for {len(changes)} changes")
        if times:
            watermark = max(watermark, max(times))
        floor = retention.floor(watermark)
        late = tuple(i for i, t in enumerate(times) if t < floor)
        if late:
            for i in late:  # a foreign event must fail loudly even when it is late
                if key not in join_keys(changes[i]):
                    _foreign(changes[i], key)
            skip = set(late)
            changes = [ev for i, ev in enumerate(changes) if i not in skip]
    upserts, deletes, edge_changes, profile_changes, hide_changes = _fold(key, changes)
    tweets = _apply_tweets(state, upserts, deletes, inbox_cap, watermark)
    # The usual batch is one author's new tweet: the phases with nothing to do are skipped inline.
    active = state.active
    edges = (_apply_edges(state, edge_changes, watermark) if edge_changes
             else (state.followers, active, active, active, _NONE, _NONE, state.dead_at))
    hides = (_apply_hides(state, hide_changes, watermark) if hide_changes
             else (state.hides, state.hides_dead_at, _NO_READERS, _NONE))
    profiles, profile_rows = _apply_profiles(state, profile_changes) if profile_changes else (state.profiles, _NONE)
    retained_before, retained, cold, deleted, changed, _, _, new_deletes = tweets
    followers, _, active_after, _, _, _, _ = edges
    hides_after, hides_dead_at, _, block_rows = hides
    pull_before, pull_after = state.pull, len(active_after) >= pull_threshold
    if pull_before and pull_after and not edge_changes and not hide_changes:
        audience, pull_follows = _NOBODY, _NONE  # a pull author's tweets: no inbox, no reader changes
        seen = state.seen
    else:
        visible = _visible_diff(state, edges, hides)
        if pull_before or pull_after:
            audience = _inbox_audience(visible, pull_before, pull_after)
            pull_follows = _pull_follow_deltas(key, visible, pull_before, pull_after)
        else:  # a push author, before and after: its inbox audience is the followers who see it
            audience, pull_follows = visible, _NONE
        seen = _seen_field(visible[1], active_after)
    touched = list(_touched(tweets)) if retained is not retained_before else _NONE
    if touched or audience[3] or audience[4] or changed:
        deltas, entries = _timeline_deltas(key, tweets, touched, audience)
    else:
        deltas, entries = _NONE, _NO_ENTRIES
    author_timeline = _author_timeline_deltas(key, touched, entries) if touched else _NONE

    tweet_rows = [_tuple_new(TweetChange, (tid, key, entries[tid])) for tid in sorted(changed)]
    tweet_rows += [_tuple_new(TweetChange, (tid, key, None)) for tid in sorted(new_deletes)]
    emitted = bool(deltas or tweet_rows or profile_rows or author_timeline or pull_follows or block_rows)
    clock = state.clock + 1 if emitted else state.clock
    dead_at = edges[6]
    if retention.enabled and watermark != NO_WATERMARK:
        floor = retention.forget_floor(watermark)
        cold, deleted, followers, dead_at = _forget(floor, watermark, cold, deleted,
                                                    followers, dead_at, edges_loaded=state.edges_loaded)
        if state.edges_loaded and hides_dead_at:
            hides_after, hides_dead_at = _forget_dead(floor, watermark, hides_after, hides_dead_at)
    unchanged = (retained is state.tweets and followers is state.followers and profiles is state.profiles
                 and deleted is state.deleted and cold is state.cold and clock == state.clock
                 and pull_after == pull_before and watermark == state.watermark and dead_at is state.dead_at
                 and hides_after is state.hides and hides_dead_at is state.hides_dead_at and seen is state.seen)
    new_state = state if unchanged else AuthorState(
        key, clock, followers, active_after, retained, cold, deleted, profiles, pull_after, watermark, dead_at,
        hides_after, hides_dead_at, seen)
    return StepResult(new_state, clock, tuple(deltas), tuple(tweet_rows), tuple(profile_rows),
                      tuple(author_timeline), tuple(pull_follows), late, tuple(block_rows))


def _new_key(changes: Sequence[Event]) -> str:
    """The one key every change belongs to (``ValueError`` if that is not exactly one)."""
    keys = set(join_keys(changes[0]))
    for ev in changes[1:]:
        if len(keys) < 2:
            break
        keys.intersection_update(join_keys(ev))
    if len(keys) != 1:
        raise ValueError(f"step: the changes of a new key name {sorted(keys)!r}, not one key: pass key=")
    return keys.pop()


def _forget(floor: int, watermark: int, cold: Mapping[str, ColdTweet], deleted: Mapping[str, int],
            followers: Mapping[str, Edge], dead_at: Mapping[str, int], *, edges_loaded: bool
            ) -> tuple[Mapping[str, ColdTweet], Mapping[str, int], Mapping[str, Edge], Mapping[str, int]]:
    """Drop the history entries stamped before ``floor``; stamp entries of unknown age (a state
    written before the horizon existed) with ``watermark``, so they expire one horizon from now.

    The maps are in stamp order, so only their fronts are read unless something is dropped.
    Dead edges live with the follow edges and are forgotten only when those are loaded.
    """
    if cold and _expired(cold, floor, lambda c: c[2]):
        cold = _restamped({t: c for t, c in cold.items() if not NO_WATERMARK < c[2] < floor},
                          lambda c: c[2], lambda c: (c[0], c[1], watermark))
    if deleted and _expired(deleted, floor, lambda s: s):
        deleted = _restamped({t: s for t, s in deleted.items() if not NO_WATERMARK < s < floor},
                             lambda s: s, lambda s: watermark)
    if edges_loaded and dead_at:
        followers, dead_at = _forget_dead(floor, watermark, followers, dead_at)
    return cold, deleted, followers, dead_at


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


def _fold(key: str, changes: Sequence[Event]) -> _Batch:
    """Each entity's highest-ranked change in the batch; every change must belong to ``key``.

    A block or mute becomes a hide edge (reader, kind) of this author: a mute of this author by
    the reader, a block of this author by the reader, or this author's block of the reader.
    """
    ups: dict[str, TweetContent] = {}
    dels: set[str] = set()
    edges: dict[str, Edge] = {}
    profs: dict[int, Profile] = {}
    hides: dict[tuple[str, int], Edge] = {}
    for ev in changes:
        cls = type(ev)
        if cls is TweetUpsert:
            if ev.author_id != key:
                _foreign(ev, key)
            c = (ev.version, ev.created_at, ev.text, ev.profile_version)
            prev = ups.get(ev.tweet_id)
            if prev is None or content_beats(c, prev):
                ups[ev.tweet_id] = c
        elif cls is FollowChange:
            if ev.followee_id != key:
                _foreign(ev, key)
            if ev.follower_id == key:
                raise ValueError(f"step: self-follow reached the engine: {ev!r}")
            e = (ev.version, ev.op == "follow")
            prev_e = edges.get(ev.follower_id)
            if prev_e is None or edge_rank(*e) > edge_rank(*prev_e):
                edges[ev.follower_id] = e
        elif cls is TweetDelete:
            if ev.author_id != key:
                _foreign(ev, key)
            dels.add(ev.tweet_id)
        elif cls is ProfileVersion:
            if ev.user_id != key:
                _foreign(ev, key)
            p = profile_of(ev)
            prev_p = profs.get(ev.version)
            if prev_p is None or profile_rank(p) > profile_rank(prev_p):
                profs[ev.version] = p
        elif cls is BlockChange or cls is MuteChange:
            if cls is MuteChange:
                if ev.muted_id != key:
                    _foreign(ev, key)
                reader, kind = ev.muter_id, MUTES
            elif ev.blocker_id == key:
                reader, kind = ev.blocked_id, BLOCKED_BY_AUTHOR
            elif ev.blocked_id == key:
                reader, kind = ev.blocker_id, BLOCKS_AUTHOR
            else:
                _foreign(ev, key)
            if reader == key:
                raise ValueError(f"step: self-block or self-mute reached the engine: {ev!r}")
            h = (ev.version, ev.op == "block" or ev.op == "mute")
            prev_h = hides.get((reader, kind))
            if prev_h is None or hide_rank(*h) > hide_rank(*prev_h):
                hides[(reader, kind)] = h
        else:
            raise TypeError(f"step: not an event: {ev!r}")
    return ups, dels, edges, profs, hides


def _apply_tweets(state: AuthorState, upserts: dict[str, TweetContent], deletes: set[str],
                  inbox_cap: int, since: int) -> _TweetsDiff:
    """Merge the batch's tweets: keep the newest ``inbox_cap`` live ones, remember the rest as cold."""
    before, cold, deleted = state.tweets, state.cold, state.deleted
    new_deletes = {tid for tid in deletes if tid not in deleted} if deletes else set()
    changed: dict[str, TweetContent] = {}
    for tid, c in upserts.items():
        if tid in deletes or tid in deleted:
            continue
        old = before.get(tid)
        if old is not None:
            if not content_beats(c, old):
                continue
        else:
            was_cold = cold.get(tid)
            if was_cold is not None and not _beats_cold(c, was_cold):
                continue
        changed[tid] = c
    after = before
    removed: list[str] = []
    evicted: list[str] = []
    if changed or new_deletes:
        removed = [tid for tid in new_deletes if tid in before]
        after = dict(before)
        for tid in removed:
            del after[tid]
        if changed:
            after = _merge_ordered(after, changed)
        excess = len(after) - inbox_cap
        if excess > 0:
            evicted = list(islice(after, excess))  # the oldest: ``after`` is in ascending order
        leave_cold = [tid for tid in changed if tid in cold] + [tid for tid in new_deletes if tid in cold]
        if evicted or leave_cold:
            cold = dict(cold)
            for tid in leave_cold:
                del cold[tid]
            for tid in evicted:
                c = after.pop(tid)
                cold[tid] = (c[0], content_digest(c), since)
        if new_deletes:
            deleted = dict(deleted)
            for tid in sorted(new_deletes):
                deleted[tid] = since
    return before, after, cold, deleted, changed, removed, evicted, new_deletes


def _apply_edges(state: AuthorState, edges: dict[str, Edge], since: int) -> _EdgesDiff:
    """Apply the batch's winning edge changes; which followers became active or inactive. Every
    inactive edge the batch changed is stamped with ``since`` in ``dead_at`` (the seventh item)."""
    before = state.followers
    after = before
    dead_at = state.dead_at
    added: list[str] = []
    dropped: list[str] = []
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
    active_before = state.active
    stayed = active_after = active_before
    if dropped:
        dropped.sort()
        stayed = active_after = _without(active_before, dropped)
    if added:
        added.sort()
        active_after = _with(stayed, added)
    return after, active_before, active_after, stayed, added, dropped, dead_at


def _apply_hides(state: AuthorState, changes: dict[tuple[str, int], Edge], since: int) -> _HidesDiff:
    """Apply the batch's winning block and mute edge changes. Readers whose edges all stop hiding
    are stamped with ``since`` in ``hides_dead_at``; the author's own blocks changing side become
    block rows."""
    before = state.hides
    after: dict[str, HideEdges] | None = None
    dead_at = state.hides_dead_at
    changed: set[str] = set()
    blocks: list[BlockDelta] = []
    for (reader, kind), h in sorted(changes.items()):
        current = (after if after is not None else before).get(reader, NO_HIDES)
        old = current[kind]
        if old is not None and hide_rank(*h) <= hide_rank(*old):
            continue
        if after is None:
            after, dead_at = dict(before), dict(dead_at)
        edges = list(current)
        edges[kind] = h
        after[reader] = new = (edges[0], edges[1], edges[2])
        changed.add(reader)
        dead_at.pop(reader, None)  # type: ignore[attr-defined]
        if not hides_reader(new):
            dead_at[reader] = since  # type: ignore[index]
        if kind == BLOCKED_BY_AUTHOR and (old is not None and old[1]) != h[1]:
            blocks.append(_tuple_new(BlockDelta, ("insert" if h[1] else "delete", state.key, reader)))
    if after is None:
        return before, dead_at, _NO_READERS, _NONE
    return after, dead_at, changed, blocks


def _sees(reader: str, followers: Mapping[str, Edge], hides: Mapping[str, HideEdges]) -> bool:
    """Whether ``reader`` follows the author and nothing hides the author's tweets from them."""
    e = followers.get(reader)
    if e is None or not e[1]:
        return False
    h = hides.get(reader)
    return h is None or not hides_reader(h)


def _visible_diff(state: AuthorState, edges: _EdgesDiff, hides: _HidesDiff) -> _Audience:
    """The followers who see the author's tweets before and after the batch (active and not
    hidden), who stayed, came or left: the follow diff, less the hidden pairs (ΔH meets ΔF here,
    once, since both are diffs of final against initial state).

    Only the readers the batch changed are examined; the followers who see the author before come
    from the state (``seen``), so a block at a key with many followers costs the changed readers
    and at most one pass to drop them, as a follow or an unfollow does.
    """
    followers_after, active_before, active_after, stayed, added, dropped, _ = edges
    if not state.edges_loaded:  # edges not needed (needs_edges): no follow or hide changed, no fan-out
        return active_before, active_after, stayed, added, dropped
    hides_after, _, changed_readers, _ = hides
    hides_before = state.hides
    if not hides_before and not hides_after:  # nothing hidden, before or after: the follow diff as it is
        return active_before, active_after, stayed, added, dropped
    seen_before = visible_followers(state)
    if not added and not dropped and not changed_readers:
        return seen_before, seen_before, seen_before, _NONE, _NONE
    followers_before = state.followers
    came: list[str] = []
    left: list[str] = []
    for r in {*added, *dropped, *changed_readers}:
        before, after = _sees(r, followers_before, hides_before), _sees(r, followers_after, hides_after)
        if before != after:
            (came if after else left).append(r)
    came.sort()
    left.sort()
    stayed_seen = _without(seen_before, left) if left else seen_before
    seen_after = _with(stayed_seen, came) if came else stayed_seen
    return seen_before, seen_after, stayed_seen, came, left


def _without(items: tuple[str, ...], gone: Sequence[str]) -> tuple[str, ...]:
    """Sorted ``items`` less the sorted ``gone`` (all present): a few deletions by bisection, in C
    (as fast as a copy), or one filtering pass when many go."""
    if len(gone) > 16:
        drop = set(gone)
        return tuple(r for r in items if r not in drop)
    out = list(items)
    for r in reversed(gone):
        i = bisect_left(out, r)
        if i < len(out) and out[i] == r:
            del out[i]
    return tuple(out)


def _with(items: tuple[str, ...], came: Sequence[str]) -> tuple[str, ...]:
    """Sorted ``items`` with the sorted ``came`` (none present) merged in."""
    if len(came) > 16:
        return tuple(sorted(items + tuple(came)))
    out = list(items)
    for r in came:
        insort(out, r)
    return tuple(out)


def _seen_field(seen: tuple[str, ...], active: tuple[str, ...]) -> tuple[str, ...] | None:
    """``AuthorState.seen`` for the followers who see the author: None when that is every active one."""
    return None if seen is active or len(seen) == len(active) else seen


def _apply_profiles(state: AuthorState, profs: dict[int, Profile]) -> tuple[Mapping[int, Profile], list[ProfileRow]]:
    """One row per (user, version); a different payload at the same version wins by rank."""
    before = state.profiles
    after = before
    rows: list[ProfileRow] = []
    for v in sorted(profs):
        p = profs[v]
        old = before.get(v)
        if old is not None and (old == p or profile_rank(p) <= profile_rank(old)):
            continue
        if after is before:
            after = dict(before)
        after[v] = p  # type: ignore[index]
        rows.append(ProfileRow(state.key, v, *p))
    return after, rows


def _inbox_audience(visible: _Audience, pull_before: bool, pull_after: bool) -> _Audience:
    """Whose inboxes hold the author's tweets before and after the batch.

    A push author's are the followers who see it (``visible``), a pull author's nobody's; so
    becoming pull retracts every retained tweet from every inbox, and falling back pushes them all
    again (a real transition, computed by the same diff as a follow or an unfollow).
    """
    active_before, active_after, stayed, added, dropped = visible
    if not pull_before and not pull_after:
        return active_before, active_after, stayed, added, dropped
    if pull_before and pull_after:
        return _NOBODY
    if pull_after:  # push -> pull
        return active_before, (), (), (), active_before
    return (), active_after, (), active_after, ()  # pull -> push


def _pull_follow_deltas(key: str, visible: _Audience, pull_before: bool, pull_after: bool) -> list[PullFollowDelta]:
    """Changes of the set of followers who merge this author in at read time (while it is a pull
    author, the followers who see it; nobody otherwise): so reads never merge a hidden pair."""
    active_before, active_after, _, added, dropped = visible
    if pull_before and pull_after:
        inserts, deletes = added, dropped
    elif pull_after:
        inserts, deletes = active_after, ()
    elif pull_before:
        inserts, deletes = (), active_before
    else:
        return []
    out = []
    if deletes:
        out.append(_tuple_new(PullFollowDelta, ("delete", key, tuple(deletes))))
    if inserts:
        out.append(_tuple_new(PullFollowDelta, ("insert", key, tuple(inserts))))
    return out


def _touched(tweets: _TweetsDiff) -> Iterator[tuple[str, TweetContent | None, TweetContent | None]]:
    """(tweet_id, retained content before, after) of every tweet the batch changed, in id order."""
    before, after, _, _, changed, removed, evicted, _ = tweets
    for tid in sorted({*changed, *removed, *evicted}):
        old, new = before.get(tid), after.get(tid)
        if old != new:
            yield tid, old, new


def _author_timeline_deltas(key: str, touched: Sequence[tuple[str, TweetContent | None, TweetContent | None]],
                            entries: Mapping[str, Entry]) -> list[AuthorTimelineDelta]:
    """Changes of the author's own timeline: its retained tweets, before against after."""
    out: list[AuthorTimelineDelta] = []
    for tid, old, new in touched:
        if old is not None and new is not None and old[1] == new[1]:
            out.append(_tuple_new(AuthorTimelineDelta, ("update", entries[tid])))
            continue
        if old is not None:
            out.append(_tuple_new(AuthorTimelineDelta, ("delete", _entry(tid, key, old))))
        if new is not None:
            out.append(_tuple_new(AuthorTimelineDelta, ("insert", entries[tid])))
    return out


def _timeline_deltas(key: str, tweets: _TweetsDiff, touched: Sequence[tuple[str, TweetContent | None, TweetContent | None]],
                     audience: _Audience) -> tuple[list[TimelineDelta], dict[str, Entry]]:
    """Touched tweets x inbox holders (those who stayed, or all when the row set changes), then
    added/dropped holders x retained tweets; also the entries of the changed tweets."""
    deltas: list[TimelineDelta] = []
    whole: set[str] = set()  # tweets whose rows were fully handled for every holder
    before, after, _, _, changed, _, _, _ = tweets
    holders_before, holders_after, stayed, added, dropped = audience
    entries = {tid: _entry(tid, key, c) for tid, c in changed.items()}
    if after is not before:
        for tid, old, new in touched:
            if old is not None and new is not None and old[1] == new[1]:
                if stayed:
                    deltas.append(_delta("update", entries[tid], stayed))
                continue
            whole.add(tid)
            if old is not None and holders_before:
                deltas.append(_delta("delete", _entry(tid, key, old), holders_before))
            if new is not None and holders_after:
                deltas.append(_delta("insert", entries[tid], holders_after))
    if added:
        audience_added = tuple(added)
        for tid, c in _newest_first(after):
            if tid not in whole:
                deltas.append(_delta("insert", entries.get(tid) or _entry(tid, key, c), audience_added))
    if dropped:
        audience_dropped = tuple(dropped)
        for tid, c in _newest_first(before):
            if tid not in whole:
                deltas.append(_delta("delete", _entry(tid, key, c), audience_dropped))
    return deltas, entries
