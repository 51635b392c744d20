"""Property tests: the incremental engine against the batch reference, over random histories.

Histories mix tweets, edits, deletes, follows, unfollows, blocks, mutes, their reversals and profile
versions over a few users so that collisions (same tweet, same edge, same version, tied created_at,
a block and a follow of the same pair in one batch) are frequent; they are
shuffled, padded with duplicates and garbage lines, and cut into random micro-batches. Small pull
thresholds make authors cross between push and pull fan-out any number of times. The histories:
:mod:`tests.support.join_runs`.
"""

from __future__ import annotations

import random
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from feed_service.core.events import Event, InvalidEvent, join_keys, parse_event
from feed_service.core.join import step
from feed_service.core.reference import reference_entries, reference_tables, reference_timelines
from feed_service.core.state import AuthorState, decode_state, encode_state, visible_followers, visible_of
from feed_service.core.view import Materializer
from tests.support.join_runs import SETTINGS, Run, check_dimensions, runs


def materialize(run: Run, *, inbox_cap: int, encode_states: bool, pull_threshold: int = 1000) -> Materializer:
    engine = Materializer(inbox_cap=inbox_cap, encode_states=encode_states, pull_threshold=pull_threshold)
    for batch in run.batches:
        engine.process_batch(batch)
    return engine


def check_state_invariants(engine: Materializer) -> None:
    """What step relies on between batches: ordered, capped retained set; active = live edges, sorted."""
    for key in engine.states if not engine.encode_states else engine.stored:
        state = engine.state(key)
        assert state is not None and state.key == key
        order = [(c[1], tid) for tid, c in state.tweets.items()]
        assert order == sorted(order) and len(order) <= engine.inbox_cap
        assert state.active == tuple(sorted(f for f, edge in state.followers.items() if edge[1]))
        if state.edges_loaded:  # the cached audience is what the edges say
            assert visible_followers(state) == visible_of(state.active, state.hides, state.followers)
            assert state.seen is None or len(state.seen) < len(state.active)
        assert not (set(state.tweets) & set(state.cold)) and not (set(state.tweets) | set(state.cold)) & set(state.deleted)


@SETTINGS
@given(run=runs(), encode_states=st.booleans(), pull_threshold=st.sampled_from([1, 2, 3, 1000]),
       inline_edges=st.sampled_from([0, 1, 1024]))
def test_engine_equals_reference_below_the_cap(run: Run, encode_states: bool, pull_threshold: int,
                                               inline_edges: int) -> None:
    # At most 3 tweets per author and 3 followees per user: a cap of 100 is never reached. Pull
    # thresholds of 1-3 followers make authors cross back and forth; inline_edges 0 or 1 stores
    # edges apart, so a pull author's tweet steps without them.
    with patch("feed_service.core.stored_step.INLINE_EDGES_LIMIT", inline_edges):
        engine = materialize(run, inbox_cap=100, encode_states=encode_states, pull_threshold=pull_threshold)
    assert engine.view.snapshot() == reference_timelines(run.history, inbox_cap=100)
    assert engine.rejected == run.garbage
    check_dimensions(engine, run)
    check_state_invariants(engine)


@SETTINGS
@given(run=runs(), inbox_cap=st.integers(1, 2))
def test_at_the_cap_every_entry_is_a_live_joined_tweet(run: Run, inbox_cap: int) -> None:
    engine = materialize(run, inbox_cap=inbox_cap, encode_states=False)
    whole_join = reference_entries(reference_tables(run.history), inbox_cap=None)
    for uid in engine.view.timelines:
        entries = engine.view.entries(uid)
        assert len(entries) <= inbox_cap
        assert set(entries) <= set(whole_join.get(uid, ()))
    check_dimensions(engine, run)
    check_state_invariants(engine)


@SETTINGS
@given(run=runs(fixed_created_at=True, deletes=False), inbox_cap=st.integers(1, 3),
       pull_threshold=st.sampled_from([1, 2, 1000]))
