"""Readable examples, one per rule of issue 3, and the per-step delta table of ``step``."""

from __future__ import annotations

import pytest

from feed_service.core.events import (
    Event,
    FollowChange,
    ProfileVersion,
    TweetDelete,
    TweetUpsert,
    content_digest,
)
from feed_service.core.join import Entry, StepResult, step
from feed_service.core.state import AuthorState
from feed_service.core.view import Materializer


def follow(follower: str, followee: str, version: int = 1) -> FollowChange:
    return FollowChange(follower, followee, version, "follow")


def unfollow(follower: str, followee: str, version: int = 2) -> FollowChange:
    return FollowChange(follower, followee, version, "unfollow")


def tweet(tid: str, author: str, created_at: int, text: str = "", version: int = 1, pv: int = 1) -> TweetUpsert:
    return TweetUpsert(tid, author, version, created_at, text or f"{tid} text", pv)


def texts(engine: Materializer, user: str) -> list[str]:
    return [e["text"] for e in engine.view.read(user)]


def run(*batches: list[Event], inbox_cap: int = 800) -> Materializer:
    engine = Materializer(inbox_cap=inbox_cap, encode_states=True)
    for batch in batches:
        engine.process_batch(batch)
    return engine


def test_follow_backfills_recent_tweets() -> None:
    engine = run([tweet("t1", "bob", 10, "old"), tweet("t2", "bob", 20, "new")], [follow("ann", "bob")])
    assert texts(engine, "ann") == ["new", "old"]


def test_follow_backfills_only_the_newest_inbox_cap() -> None:
    engine = run([tweet(f"t{i}", "bob", i) for i in range(5)], [follow("ann", "bob")], inbox_cap=2)
    assert texts(engine, "ann") == ["t4 text", "t3 text"]


def test_unfollow_removes_the_authors_tweets() -> None:
    engine = run([follow("ann", "bob"), follow("ann", "cat"), tweet("t1", "bob", 1), tweet("t2", "cat", 2)],
                 [unfollow("ann", "bob")])
    assert texts(engine, "ann") == ["t2 text"]


def test_delete_removes_the_tweet_from_every_timeline_and_is_final() -> None:
    engine = run([follow("ann", "bob"), follow("cat", "bob"), tweet("t1", "bob", 1)],
                 [TweetDelete("t1", "bob", 0)],
                 [tweet("t1", "bob", 1, "resurrected?", version=9)])
    assert engine.view.snapshot() == {}
    assert engine.view.tweets[("bob", "t1")] is None


def test_edit_updates_every_copy_and_a_stale_edit_is_ignored() -> None:
    engine = run([follow("ann", "bob"), follow("cat", "bob"), tweet("t1", "bob", 1, "v1")],
                 [tweet("t1", "bob", 1, "v3", version=3)],
                 [tweet("t1", "bob", 1, "v2", version=2)])
    assert texts(engine, "ann") == texts(engine, "cat") == ["v3"]


def test_late_profile_version_fills_in_the_display_name() -> None:
    engine = run([follow("ann", "bob"), tweet("t1", "bob", 1, pv=2), ProfileVersion("bob", 1, "Bobby")])
    assert engine.view.read("ann")[0]["author_display_name"] is None  # version 2 not known yet
    result = engine.step_key("bob", [ProfileVersion("bob", 2, "Bob")])
    assert result.deltas == ()  # names are joined at read time, not fanned out
    assert engine.view.read("ann")[0]["author_display_name"] == "Bob"


def test_a_newer_profile_version_does_not_rename_old_tweets() -> None:
    engine = run([follow("ann", "bob"), tweet("t1", "bob", 1, pv=1), tweet("t2", "bob", 2, pv=2),
                  ProfileVersion("bob", 1, "Old"), ProfileVersion("bob", 2, "New")])
    assert [e["author_display_name"] for e in engine.view.read("ann")] == ["New", "Old"]


