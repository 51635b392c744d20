"""Blocks and mutes in the join engine: examples of each rule (docs/blocks-and-mutes.md).

The property tests (``test_join_properties.py``) hold the engine to the reference over random
histories with blocks and mutes; these tests name each rule and the costs the design promises.
"""

from __future__ import annotations

import pytest

from feed_service.core.events import BlockChange, FollowChange, MuteChange, TweetUpsert, parse_event
from feed_service.core.join import needs_edges, step
from feed_service.core.reference import reference_timelines
from feed_service.core.retention import Retention
from feed_service.core.rows import BlockDelta
from feed_service.core.state import decode_parts, decode_state, encode_core, encode_edges, encode_state
from feed_service.core.view import Materializer
from feed_service.errors import InvalidEvent


def tweet(tid: str, author: str, created_at: int, version: int = 1) -> TweetUpsert:
    return TweetUpsert(tid, author, version, created_at, f"text of {tid}", 0)


def follow(follower: str, followee: str, version: int = 1, op: str = "follow") -> FollowChange:
    return FollowChange(follower, followee, version, op)  # type: ignore[arg-type]


def ids(engine: Materializer, user: str) -> list[str]:
    return [e["tweet_id"] for e in engine.view.read(user)]


def history() -> list:
    """ann and bob follow each other, cat follows both; each has two tweets."""
    return [follow("ann", "bob"), follow("bob", "ann"), follow("cat", "ann"), follow("cat", "bob"),
            tweet("a1", "ann", 10), tweet("a2", "ann", 30), tweet("b1", "bob", 20), tweet("b2", "bob", 40)]


def run(*batches: list, inbox_cap: int = 800, pull_threshold: int = 2_000) -> Materializer:
    engine = Materializer(inbox_cap=inbox_cap, pull_threshold=pull_threshold, encode_states=True)
    for batch in batches:
        report = engine.process_batch(batch)
        assert not report.rejections, report.rejections
    return engine


def test_a_block_hides_both_directions_and_nobody_else() -> None:
    engine = run(history(), [BlockChange("ann", "bob", 1, "block")])
    assert ids(engine, "ann") == []
    assert ids(engine, "bob") == []
    assert ids(engine, "cat") == ["b2", "a2", "b1", "a1"]
    assert engine.view.blocks == {("ann", "bob")}


def test_a_mute_hides_only_the_muted_author_from_the_muter() -> None:
    engine = run(history(), [MuteChange("ann", "bob", 1, "mute")])
    assert ids(engine, "ann") == []
    assert ids(engine, "bob") == ["a2", "a1"]
    assert engine.view.blocks == set()


def test_unblock_and_unmute_restore_exactly_the_definition() -> None:
    events = history() + [BlockChange("ann", "bob", 1, "block"), MuteChange("cat", "ann", 1, "mute")]
    later = [tweet("b3", "bob", 50), BlockChange("ann", "bob", 2, "unblock"), MuteChange("cat", "ann", 2, "unmute")]
    engine = run(events, later)
    assert ids(engine, "ann") == ["b3", "b2", "b1"]  # bob's retained tweets came back, the new one too
    assert ids(engine, "cat") == ["b3", "b2", "a2", "b1", "a1"]
    assert engine.view.snapshot() == reference_timelines(events + later)
    assert engine.view.blocks == set()


def test_a_block_and_a_follow_of_the_same_pair_in_one_batch_meet_once() -> None:
    # The follow alone would insert dan's tweets into eve's inbox; with the block in the same batch
    # the step emits nothing for that pair, not an insert and a delete.
    setup = [tweet("d1", "dan", 5), tweet("d2", "dan", 6)]
    engine = run(setup)
    result = engine.step_key("dan", [follow("eve", "dan"), BlockChange("dan", "eve", 1, "block")])
    assert result.deltas == ()
    assert result.blocks == (BlockDelta("insert", "dan", "eve"),)
    assert ids(engine, "eve") == []


def test_ties_go_to_the_hiding_op_in_any_order() -> None:
    for order in ([BlockChange("ann", "bob", 3, "unblock"), BlockChange("ann", "bob", 3, "block")],
                  [BlockChange("ann", "bob", 3, "block"), BlockChange("ann", "bob", 3, "unblock")]):
        engine = run(history(), order)
        assert ids(engine, "ann") == [] and engine.view.blocks == {("ann", "bob")}
    for order in ([MuteChange("ann", "bob", 3, "unmute"), MuteChange("ann", "bob", 3, "mute")],
                  [MuteChange("ann", "bob", 3, "mute"), MuteChange("ann", "bob", 3, "unmute")]):
        engine = run(history(), order[:1], order[1:])
        assert ids(engine, "ann") == []


def test_an_older_unblock_arriving_late_changes_nothing() -> None:
    engine = run(history(), [BlockChange("ann", "bob", 5, "block")])
    result = engine.step_key("ann", [BlockChange("ann", "bob", 4, "unblock")])
    assert not result.emitted
    assert ids(engine, "ann") == []