def test_at_the_cap_without_deletes_engine_equals_reference(run: Run, inbox_cap: int, pull_threshold: int) -> None:
    # Only a delete (or an edit moving a tweet back in time) can make room that state cannot refill.
    engine = materialize(run, inbox_cap=inbox_cap, encode_states=True, pull_threshold=pull_threshold)
    assert engine.view.snapshot() == reference_timelines(run.history, inbox_cap=inbox_cap)


@SETTINGS
@given(run=runs(), inbox_cap=st.sampled_from([2, 100]), pull_threshold=st.sampled_from([1, 2, 1000]))
def test_replaying_everything_emits_nothing(run: Run, inbox_cap: int, pull_threshold: int) -> None:
    engine = materialize(run, inbox_cap=inbox_cap, encode_states=False, pull_threshold=pull_threshold)
    for key in list(engine.states):
        before = engine.state(key)
        changes = [e for e in run.history if key in join_keys(e)]
        result = step(before, changes, inbox_cap=inbox_cap, pull_threshold=pull_threshold)
        assert (result.deltas, result.tweets, result.profiles, result.author_timeline,
                result.pull_follows, result.blocks) == ((), (), (), (), (), ())
        assert result.ts == before.clock
        assert result.state == before


@SETTINGS
@given(run=runs(), split=st.randoms(use_true_random=False), inbox_cap=st.sampled_from([1, 2, 100]),
       pull_threshold=st.sampled_from([1, 2, 1000]))
def test_one_batch_does_not_depend_on_order(run: Run, split: random.Random, inbox_cap: int,
                                            pull_threshold: int) -> None:
    # Some history before, then the rest as one batch in two different orders: identical results.
    cut = split.randint(0, len(run.history))
    before = Materializer(inbox_cap=inbox_cap, pull_threshold=pull_threshold)
    before.process_batch(run.history[:cut])
    batch = run.history[cut:]
    for key in sorted({k for e in batch for k in join_keys(e)}):
        changes = [e for e in batch if key in join_keys(e)]
        shuffled = changes[:]
        split.shuffle(shuffled)
        a = step(before.state(key), changes, inbox_cap=inbox_cap, pull_threshold=pull_threshold, key=key)
        b = step(before.state(key), shuffled, inbox_cap=inbox_cap, pull_threshold=pull_threshold, key=key)
        assert (a.deltas, a.tweets, a.profiles, a.author_timeline, a.pull_follows, a.blocks, a.ts) == (
            b.deltas, b.tweets, b.profiles, b.author_timeline, b.pull_follows, b.blocks, b.ts)
        assert a.state == b.state


@SETTINGS
@given(run=runs(), inbox_cap=st.sampled_from([1, 100]), clock_start=st.integers(0, 10**12))
def test_clock_ticks_once_per_emitting_step_and_codec_round_trips(run: Run, inbox_cap: int, clock_start: int) -> None:
    states: dict[str, AuthorState] = {}
    ticks: dict[str, int] = {}
    for batch in run.batches:
        groups: dict[str, list[Event]] = {}
        for line in batch:
            try:
                ev = parse_event(line)
            except InvalidEvent:
                continue
            for key in join_keys(ev):
                groups.setdefault(key, []).append(ev)
        for key, changes in groups.items():
            prev = states.get(key)
            result = step(prev, changes, inbox_cap=inbox_cap, clock_start=clock_start, key=key)
            prev_clock = clock_start if prev is None else prev.clock
            assert result.ts == prev_clock + (1 if result.emitted else 0)
            assert result.state.clock == result.ts
            ticks[key] = ticks.get(key, 0) + result.emitted
            blob = encode_state(result.state)
            assert decode_state(blob) == result.state
            states[key] = decode_state(blob)
    for key, state in states.items():
        assert state.clock == clock_start + ticks[key]
