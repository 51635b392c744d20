"""Property tests: the three steps (author, reposter, reader) against the batch reference, with
reposts and replies (docs/reposts-and-replies.md).

Histories over a few users mix tweets that are replies (to their author, to a reader, to a third
user), edits that change a reply's parent, deletes, reposts and unreposts (ties, wrong authors,
one's own tweet), follows and unfollows of reposters, original authors and parent authors, blocks
and mutes; they are shuffled, padded with duplicates and garbage of the new shapes, and cut into
random micro-batches (:mod:`tests.support.repost_runs`). Small pull thresholds make authors cross
between push and pull.
"""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from feed_service.core.events import FollowChange, MuteChange, RepostChange, TweetDelete, TweetUpsert
from feed_service.core.reference import reference_entries, reference_tables, reference_timelines, reference_user_timelines
from feed_service.core.view import Materializer
from tests.support.repost_runs import SETTINGS, USERS, Run, runs


def materialize(run: Run, *, inbox_cap: int, pull_threshold: int, encode_states: bool,
                pull_reposters: bool = False, trim_slack: int | None = None) -> Materializer:
    engine = Materializer(inbox_cap=inbox_cap, pull_threshold=pull_threshold, encode_states=encode_states,
                          pull_reposters=pull_reposters, trim_slack=trim_slack)
    for batch in run.batches:
        engine.process_batch(batch)
    return engine


@SETTINGS
@given(run=runs(), pull_threshold=st.sampled_from([1, 2, 1000]), encode_states=st.booleans())
def test_the_three_steps_equal_the_reference_below_the_cap(run: Run, pull_threshold: int, encode_states: bool) -> None:
    engine = materialize(run, inbox_cap=100, pull_threshold=pull_threshold, encode_states=encode_states)
    assert engine.view.snapshot() == reference_timelines(run.history, inbox_cap=100)
    assert engine.rejected == run.garbage


@SETTINGS
@given(run=runs(), pull_threshold=st.sampled_from([1, 2, 3]), encode_states=st.booleans())
def test_pull_reposters_merged_at_read_equal_the_reference(run: Run, pull_threshold: int, encode_states: bool) -> None:
    # Thresholds of 1-3 readers make reposters cross between push and pull as readers come and go:
    # the reposts a pull reposter fans out to nobody are decided at read with the pushed ones.
    engine = materialize(run, inbox_cap=100, pull_threshold=pull_threshold, encode_states=encode_states,
                         pull_reposters=True)
    assert engine.view.snapshot() == reference_timelines(run.history, inbox_cap=100)


@SETTINGS
@given(run=runs(growing=True), inbox_cap=st.integers(1, 2), pull_threshold=st.sampled_from([1, 1000]))
def test_at_the_cap_without_removals_the_three_steps_equal_the_reference(run: Run, inbox_cap: int,
                                                                         pull_threshold: int) -> None:
    # Replies to several users per author make the classes of the author step's retention matter:
    # a run of replies a reader does not see must not push an older plain tweet out of its timeline.
    engine = materialize(run, inbox_cap=inbox_cap, pull_threshold=pull_threshold, encode_states=False,
                         pull_reposters=pull_threshold == 1)
    assert engine.view.snapshot() == reference_timelines(run.history, inbox_cap=inbox_cap)


@SETTINGS
@given(run=runs(), inbox_cap=st.integers(1, 3), trim_slack=st.integers(0, 2),
       pull_threshold=st.sampled_from([1, 2, 1000]), encode_states=st.booleans())
def test_trimmed_inboxes_refilled_after_removals_read_as_untrimmed_ones(
        run: Run, inbox_cap: int, trim_slack: int, pull_threshold: int, encode_states: bool) -> None:
    # Unreposts, edits changing a reply's parent, unfollows of parents' authors, blocks and mutes
    # take rows out of trimmed inboxes; the refill from the author timelines keeps every read exact.
    def run_with(slack: int | None) -> Materializer:
        return materialize(run, inbox_cap=inbox_cap, pull_threshold=pull_threshold, encode_states=encode_states,
                           pull_reposters=pull_threshold < 1000, trim_slack=slack)

    assert run_with(trim_slack).view.snapshot() == run_with(None).view.snapshot()


@SETTINGS
@given(run=runs())
def test_user_timelines_hold_own_tweets_and_reposts(run: Run) -> None:
    engine = materialize(run, inbox_cap=100, pull_threshold=1000, encode_states=False)
    expected = reference_user_timelines(reference_tables(run.history), inbox_cap=100)
    for user in USERS:
        assert engine.view.author_entries(user) == expected.get(user, [])


