"""Which source event caused each output of one key's step: the ``source_ms`` of a view change.

A step folds one key's micro-batch of events into compact outputs (:mod:`feed_service.core.join`);
each output leaves the stream with the Kafka timestamp (ms) of the event that caused it, what the
freshness of the view's own change stream is measured from (docs/view-changes.md). A step does not
say which event caused which output (it diffs final against initial state), so the cause is
recovered from the batch by these rules, each the latest time when several events qualify:

- a change of tweet *t* (a home-timeline delta, an author-timeline delta, a ``tweets`` row): the
  events of *t* in the batch (an upsert: a new tweet or an edit; a delete). A timeline delta of a
  tweet the batch did not touch came from a follow, unfollow, block or mute that brought or removed
  old tweets: the follow, block and mute events of the batch concerning the delta's timelines (the
  follower, muter, or the other user of a block); else (an old tweet pushed out by the inbox cap)
  the latest time of the batch;
- a profile row: the event of that profile version;
- a pull-follow delta: the follow, block and mute events of those followers;
- a block row: the block event of that pair;
- anything else, or nothing matching: the latest time of the batch.

Times may be missing (hand-made test rows carry none): such events are ignored, and with no time at
all every source time is None. Building the index is one pass over the batch; each output is then a
dictionary lookup, except the timeline deltas that fall back to their readers, which are looked up
once per distinct follower list (the engine hands the same list object to every tweet a follow
brings).

>>> from feed_service.core.events import FollowChange, TweetUpsert
>>> from feed_service.core.join import step
>>> events = [FollowChange("ann", "bob", 1, "follow"), TweetUpsert("t1", "bob", 1, 100, "hi", 1)]
>>> result = step(None, events)
>>> step_sources(result, events, [1_000, 2_000]).deltas
(2000,)
"""

from __future__ import annotations

from typing import AbstractSet, Any, NamedTuple, Sequence

from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    TweetDelete,
    TweetUpsert,
)
from feed_service.core.join import StepResult
from feed_service.core.rows import (
    AuthorTimelineDelta,
    BlockDelta,
    ProfileRow,
    PullFollowDelta,
    TimelineDelta,
    TweetChange,
)


def _bump(index: dict, key: Any, t: int) -> None:
    old = index.get(key)
    if old is None or t > old:
        index[key] = t


class BatchSources:
    """One key's batch, indexed by what its outputs can be traced to.

    ``events`` and ``times`` are parallel (``times[i]`` the Kafka timestamp of ``events[i]``, None
    when unknown); the events at positions in ``skip`` (changes the step rejected as late) caused
    nothing and are left out.
    """

    __slots__ = ("latest", "_tweets", "_readers", "_profiles", "_blocks", "_memo")

    def __init__(self, events: Sequence[Event], times: Sequence[int | None], *,
                 skip: AbstractSet[int] = frozenset()) -> None:
        if len(times) != len(events):
            raise ValueError(f"BatchSources: {len(times)} times for {len(events)} events")
        self.latest: int | None = None
        """The latest time of the batch (None: no times at all)."""
        self._tweets: dict[str, int] = {}
        self._readers: dict[str, int] = {}
        self._profiles: dict[int, int] = {}
        self._blocks: dict[tuple[str, str], int] = {}
        self._memo: dict[int, tuple[Any, int | None]] = {}
        for i, (ev, t) in enumerate(zip(events, times)):
            if t is None or i in skip:
                continue
            if self.latest is None or t > self.latest:
                self.latest = t
            cls = type(ev)
            if cls is TweetUpsert or cls is TweetDelete:
                _bump(self._tweets, ev.tweet_id, t)
            elif cls is FollowChange:
                _bump(self._readers, ev.follower_id, t)
            elif cls is MuteChange:
                _bump(self._readers, ev.muter_id, t)
            elif cls is BlockChange:
                # At the blocker's key the reader is the blocked user and the other way round; the
                # key itself is never among its own followers, so both can be indexed.
                _bump(self._readers, ev.blocker_id, t)
                _bump(self._readers, ev.blocked_id, t)
                _bump(self._blocks, (ev.blocker_id, ev.blocked_id), t)
            elif cls is ProfileVersion:
                _bump(self._profiles, ev.version, t)

    def tweet(self, tweet_id: str) -> int | None:
        """The source time of a change of tweet ``tweet_id`` that no edge change explains."""
        t = self._tweets.get(tweet_id)
        return self.latest if t is None else t

    def readers(self, ids: Sequence[str]) -> int | None:
        """The latest follow, block or mute event concerning one of ``ids``; None if there is none."""
        if not self._readers or not ids:
            return None
        memo = self._memo.get(id(ids))
        if memo is not None and memo[0] is ids:
            return memo[1]
        readers = self._readers
        if len(ids) <= len(readers):
            found = [readers[r] for r in ids if r in readers]
        else:
            members = set(ids)
            found = [t for r, t in readers.items() if r in members]
        best = max(found) if found else None
        self._memo[id(ids)] = (ids, best)  # the list itself is kept, so its id stays its own
        return best

    def timeline(self, delta: TimelineDelta) -> int | None:
        """A home-timeline delta: its tweet's events, else the edge changes of its timelines, else the batch."""
        t = self._tweets.get(delta.entry.tweet_id)
        if t is not None:
            return t
        t = self.readers(delta.timeline_ids)
        return self.latest if t is None else t

    def author(self, delta: AuthorTimelineDelta) -> int | None:
        """An author-timeline delta: its tweet's events, else the batch."""
        return self.tweet(delta.entry.tweet_id)

    def tweet_row(self, change: TweetChange) -> int | None:
        """A ``tweets`` row: its tweet's events, else the batch."""
        return self.tweet(change.tweet_id)

    def profile(self, row: ProfileRow) -> int | None:
        """A profile row: the event of that version, else the batch."""
        t = self._profiles.get(row.version)
        return self.latest if t is None else t

    def pull_follow(self, delta: PullFollowDelta) -> int | None:
        """A pull-follow delta: the edge changes of those followers, else the batch."""
        t = self.readers(delta.follower_ids)
        return self.latest if t is None else t

    def block(self, delta: BlockDelta) -> int | None:
        """A block row: the block event of that pair, else the batch."""
        t = self._blocks.get((delta.blocker_id, delta.blocked_id))
        return self.latest if t is None else t


class StepSources(NamedTuple):
    """The source time of each output of one :class:`~feed_service.core.join.StepResult`, one tuple
    per output list of the result, in the same order."""

    deltas: tuple[int | None, ...]
    tweets: tuple[int | None, ...]
    profiles: tuple[int | None, ...]
    author_timeline: tuple[int | None, ...]
    pull_follows: tuple[int | None, ...]
    blocks: tuple[int | None, ...]


def step_sources(result: StepResult, events: Sequence[Event], times: Sequence[int | None]) -> StepSources:
    """The source time of every output of ``result``, the step of ``events`` at ``times``
    (the changes ``result.late`` lists are left out: they were not applied)."""
    src = BatchSources(events, times, skip=frozenset(result.late))
    return StepSources(
        tuple(src.timeline(d) for d in result.deltas),
        tuple(src.tweet_row(t) for t in result.tweets),
        tuple(src.profile(p) for p in result.profiles),
        tuple(src.author(a) for a in result.author_timeline),
        tuple(src.pull_follow(f) for f in result.pull_follows),
        tuple(src.block(b) for b in result.blocks),
    )
