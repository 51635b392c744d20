"""The history horizon: what is forgotten, what is rejected, and that the view stays exact.

The guarantee under test (docs/retention.md): with event times and a horizon ``H``, a change more
than ``H`` behind its key's watermark is rejected (``beyond_horizon``), history is forgotten two
horizons back, and for every history that keeps the two producer assumptions (a change published
more than ``H`` after another change of the same entity has the higher version; no upsert of a
tweet more than ``H`` after its delete) the view equals the batch reference over the accepted
changes, whatever the arrival order, batching and duplicates.
"""

from __future__ import annotations

import pickle
import random
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feed_service.core.events import Event, FollowChange, MuteChange, ProfileVersion, TweetDelete, TweetUpsert, join_key
from feed_service.core.join import step
from feed_service.core.reference import reference_timelines
from feed_service.core.retention import BEYOND_HORIZON, NO_WATERMARK, Retention
from feed_service.core.state import decode_parts, encode_core
from feed_service.core.stored_step import step_stored
from feed_service.core.view import Materializer
from tests.support.sizes import examples

H = 100
RETENTION = Retention(H)


def test_a_replayed_upsert_beyond_the_horizon_is_rejected_and_the_tweet_stays_deleted() -> None:
    up = TweetUpsert("t1", "bob", 1, 10, "hi", 0)
    follow = FollowChange("ann", "bob", 1, "follow")
    r1 = step(None, [follow, up], times=[0, 0], retention=RETENTION)
    r2 = step(r1.state, [TweetDelete("t1", "bob", 2)], times=[50], retention=RETENTION)
    assert [d.op for d in r2.deltas] == ["delete"] and "t1" in r2.state.deleted
    # Three horizons later the tombstone is forgotten...
    r3 = step(r2.state, [TweetUpsert("t2", "bob", 3, 20, "new", 0)], times=[50 + 3 * H], retention=RETENTION)
    assert "t1" not in r3.state.deleted
    # ...and the old upsert, replayed with its original event time, is a dead letter, not a resurrection.
    r4 = step(r3.state, [up], times=[0], retention=RETENTION)
    assert r4.late == (0,) and not r4.deltas and not r4.tweets and "t1" not in r4.state.tweets


def test_a_late_change_within_the_horizon_is_applied_by_the_version_rules() -> None:
    r1 = step(None, [FollowChange("ann", "bob", 5, "unfollow")], times=[1_000], retention=RETENTION)
    late_older = step(r1.state, [FollowChange("ann", "bob", 4, "follow")], times=[1_000 - H], retention=RETENTION)
    assert late_older.late == () and late_older.state.followers["ann"] == (5, False)
    late_newer = step(r1.state, [FollowChange("ann", "bob", 6, "follow")], times=[1_000 - H], retention=RETENTION)
    assert late_newer.late == () and late_newer.state.active == ("ann",)
    too_late = step(r1.state, [FollowChange("ann", "bob", 6, "follow")], times=[1_000 - H - 1], retention=RETENTION)
    assert too_late.late == (0,) and too_late.state.active == ()


def test_dead_edges_are_forgotten_two_horizons_after_they_died_live_ones_never() -> None:
    r = step(None, [FollowChange("ann", "bob", 1, "follow"), FollowChange("cat", "bob", 1, "follow")],
             times=[0, 0], retention=RETENTION)
    r = step(r.state, [FollowChange("cat", "bob", 2, "unfollow")], times=[10], retention=RETENTION)
    assert r.state.dead_at == {"cat": 10}
    r = step(r.state, [ProfileVersion("bob", 1, "Bob", None, None)], times=[10 + 2 * H], retention=RETENTION)
    assert "cat" in r.state.followers  # stamped exactly two horizons back: still kept
    r = step(r.state, [ProfileVersion("bob", 2, "Bob", None, None)], times=[11 + 2 * H], retention=RETENTION)
    assert dict(r.state.followers) == {"ann": (1, True)} and not r.state.dead_at


def test_dead_edges_wait_for_a_batch_that_loads_the_edges() -> None:
    r = step(None, [FollowChange("ann", "bob", 1, "follow"), FollowChange("cat", "bob", 2, "unfollow")],
             times=[0, 0], retention=RETENTION)
    lean = decode_parts(encode_core(r.state), None)  # as a batch of a key with separate edges sees it
    assert not lean.edges_loaded
    r2 = step(lean, [ProfileVersion("bob", 1, "Bob", None, None)], times=[5 * H], retention=RETENTION)
    assert not r2.state.edges_loaded and r2.state.watermark == 5 * H


def test_cold_digests_are_forgotten_and_history_stays_bounded_over_a_long_run() -> None:
    state = None
    for i in range(3_000):
        batch: list[Event] = [TweetUpsert(f"t{i}", "bob", 1, i, "x", 0)]
        if i % 3 == 0 and i:
            batch.append(TweetDelete(f"t{i - 1}", "bob", 2))
        result = step(state, batch, inbox_cap=5, times=[i] * len(batch), retention=RETENTION)
        state = result.state
    assert state is not None
    # Kept: what was stamped within two horizons (one new history entry per time unit at most).
    assert len(state.cold) + len(state.deleted) <= 2 * H + 2
    assert all(c[2] >= state.watermark - 2 * H for c in state.cold.values())
    assert all(s >= state.watermark - 2 * H for s in state.deleted.values())