def test_tweet_and_follow_in_the_same_batch_meet_exactly_once() -> None:
    # ΔT⋈ΔF: neither dropped nor duplicated, in either order within the batch.
    for batch in ([tweet("t1", "bob", 1), follow("ann", "bob")], [follow("ann", "bob"), tweet("t1", "bob", 1)]):
        result = step(None, batch)
        assert [(d.op, d.entry.tweet_id, d.timeline_ids) for d in result.deltas] == [("insert", "t1", ("ann",))]


def test_insert_and_removal_in_one_batch_cancel() -> None:
    before = step(None, [follow("ann", "bob")]).state
    result = step(before, [tweet("t1", "bob", 1), TweetDelete("t1", "bob", 1)])
    assert result.deltas == ()
    assert [(c.tweet_id, c.entry) for c in result.tweets] == [("t1", None)]  # the tombstone row only
    result = step(before, [tweet("t1", "bob", 1), unfollow("ann", "bob")])
    assert result.deltas == ()


def test_follow_tie_unfollow_wins_and_older_follow_cannot_revive() -> None:
    engine = run([tweet("t1", "bob", 1)], [FollowChange("ann", "bob", 3, "follow"), FollowChange("ann", "bob", 3, "unfollow")],
                 [FollowChange("ann", "bob", 2, "follow")])
    assert engine.view.snapshot() == {}
    engine.process_batch([FollowChange("ann", "bob", 4, "follow")])
    assert texts(engine, "ann") == ["t1 text"]


def test_same_version_upserts_resolve_by_digest_in_any_order() -> None:
    a, b = tweet("t1", "bob", 1, "a", version=1), tweet("t1", "bob", 1, "b", version=1)
    winner = max((a, b), key=lambda e: content_digest((e.version, e.created_at, e.text, e.profile_version)))
    assert a.text != b.text and content_digest(
        (a.version, a.created_at, a.text, a.profile_version)) != content_digest((b.version, b.created_at, b.text, b.profile_version))
    for order, expected in (([a, b], winner), ([b, a], winner), ([a], a), ([b], b)):
        engine = run([follow("ann", "bob")], *([e] for e in order))
        assert texts(engine, "ann") == [expected.text]
        # and within one batch
        assert texts(run([follow("ann", "bob")], list(order)), "ann") == [expected.text]


def test_pushed_out_tweet_keeps_its_version() -> None:
    # t1 leaves the state at cap 1; a late older upsert of it must neither come back nor change its row.
    engine = run([follow("ann", "bob"), tweet("t1", "bob", 1, "v2", version=2)], [tweet("t2", "bob", 5)],
                 [tweet("t1", "bob", 9, "v1", version=1)], inbox_cap=1)
    assert texts(engine, "ann") == ["t2 text"]
    assert engine.view.tweets[("bob", "t1")].text == "v2"
    state = engine.state("bob")
    assert state is not None and set(state.tweets) == {"t2"} and state.cold["t1"][0] == 2


def test_edit_moving_created_at_is_delete_plus_insert() -> None:
    before = step(None, [follow("ann", "bob"), tweet("t1", "bob", 1)]).state
    result = step(before, [tweet("t1", "bob", 7, version=2)])
    assert [(d.op, d.entry.created_at) for d in result.deltas] == [("delete", 1), ("insert", 7)]


def test_profile_same_version_conflict_greater_payload_wins() -> None:
    engine = run([ProfileVersion("bob", 1, "Al")], [ProfileVersion("bob", 1, "Zed")], [ProfileVersion("bob", 1, "Al")])
    assert engine.view.display_name("bob", 1) == "Zed"


def test_rejected_events_are_counted_and_change_nothing() -> None:
    engine = Materializer()
    report = engine.process_batch(['{"type":"follow","op":"follow","follower_id":"a","followee_id":"a","version":1}',
                                   "{", '{"type":"tweet","op":"upsert"}'], first_position=10)
    assert [(r.position, r.code) for r in report.rejections] == [(10, "self_follow"), (11, "bad_json"), (12, "missing_field")]
    assert engine.rejected == 3 and engine.states == {}