def test_self_blocks_and_self_mutes_are_rejected_with_their_own_codes() -> None:
    engine = Materializer()
    report = engine.process_batch([
        '{"type":"block","op":"block","blocker_id":"ann","blocked_id":"ann","version":1}',
        '{"type":"mute","op":"mute","muter_id":"bob","muted_id":"bob","version":1}',
        '{"type":"block","op":"mute","blocker_id":"ann","blocked_id":"bob","version":1}',
        '{"type":"mute","op":"unmute","muter_id":"bob","version":1}',
    ])
    assert [(r.position, r.code) for r in report.rejections] == [
        (0, "self_block"), (1, "self_mute"), (2, "unknown_op"), (3, "missing_field")]
    with pytest.raises(ValueError, match="self-block or self-mute"):
        step(None, [BlockChange("ann", "ann", 1, "block")], key="ann")


def test_parse_event_round_trips_the_new_envelopes() -> None:
    block = parse_event('{"type":"block","op":"unblock","blocker_id":"a","blocked_id":"b","version":2}')
    mute = parse_event('{"type":"mute","op":"mute","muter_id":"a","muted_id":"b","version":0}')
    assert block == BlockChange("a", "b", 2, "unblock") and mute == MuteChange("a", "b", 0, "mute")
    with pytest.raises(InvalidEvent) as exc:
        parse_event('{"type":"block","op":"block","blocker_id":"a","blocked_id":"a","version":2}')
    assert exc.value.code == "self_block"


def test_a_new_key_whose_changes_are_all_blocks_of_one_pair_needs_its_key() -> None:
    changes = [BlockChange("ann", "bob", 1, "block")]
    with pytest.raises(ValueError, match="pass key="):
        step(None, changes)
    assert step(None, changes, key="ann").blocks == (BlockDelta("insert", "ann", "bob"),)
    assert step(None, changes, key="bob").blocks == ()  # bob's key: ann reads nothing of bob's


def test_blocks_and_mutes_read_the_edges_and_survive_the_codec() -> None:
    result = step(None, [follow("ann", "bob"), MuteChange("cat", "bob", 1, "mute"),
                         BlockChange("bob", "dan", 2, "block")])
    state = result.state
    assert needs_edges(state, [MuteChange("ann", "bob", 2, "mute")], pull_threshold=10)
    assert decode_state(encode_state(state)) == state
    assert decode_parts(encode_core(state), encode_edges(state)) == state
    assert decode_parts(encode_core(state, with_edges=True), None) == state


def test_a_reader_blocking_an_author_removes_the_retained_tweets_from_that_reader_only() -> None:
    tweets = [tweet(f"t{i}", "star", i) for i in range(800)]
    engine = run([follow("ann", "star"), follow("bob", "star")], tweets)
    result = engine.step_key("star", [BlockChange("ann", "star", 1, "block")])
    assert len(result.deltas) == 800
    assert {d.timeline_ids for d in result.deltas} == {("ann",)} and {d.op for d in result.deltas} == {"delete"}
    assert ids(engine, "ann") == [] and len(ids(engine, "bob")) == 800


def test_a_pull_author_blocking_one_reader_touches_only_that_reader() -> None:
    followers = [follow(f"f{i:05d}", "star") for i in range(5_000)]
    engine = run(followers, [tweet("s1", "star", 1)], pull_threshold=1_000)
    assert engine.state("star").pull
    result = engine.step_key("star", [BlockChange("star", "f00042", 1, "block")])
    assert result.deltas == ()
    assert [(p.op, p.follower_ids) for p in result.pull_follows] == [("delete", ("f00042",))]
    assert result.blocks == (BlockDelta("insert", "star", "f00042"),)
    assert ids(engine, "f00042") == [] and ids(engine, "f00041") == ["s1"]
    # The blocked reader's own key hides the reader's tweets from the star (who follows nobody here).
    assert not engine.step_key("f00042", [BlockChange("star", "f00042", 1, "block")]).deltas


def test_a_push_author_with_hidden_followers_fans_a_new_tweet_out_to_the_others_only() -> None:
    engine = run([follow("ann", "bob"), follow("cat", "bob"), MuteChange("ann", "bob", 1, "mute")])
    result = engine.step_key("bob", [tweet("b1", "bob", 1)])
    assert [(d.op, d.timeline_ids) for d in result.deltas] == [("insert", ("cat",))]


def test_hide_edges_no_longer_hiding_are_forgotten_past_two_horizons() -> None:
    horizon = 1_000
    engine = Materializer(retention=Retention(horizon), encode_states=True)
    engine.process_batch([follow("ann", "bob"), MuteChange("ann", "bob", 1, "mute")], times=[0, 0])
    engine.process_batch([MuteChange("ann", "bob", 2, "unmute")], times=[10])
    assert "ann" in engine.state("bob").hides
    engine.process_batch([tweet("b1", "bob", 1)], times=[10 + 2 * horizon + 1])
    state = engine.state("bob")
    assert "ann" not in state.hides and not state.hides_dead_at
    assert ids(engine, "ann") == ["b1"]


def test_states_of_the_layout_before_blocks_are_read() -> None:
    import pickle

    state = step(None, [follow("ann", "bob"), tweet("b1", "bob", 1)]).state
    core = pickle.loads(encode_core(state)[1:])
    old_edges = (dict(state.followers), state.active, dict(state.dead_at))  # format 3: no hide edges
    old = decode_parts(bytes((3,)) + pickle.dumps(core, protocol=5), bytes((3,)) + pickle.dumps(old_edges, protocol=5))
    assert old == state and dict(old.hides) == {}