@SETTINGS
@given(run=runs(), split=st.randoms(use_true_random=False))
def test_replaying_and_rebatching_give_the_same_view(run: Run, split: random.Random) -> None:
    engine = materialize(run, inbox_cap=100, pull_threshold=1000, encode_states=False)
    lines = [line for batch in run.batches for line in batch]
    split.shuffle(lines)
    again = Materializer(inbox_cap=100)
    again.process_batch(lines)
    assert again.view.snapshot() == engine.view.snapshot()
    before = engine.view.snapshot()
    for batch in run.batches:  # a replay of everything changes nothing
        engine.process_batch(batch)
    assert engine.view.snapshot() == before


def test_a_reply_to_an_unseen_parent_comes_in_when_the_parent_is_followed_in_a_later_batch() -> None:
    engine = Materializer(inbox_cap=100)
    engine.process_batch([FollowChange("ann", "bob", 1, "follow"), TweetUpsert("r1", "bob", 1, 5, "x", 1, "t0", "cat")])
    assert engine.view.entries("ann") == []
    engine.process_batch([FollowChange("ann", "cat", 1, "follow")])
    assert [e.tweet_id for e in engine.view.entries("ann")] == ["r1"]
    engine.process_batch([MuteChange("ann", "cat", 1, "mute")])
    assert engine.view.entries("ann") == []


def test_a_repost_entry_moves_and_goes_as_reposters_and_authors_are_followed() -> None:
    engine = Materializer(inbox_cap=100)
    engine.process_batch([FollowChange("ann", "pat", 1, "follow"), TweetUpsert("t1", "bob", 1, 5, "x", 1),
                          RepostChange("pat", "t1", "bob", 1, "repost", 50, 1)])
    assert [(e.tweet_id, e.at, e.reposted_by) for e in engine.view.entries("ann")] == [("t1", 50, "pat")]
    engine.process_batch([FollowChange("ann", "zoe", 1, "follow"), RepostChange("zoe", "t1", "bob", 1, "repost", 20, 1)])
    assert [(e.at, e.reposted_by) for e in engine.view.entries("ann")] == [(20, "zoe")]
    engine.process_batch([FollowChange("ann", "bob", 1, "follow")])
    assert [(e.at, e.reposted_by) for e in engine.view.entries("ann")] == [(5, None)]
    engine.process_batch([TweetUpsert("t1", "bob", 2, 5, "edited", 1), FollowChange("ann", "bob", 2, "unfollow")])
    assert [(e.at, e.reposted_by, e.text) for e in engine.view.entries("ann")] == [(20, "zoe", "edited")]
    engine.process_batch([TweetDelete("t1", "bob", 3)])
    assert engine.view.entries("ann") == [] and engine.view.extras == {}
    assert reference_entries(reference_tables([])) == {}


def test_a_pull_reposters_earlier_repost_wins_over_a_pushed_one_until_it_is_withdrawn() -> None:
    engine = Materializer(inbox_cap=100, pull_threshold=2, pull_reposters=True)
    engine.process_batch([FollowChange("ann", "pat", 1, "follow"), FollowChange("bea", "pat", 1, "follow"),
                          FollowChange("ann", "zoe", 1, "follow"), TweetUpsert("t1", "cat", 1, 5, "x", 1),
                          RepostChange("zoe", "t1", "cat", 1, "repost", 50, 1),
                          RepostChange("pat", "t1", "cat", 1, "repost", 20, 1)])
    assert engine.view.pull_reposters == {"ann": {"pat"}, "bea": {"pat"}}  # pat is seen by 2: pull
    assert [(e.at, e.reposted_by) for e in engine.view.extras["ann"].values()] == [(50, "zoe")]  # pushed
    assert [(e.tweet_id, e.at, e.reposted_by) for e in engine.view.entries("ann")] == [("t1", 20, "pat")]
    engine.process_batch([RepostChange("pat", "t1", "cat", 2, "unrepost")])
    assert [(e.at, e.reposted_by) for e in engine.view.entries("ann")] == [(50, "zoe")]
    engine.process_batch([RepostChange("pat", "t1", "cat", 3, "repost", 10, 1),
                          FollowChange("bea", "pat", 2, "unfollow")])  # pat falls back to push
    assert engine.view.pull_reposters == {}
    assert [(e.at, e.reposted_by) for e in engine.view.entries("ann")] == [(10, "pat")]
    engine.process_batch([FollowChange("ann", "cat", 1, "follow")])  # direct now: at its own time
    assert [(e.at, e.reposted_by) for e in engine.view.entries("ann")] == [(5, None)]
