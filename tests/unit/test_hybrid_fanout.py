"""Hybrid fan-out in the engine: authors at or above the pull threshold are merged in at read time.

Examples of each transition, and the property that a pull author's new tweet costs nothing that
grows with its follower count. The random-history equivalence with the batch reference, with
thresholds small enough for authors to cross back and forth, is in test_join_properties.py.
"""

from __future__ import annotations

import pytest

from feed_service.core.events import Exclusion, FollowChange, ListFollow, TweetDelete, TweetUpsert
from feed_service.core.list_readers import list_reader
from feed_service.core.join import needs_edges, step
from feed_service.core.state import decode_parts, encode_state
from feed_service.core.stored_step import step_stored, stored_parts
from feed_service.core.view import Materializer


def follow(follower: str, version: int = 1, op: str = "follow") -> FollowChange:
    return FollowChange(follower, "star", version, op)  # type: ignore[arg-type]


def tweet(tid: str, created_at: int, version: int = 1, text: str = "hi") -> TweetUpsert:
    return TweetUpsert(tid, "star", version, created_at, text, 1)


def summary(result) -> dict:
    return {
        "inbox": [(d.op, d.entry.tweet_id, d.timeline_ids) for d in result.deltas],
        "author": [(d.op, d.entry.tweet_id) for d in result.author_timeline],
        "pull": [(d.op, d.follower_ids) for d in result.pull_follows],
    }


def test_crossing_up_retracts_inboxes_and_crossing_down_pushes_again() -> None:
    r1 = step(None, [follow("a"), tweet("t1", 10)], pull_threshold=2)
    assert summary(r1) == {"inbox": [("insert", "t1", ("a",))], "author": [("insert", "t1")], "pull": []}
    assert not r1.state.pull
    r2 = step(r1.state, [follow("b"), tweet("t2", 20)], pull_threshold=2)  # two followers: pull
    assert r2.state.pull
    assert summary(r2) == {"inbox": [("delete", "t1", ("a",))], "author": [("insert", "t2")],
                           "pull": [("insert", ("a", "b"))]}
    r3 = step(r2.state, [tweet("t3", 30)], pull_threshold=2)  # a pull author's tweet reaches no inbox
    assert summary(r3) == {"inbox": [], "author": [("insert", "t3")], "pull": []}
    r4 = step(r3.state, [follow("b", 2, "unfollow")], pull_threshold=2)  # back below: push again
    assert not r4.state.pull
    assert summary(r4) == {"inbox": [("insert", "t3", ("a",)), ("insert", "t2", ("a",)), ("insert", "t1", ("a",))],
                           "author": [], "pull": [("delete", ("a", "b"))]}


def test_follow_and_unfollow_of_a_pull_author_change_only_the_pull_follows() -> None:
    r1 = step(None, [follow("a"), follow("b"), tweet("t1", 10)], pull_threshold=2)
    assert summary(r1) == {"inbox": [], "author": [("insert", "t1")], "pull": [("insert", ("a", "b"))]}
    r2 = step(r1.state, [follow("c"), follow("a", 2, "unfollow")], pull_threshold=2)
    assert summary(r2) == {"inbox": [], "author": [], "pull": [("delete", ("a",)), ("insert", ("c",))]}


def test_a_changed_threshold_moves_a_key_over_at_its_next_batch() -> None:
    r1 = step(None, [follow("a"), follow("b"), tweet("t1", 10)], pull_threshold=5)
    assert not r1.state.pull
    r2 = step(r1.state, [TweetDelete("t0", "star", 1)], pull_threshold=2)
    assert r2.state.pull and ("delete", "t1", ("a", "b")) in summary(r2)["inbox"]


def test_a_pull_authors_tweet_does_not_read_or_write_its_followers() -> None:
    followers = [follow(f"f{i}") for i in range(5000)]
    state = step(None, followers, pull_threshold=100).state
    assert state.pull
    core, edges = stored_parts(encode_state(state))
    assert edges is not None and len(edges) > 20 * len(core)  # the follower set is stored apart

    def load_edges() -> bytes:
        raise AssertionError("a pull author's tweet must not load the follower set")

    done = step_stored(core, load_edges, [tweet("t1", 10)], pull_threshold=100)
    assert summary(done.result) == {"inbox": [], "author": [("insert", "t1")], "pull": []}
    assert done.core is not None and done.edges is None  # only the small part is written back
    assert not needs_edges(decode_parts(core, None), [tweet("t2", 20)], pull_threshold=100)
    assert needs_edges(decode_parts(core, None), [follow("new")], pull_threshold=100)


@pytest.mark.parametrize("change", [ListFollow(list_reader("L"), "star", "f1", "L", 1, "follow"),
                                    Exclusion("f1", "star", 1, "exclude")], ids=["list_follow", "exclusion"])
def test_a_list_follow_or_an_exclusion_alone_loads_a_keys_edges_stored_apart(change) -> None:
    """A list's follow is a follow and an exclusion a hide edge (docs/lists.md#in-the-engine): a batch
    of one of them alone reads the follower set stored apart, and steps as the whole state does."""
    state = step(None, [follow(f"f{i}") for i in range(5000)] + [tweet("t1", 10)], pull_threshold=100_000).state
    core, edges = stored_parts(encode_state(state))
    assert edges is not None
    loads = []

    def load_edges() -> bytes:
        loads.append(1)
        return edges

    assert needs_edges(decode_parts(core, None), [change], pull_threshold=100_000)
    done = step_stored(core, load_edges, [change], pull_threshold=100_000)
    assert loads == [1]
    assert summary(done.result) == summary(step(state, [change], pull_threshold=100_000))


def test_materialize_reads_merge_inbox_and_pull_authors() -> None:
    engine = Materializer(pull_threshold=2, encode_states=True)
    engine.process_batch([
        FollowChange("ann", "star", 1, "follow"), FollowChange("bob", "star", 1, "follow"),
        FollowChange("ann", "joe", 1, "follow"),
        TweetUpsert("s1", "star", 1, 10, "from star", 1), TweetUpsert("j1", "joe", 1, 20, "from joe", 1),
    ])
    assert [e.tweet_id for e in engine.view.entries("ann")] == ["j1", "s1"]
    assert engine.view.timelines["ann"].keys() == {(20, "j1", "joe")}  # star is merged in at read time
    assert engine.view.pull_follows == {"ann": {"star"}, "bob": {"star"}}
    assert [e.tweet_id for e in engine.view.author_entries("star")] == ["s1"]
