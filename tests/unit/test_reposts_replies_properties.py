"""Property tests: the three steps (author, reposter, reader) against the batch reference, with
reposts and replies (docs/reposts-and-replies.md).

Histories over a few users mix tweets that are replies (to their author, to a reader, to a third
user), edits that change a reply's parent, deletes, reposts and unreposts (ties, wrong authors,
one's own tweet), follows and unfollows of reposters, original authors and parent authors, blocks
and mutes; they are shuffled, padded with duplicates and garbage of the new shapes, and cut into
random micro-batches. Small pull thresholds make authors cross between push and pull.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    RepostChange,
    TweetDelete,
    TweetUpsert,
    event_to_json,
)
from feed_service.core.reference import reference_entries, reference_tables, reference_timelines, reference_user_timelines
from feed_service.core.view import Materializer

USERS = ["u0", "u1", "u2", "u3", "u4"]
AUTHORS = USERS[:3]
TWEET_IDS = ["t0", "t1", "t2"]

GARBAGE = [
    '{"type": "repost", "op": "repost", "reposter_id": "u1", "tweet_id": "t0", "author_id": "u0", "version": 1}',
    '{"type": "repost", "op": "boost", "reposter_id": "u1", "tweet_id": "t0", "author_id": "u0", "version": 1}',
    '{"type": "repost", "op": "unrepost", "reposter_id": "", "tweet_id": "t0", "author_id": "u0", "version": 1}',
    '{"type": "tweet", "op": "upsert", "tweet_id": "t0", "author_id": "u0", "version": 1, "created_at": 1, '
    '"text": "x", "profile_version": 0, "in_reply_to_tweet_id": "t1"}',
    '{"type": "tweet", "op": "upsert", "tweet_id": "t0", "author_id": "u0", "version": 1, "created_at": 1, '
    '"text": "x", "profile_version": 0, "in_reply_to_tweet_id": "t1", "in_reply_to_author_id": ""}',
    "not json",
]

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_event(rnd: random.Random) -> Event:
    kind = rnd.choice(["upsert"] * 4 + ["repost"] * 3 + ["follow"] * 4 + ["delete", "block", "mute", "profile"])
    version = rnd.randint(0, 2)
    if kind == "upsert":
        author, tid = rnd.choice(AUTHORS), rnd.choice(TWEET_IDS)
        created = (USERS.index(author) * 7 + TWEET_IDS.index(tid) * 3) % 11
        if rnd.random() < 0.15:
            created = rnd.randint(0, 10)
        parent: tuple[str | None, str | None] = (None, None)
        if rnd.random() < 0.5:  # a reply: to its own author, a reader, or anyone
            parent = (rnd.choice(TWEET_IDS), rnd.choice(USERS))
        return TweetUpsert(tid, author, version, created, rnd.choice(["a", "b"]), rnd.randint(0, 1), *parent)
    if kind == "repost":
        reposter = rnd.choice(USERS)
        tid, author = rnd.choice(TWEET_IDS), rnd.choice(AUTHORS)
        if rnd.random() < 0.7:
            return RepostChange(reposter, tid, author, version, "repost", rnd.randint(0, 14), rnd.randint(0, 1))
        return RepostChange(reposter, tid, author, version, "unrepost")
    if kind == "delete":
        return TweetDelete(rnd.choice(TWEET_IDS), rnd.choice(AUTHORS), version)
    if kind == "follow":
        follower, followee = rnd.sample(USERS, 2)
        return FollowChange(follower, followee, version, rnd.choice(["follow", "follow", "unfollow"]))
    if kind == "block":
        blocker, blocked = rnd.sample(USERS, 2)
        return BlockChange(blocker, blocked, version, rnd.choice(["block", "unblock"]))
    if kind == "mute":
        muter, muted = rnd.sample(USERS, 2)
        return MuteChange(muter, muted, version, rnd.choice(["mute", "unmute"]))
    return ProfileVersion(rnd.choice(USERS), rnd.randint(0, 1), rnd.choice(["A", "B"]))


def growing_event(rnd: random.Random) -> Event:
    """An event of a history where nothing leaves a timeline but by being pushed down: no tweet
    delete, block or mute, and each tweet keeps one created_at and one parent in every version (an
    author's tweet pushed out of its class's newest ``inbox_cap`` never comes back, as before)."""
    while True:
        event = random_event(rnd)
        if type(event) in (TweetDelete, BlockChange, MuteChange):
            continue
        if type(event) is TweetUpsert:
            a, t = USERS.index(event.author_id), TWEET_IDS.index(event.tweet_id)
            parent = (None, None) if (a + t) % 3 == 0 else ("t0", USERS[(a + t) % len(USERS)])
            event = TweetUpsert(event.tweet_id, event.author_id, event.version, (a * 7 + t * 3) % 11, event.text,
                                event.profile_version, *parent)
        return event


@dataclass
class Run:
    history: list[Event]
    batches: list[list[str]]
    garbage: int


@st.composite
def runs(draw: st.DrawFn, *, growing: bool = False) -> Run:
    rnd = draw(st.randoms(use_true_random=False))
    history = [(growing_event if growing else random_event)(rnd) for _ in range(draw(st.integers(0, 90)))]
    lines = [json.dumps(event_to_json(e)) for e in history]
    lines += [rnd.choice(lines) for _ in range(rnd.randint(0, len(lines) // 3))] if lines else []
    garbage = [rnd.choice(GARBAGE) for _ in range(rnd.randint(0, 3))]
    lines += garbage
    rnd.shuffle(lines)
    batches, i = [], 0
    while i < len(lines):
        n = rnd.randint(1, 15)
        batches.append(lines[i:i + n])
        i += n
    return Run(history, batches, len(garbage))


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