def test_without_times_nothing_is_rejected_or_forgotten() -> None:
    r = step(None, [TweetUpsert("t1", "bob", 1, 1, "x", 0), TweetDelete("t1", "bob", 2)], retention=RETENTION)
    r = step(r.state, [TweetUpsert("t2", "bob", 1, 2, "y", 0)], retention=RETENTION)
    assert r.late == () and r.state.watermark == NO_WATERMARK and "t1" in r.state.deleted


def test_a_state_written_before_the_horizon_is_upgraded_then_forgets_its_history() -> None:
    # The two-part layout (format 2): core without watermark, cold without stamps, deletes a frozenset.
    core = (b"\x02" + pickle.dumps(("bob", 7, 1, False, {"t3": (1, 3, "x", 0)}, {"t1": (1, 99)},
                                    frozenset({"t2"}), {}, ({"ann": (1, True), "cat": (3, False)}, ("ann",))),
                                   protocol=5))
    old = decode_parts(core, None)
    assert old.watermark == NO_WATERMARK and old.cold["t1"] == (1, 99, NO_WATERMARK)
    assert dict(old.deleted) == {"t2": NO_WATERMARK} and old.dead_at == {"cat": NO_WATERMARK}
    done = step_stored(core, lambda: None, [FollowChange("dan", "bob", 1, "follow")], times=[1_000],
                       retention=RETENTION)
    stamped = done.result.state
    assert stamped.cold["t1"][2] == 1_000 and stamped.deleted["t2"] == 1_000 and stamped.dead_at["cat"] == 1_000
    later = step(stamped, [FollowChange("eve", "bob", 1, "follow")], times=[1_001 + 2 * H], retention=RETENTION)
    assert not later.state.cold and not later.state.deleted and "cat" not in later.state.followers


def test_the_materializer_reports_beyond_horizon_rejections_at_their_positions() -> None:
    engine = Materializer(retention=RETENTION)
    engine.process_batch([FollowChange("ann", "bob", 1, "follow")], times=[1_000])
    report = engine.process_batch([TweetUpsert("t1", "bob", 1, 1, "x", 0), TweetUpsert("t2", "bob", 1, 2, "y", 0)],
                                  first_position=10, times=[1_000 - H - 1, 1_000])
    assert [(r.position, r.code) for r in report.rejections] == [(10, BEYOND_HORIZON)]
    assert report.accepted == 1 and [e["tweet_id"] for e in engine.view.read("ann")] == ["t2"]


# --- random timed histories ------------------------------------------------------------------------

USERS = ["u0", "u1", "u2", "u3"]
TWEET_IDS = ["t0", "t1", "t2", "t3"]


@dataclass
class TimedRun:
    """Occurrences (event, publish time) in arrival order, cut into batches."""

    batches: list[list[tuple[Event, int]]]
    horizon: int


def _event(rnd: random.Random, version: int, time: int) -> Event:
    # Mutes (one key each) stand for the hide edges here; a block's two copies are judged at two
    # keys' watermarks, which the plain reference cannot express (docs/blocks-and-mutes.md).
    kind = rnd.choice(["upsert", "upsert", "upsert", "delete", "follow", "follow", "follow", "profile", "mute"])
    if kind == "upsert":
        author, tid = rnd.choice(USERS), rnd.choice(TWEET_IDS)
        created = time if rnd.random() < 0.8 else rnd.randint(0, time + 1)
        return TweetUpsert(tid, author, version, created, rnd.choice(["a", "b"]), rnd.randint(0, 1))
    if kind == "delete":
        return TweetDelete(rnd.choice(TWEET_IDS), rnd.choice(USERS), version)
    if kind == "follow":
        follower, followee = rnd.sample(USERS, 2)
        return FollowChange(follower, followee, version, rnd.choice(["follow", "follow", "unfollow"]))
    if kind == "mute":
        muter, muted = rnd.sample(USERS, 2)
        return MuteChange(muter, muted, version, rnd.choice(["mute", "unmute"]))
    return ProfileVersion(rnd.choice(USERS), rnd.randint(0, 2), rnd.choice(["A", "B"]), None, None)