# --- per-step delta table -------------------------------------------------------------------------

SEED: list[Event] = [follow("ann", "bob"), follow("cat", "bob"), tweet("t1", "bob", 10, "one"), tweet("t2", "bob", 20, "two")]


def seeded() -> AuthorState:
    return step(None, SEED, clock_start=100).state


def summary(result: StepResult) -> list[tuple[str, str, str, tuple[str, ...]]]:
    return [(d.op, d.entry.tweet_id, d.entry.text, d.timeline_ids) for d in result.deltas]


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        pytest.param([tweet("t3", "bob", 30, "three")], [("insert", "t3", "three", ("ann", "cat"))], id="new tweet"),
        pytest.param([tweet("t1", "bob", 10, "ONE", version=2)], [("update", "t1", "ONE", ("ann", "cat"))], id="edit"),
        pytest.param([TweetDelete("t2", "bob", 5)], [("delete", "t2", "two", ("ann", "cat"))], id="delete"),
        pytest.param([follow("dan", "bob")], [("insert", "t2", "two", ("dan",)), ("insert", "t1", "one", ("dan",))],
                     id="follow backfills newest first"),
        pytest.param([unfollow("ann", "bob")], [("delete", "t2", "two", ("ann",)), ("delete", "t1", "one", ("ann",))],
                     id="unfollow"),
        pytest.param([tweet("t3", "bob", 30, "three"), follow("dan", "bob")],
                     [("insert", "t3", "three", ("ann", "cat", "dan")), ("insert", "t2", "two", ("dan",)),
                      ("insert", "t1", "one", ("dan",))], id="tweet and follow in one batch"),
        pytest.param([tweet("t1", "bob", 10, "ONE", version=2), follow("dan", "bob"), unfollow("cat", "bob")],
                     [("update", "t1", "ONE", ("ann",)), ("insert", "t2", "two", ("dan",)),
                      ("insert", "t1", "ONE", ("dan",)), ("delete", "t2", "two", ("cat",)),
                      ("delete", "t1", "one", ("cat",))], id="edit, follow and unfollow in one batch"),
        pytest.param([follow("ann", "bob"), tweet("t1", "bob", 10, "one")], [], id="duplicates"),
        pytest.param([tweet("t1", "bob", 10, "stale", version=0), FollowChange("ann", "bob", 0, "unfollow")], [],
                     id="stale versions"),
        pytest.param([ProfileVersion("bob", 1, "Bob")], [], id="profile version"),
    ],
)
def test_step_delta_table(batch: list[Event], expected: list[tuple[str, str, str, tuple[str, ...]]]) -> None:
    state = seeded()
    result = step(state, batch)
    assert summary(result) == expected
    assert result.ts == state.clock + (1 if result.emitted else 0)
    assert step(state, batch) == result  # pure: same state and batch, same outputs and ts
    assert step(result.state, batch).emitted is False  # replay after applying: nothing new


def test_clock_starts_at_clock_start_and_ticks_only_when_emitting() -> None:
    r1 = step(None, [follow("ann", "bob")], clock_start=100)
    assert (r1.ts, r1.emitted) == (100, False)
    r2 = step(r1.state, [tweet("t1", "bob", 1)])
    assert (r2.ts, r2.state.clock) == (101, 101)
    assert [(d.op, d.entry, d.timeline_ids) for d in r2.deltas] == [
        ("insert", Entry("t1", "bob", 1, 1, "t1 text", 1), ("ann",))]
    r3 = step(r2.state, [tweet("t1", "bob", 1)])  # a duplicate: nothing emitted, the clock stays
    assert (r3.ts, r3.emitted, r3.state.clock) == (101, False, 101)


def test_step_rejects_misrouted_events() -> None:
    with pytest.raises(ValueError, match="routed to key 'bob'"):
        step(AuthorState.empty("bob"), [tweet("t1", "cat", 1)])