@st.composite
def timed_runs(draw: st.DrawFn) -> TimedRun:
    """Histories that keep the producer assumptions, delivered late, out of order and twice.

    Publish time = position in the history; versions lag it by at most ``jitter`` < H (so changes
    more than H apart are ordered); upserts of a deleted tweet stop H after its delete. Delivery:
    most changes on time, some a little late (within H), some far beyond the horizon, plus replays.
    """
    rnd = draw(st.randoms(use_true_random=False))
    horizon = draw(st.sampled_from([2, 3, 5, 10, 40, 1_000]))
    jitter = horizon - 1
    size = draw(st.integers(0, 120))
    published: list[tuple[Event, int]] = []
    deleted_at: dict[tuple[str, str], int] = {}
    for t in range(size):
        ev = _event(rnd, rnd.randint(max(0, t - jitter), t), t)
        if isinstance(ev, TweetUpsert):
            d = deleted_at.get((ev.author_id, ev.tweet_id))
            if d is not None and t > d + horizon:
                continue
        elif isinstance(ev, TweetDelete):
            deleted_at.setdefault((ev.author_id, ev.tweet_id), t)
        published.append((ev, t))
    arrivals: list[tuple[float, tuple[Event, int]]] = []
    for occurrence in published:
        t = occurrence[1]
        roll = rnd.random()
        delay = 0 if roll < 0.6 else rnd.randint(0, horizon + jitter) if roll < 0.9 else rnd.randint(3 * horizon, 3 * horizon + size)
        arrivals.append((t + delay + rnd.random(), occurrence))
    for occurrence in rnd.sample(published, len(published) // 5):  # replays: original times, any arrival
        arrivals.append((rnd.uniform(0, size + 4 * horizon), occurrence))
    arrivals.sort(key=lambda a: a[0])
    ordered = [occurrence for _, occurrence in arrivals]
    batches: list[list[tuple[Event, int]]] = []
    i = 0
    while i < len(ordered):
        n = rnd.randint(1, 10)
        batches.append(ordered[i:i + n])
        i += n
    return TimedRun(batches, horizon)


def _expected_late(run: TimedRun) -> list[list[bool]]:
    """Per batch and occurrence: whether it is beyond the horizon of its key at that batch."""
    watermark: dict[str, int] = {}
    out = []
    for batch in run.batches:
        for ev, t in batch:
            key = join_key(ev)
            watermark[key] = max(watermark.get(key, NO_WATERMARK), t)
        out.append([t < watermark[join_key(ev)] - run.horizon for ev, t in batch])
    return out


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=timed_runs(), encode_states=st.booleans(), pull_threshold=st.sampled_from([1, 2, 1000]))
def test_with_retention_the_view_equals_the_reference_over_the_accepted_changes(
        run: TimedRun, encode_states: bool, pull_threshold: int) -> None:
    retention = Retention(run.horizon)
    engine = Materializer(inbox_cap=100, encode_states=encode_states, retention=retention,
                          pull_threshold=pull_threshold)
    expected = _expected_late(run)
    accepted: list[Event] = []
    for batch, late in zip(run.batches, expected):
        report = engine.process_batch([ev for ev, _ in batch], times=[t for _, t in batch])
        assert sorted(r.position for r in report.rejections) == [i for i, is_late in enumerate(late) if is_late]
        assert {r.code for r in report.rejections} <= {BEYOND_HORIZON}
        accepted += [ev for (ev, _), is_late in zip(batch, late) if not is_late]
    assert engine.view.snapshot() == reference_timelines(accepted, inbox_cap=100)
    for key in {join_key(ev) for batch in run.batches for ev, _ in batch}:
        state = engine.state(key)
        if state is None:
            continue
        floor = retention.forget_floor(state.watermark)
        assert all(s >= floor for s in state.deleted.values())
        assert all(c[2] >= floor for c in state.cold.values())
        if state.edges_loaded:
            assert all(s >= floor for s in state.dead_at.values())
            assert set(state.dead_at) == {f for f, e in state.followers.items() if not e[1]}
            assert all(s >= floor for s in state.hides_dead_at.values())


@pytest.mark.parametrize("bad", [0, -5, 1.5])
def test_a_horizon_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError):
        Retention(bad)  # type: ignore[arg-type]


def test_kafka_and_cassandra_settings_come_from_the_one_horizon() -> None:
    from feed_service.settings import Settings
    from feed_service.store.schema import gc_grace_alignments, schema_statements

    settings = Settings(history_horizon_s=3_600)
    compacted = [s for s in settings.topics.values() if s.config.get("cleanup.policy") == "compact"]
    assert compacted and all(s.config["delete.retention.ms"] == "3600000" for s in compacted)
    assert "delete.retention.ms" not in settings.topics["dead_letter"].config
    assert settings.with_topic_suffix(".x").topics["tweets"].config["delete.retention.ms"] == "3600000"
    grace = settings.retention.cassandra_gc_grace_seconds()
    assert grace == 3_600
    statements = schema_statements("ks", gc_grace_seconds=grace)
    assert all("gc_grace_seconds = 3600" in s for s in statements if "gc_grace_seconds" in s)
    tables = {s.split()[2] for s in gc_grace_alignments("ks", grace)}
    assert {"ks.home_timeline", "ks.tweets", "ks.author_timeline", "ks.pull_follows"} <= tables
    assert Settings(history_horizon_s=0).retention.cassandra_gc_grace_seconds() is None
