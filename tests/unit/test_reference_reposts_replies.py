"""The batch reference's reposts and replies: each rule of docs/reposts-and-replies.md on a small history.

The reference is the view's definition in code, so these are worked examples of the definition,
not tests of an implementation: every later layer (engine, stream, backfill, reads) is compared
with it.
"""

from __future__ import annotations

import itertools
import random

from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    RepostChange,
    TweetDelete,
    TweetUpsert,
)
from feed_service.core.reference import (
    exact_timelines,
    has_removals,
    reference_entries,
    reference_tables,
    reference_timelines,
    reference_user_timelines,
)


def tweet(tid: str, author: str, at: int, *, version: int = 1, text: str = "x",
          parent: tuple[str, str] | None = None) -> TweetUpsert:
    return TweetUpsert(tid, author, version, at, text, 1, *(parent or (None, None)))


def follow(reader: str, followee: str, version: int = 1, op: str = "follow") -> FollowChange:
    return FollowChange(reader, followee, version, op)  # type: ignore[arg-type]


def repost(reposter: str, tid: str, author: str, at: int, version: int = 1) -> RepostChange:
    return RepostChange(reposter, tid, author, version, "repost", at, 1)


def unrepost(reposter: str, tid: str, author: str, version: int = 2) -> RepostChange:
    return RepostChange(reposter, tid, author, version, "unrepost")


def timeline(events: list[Event], reader: str) -> list[tuple[str, int, str | None]]:
    """(tweet_id, where it sits, reposted_by) of the reader's entries, newest first."""
    entries = reference_entries(reference_tables(events), inbox_cap=None).get(reader, [])
    return [(e.tweet_id, e.at, e.reposted_by) for e in entries]


def test_a_repost_brings_a_tweet_of_someone_the_reader_does_not_follow_at_the_repost_time() -> None:
    events = [follow("ann", "pat"), tweet("t1", "bob", 10), repost("pat", "t1", "bob", 50)]
    assert timeline(events, "ann") == [("t1", 50, "pat")]
    [entry] = reference_entries(reference_tables(events))["ann"]
    assert (entry.created_at, entry.reposted_at, entry.reposter_profile_version) == (10, 50, 1)


def test_a_followed_authors_tweet_stays_direct_whoever_reposts_it() -> None:
    events = [follow("ann", "pat"), follow("ann", "bob"), tweet("t1", "bob", 10), repost("pat", "t1", "bob", 50)]
    assert timeline(events, "ann") == [("t1", 10, None)]


def test_the_earliest_reposter_wins_and_a_tie_goes_to_the_smaller_id() -> None:
    base = [follow("ann", "pat"), follow("ann", "zoe"), tweet("t1", "bob", 10)]
    assert timeline(base + [repost("zoe", "t1", "bob", 40), repost("pat", "t1", "bob", 60)], "ann") == [
        ("t1", 40, "zoe")]
    assert timeline(base + [repost("zoe", "t1", "bob", 40), repost("pat", "t1", "bob", 40)], "ann") == [
        ("t1", 40, "pat")]


def test_an_unrepost_falls_back_to_the_next_reposter_or_removes_the_entry() -> None:
    events = [follow("ann", "pat"), follow("ann", "zoe"), tweet("t1", "bob", 10),
              repost("zoe", "t1", "bob", 40), repost("pat", "t1", "bob", 60)]
    assert timeline(events + [unrepost("zoe", "t1", "bob")], "ann") == [("t1", 60, "pat")]
    assert timeline(events + [unrepost("zoe", "t1", "bob"), unrepost("pat", "t1", "bob")], "ann") == []


def test_repost_versions_highest_wins_and_unrepost_wins_a_tie() -> None:
    base = [follow("ann", "pat"), tweet("t1", "bob", 10)]
    assert timeline(base + [repost("pat", "t1", "bob", 40, version=3), unrepost("pat", "t1", "bob", 2)], "ann") == [
        ("t1", 40, "pat")]
    assert timeline(base + [repost("pat", "t1", "bob", 40, version=2), unrepost("pat", "t1", "bob", 2)], "ann") == []
    # two reposts at one version: the payload decides, whatever the order
    a, b = repost("pat", "t1", "bob", 40, version=2), repost("pat", "t1", "bob", 70, version=2)
    assert timeline(base + [a, b], "ann") == timeline(base + [b, a], "ann") == [("t1", 70, "pat")]


def test_a_repost_joins_only_the_tweet_of_the_author_it_names() -> None:
    events = [follow("ann", "pat"), tweet("t1", "bob", 10), repost("pat", "t1", "cat", 50)]
    assert timeline(events, "ann") == []


def test_edits_update_every_entry_and_a_delete_removes_them_all() -> None:
    events = [follow("ann", "pat"), follow("cat", "bob"), tweet("t1", "bob", 10), repost("pat", "t1", "bob", 50),
              tweet("t1", "bob", 10, version=2, text="edited")]
    tables = reference_tables(events)
    assert [e.text for e in reference_entries(tables)["ann"] + reference_entries(tables)["cat"]] == ["edited"] * 2
    assert reference_entries(reference_tables(events + [TweetDelete("t1", "bob", 0)])) == {}


def test_a_reply_shows_only_if_the_reader_sees_the_parents_author_too() -> None:
    reply = tweet("r1", "bob", 20, parent=("t0", "cat"))
    events = [follow("ann", "bob"), reply]
    assert timeline(events, "ann") == []
    assert timeline(events + [follow("ann", "cat")], "ann") == [("r1", 20, None)]  # a later follow brings it in
    assert timeline(events + [follow("ann", "cat"), MuteChange("ann", "cat", 1, "mute")], "ann") == []


def test_self_replies_and_replies_to_the_reader_always_show() -> None:
    events = [follow("ann", "bob"), tweet("r1", "bob", 20, parent=("t0", "bob")),
              tweet("r2", "bob", 30, parent=("t9", "ann"))]
    assert timeline(events, "ann") == [("r2", 30, None), ("r1", 20, None)]
    entries = reference_timelines(events)["ann"]
    assert entries[0]["in_reply_to_tweet_id"] == "t9" and entries[0]["in_reply_to_author_id"] == "ann"


def test_the_reply_rule_does_not_apply_to_reposts_and_a_filtered_reply_can_come_by_repost() -> None:
    reply = tweet("r1", "bob", 20, parent=("t0", "cat"))
    events = [follow("ann", "bob"), follow("ann", "pat"), reply, repost("pat", "r1", "bob", 70)]
    assert timeline(events, "ann") == [("r1", 70, "pat")]  # not direct (ann does not see cat): the repost shows it
    assert timeline(events + [follow("ann", "cat")], "ann") == [("r1", 20, None)]  # now direct: at its own time


def test_an_edit_that_changes_the_parent_changes_the_rule() -> None:
    events = [follow("ann", "bob"), tweet("r1", "bob", 20, parent=("t0", "cat"))]
    assert timeline(events + [tweet("r1", "bob", 20, version=2)], "ann") == [("r1", 20, None)]
    tied = [tweet("r1", "bob", 20, version=1), tweet("r1", "bob", 20, version=1, parent=("t0", "cat"))]
    assert timeline(events[:1] + tied, "ann") == timeline(events[:1] + tied[::-1], "ann")  # a tie: the digest decides


def test_blocking_or_muting_a_reposter_or_the_original_author_removes_what_they_brought() -> None:
    events = [follow("ann", "pat"), tweet("t1", "bob", 10), repost("pat", "t1", "bob", 50)]
    for hide in (MuteChange("ann", "pat", 1, "mute"), BlockChange("ann", "pat", 1, "block"),
                 BlockChange("pat", "ann", 1, "block"), MuteChange("ann", "bob", 1, "mute"),
                 BlockChange("bob", "ann", 1, "block")):
        assert timeline(events + [hide], "ann") == [], hide


def test_a_reader_sees_their_own_tweet_reposted_by_a_followee() -> None:
    events = [follow("ann", "pat"), tweet("t1", "ann", 10), repost("pat", "t1", "ann", 50)]
    assert timeline(events, "ann") == [("t1", 50, "pat")]


def test_one_entry_per_tweet_ordered_by_where_it_sits_and_capped() -> None:
    events = [follow("ann", "pat"), follow("ann", "bob"), tweet("t1", "bob", 10), tweet("t2", "cat", 5),
              tweet("t3", "bob", 30), repost("pat", "t2", "cat", 20), repost("pat", "t1", "bob", 99)]
    assert timeline(events, "ann") == [("t3", 30, None), ("t2", 20, "pat"), ("t1", 10, None)]
    capped = reference_entries(reference_tables(events), inbox_cap=2)["ann"]
    assert [e.tweet_id for e in capped] == ["t3", "t2"]


def test_a_users_own_timeline_holds_their_tweets_and_reposts_once_each() -> None:
    events = [tweet("t1", "pat", 10), tweet("t2", "bob", 5), repost("pat", "t2", "bob", 20),
              repost("pat", "t1", "pat", 30), ProfileVersion("pat", 1, "Pat")]
    own = reference_user_timelines(reference_tables(events))["pat"]
    assert [(e.tweet_id, e.at, e.reposted_by) for e in own] == [("t2", 20, "pat"), ("t1", 10, None)]


def test_the_view_does_not_depend_on_the_order_of_the_changes() -> None:
    events: list[Event] = [
        follow("ann", "pat"), follow("ann", "zoe"), follow("ann", "bob"), tweet("t1", "bob", 10),
        tweet("r1", "bob", 20, parent=("t1", "cat")), tweet("t2", "cat", 15), repost("zoe", "t2", "cat", 40),
        repost("pat", "t2", "cat", 35), unrepost("pat", "t2", "cat"), repost("pat", "r1", "bob", 60),
        follow("ann", "bob", 2, "unfollow"), follow("ann", "cat"), MuteChange("ann", "zoe", 1, "mute"),
    ]
    expected = reference_timelines(events)
    rnd = random.Random(7)
    for _ in range(50):
        shuffled = events + rnd.sample(events, 4)  # with duplicates
        rnd.shuffle(shuffled)
        assert reference_timelines(shuffled) == expected


def test_removals_now_include_unreposts_moved_reposts_new_parents_and_follows_beside_reposts() -> None:
    base = [follow("ann", "pat"), tweet("t1", "bob", 10)]
    assert not has_removals(base)
    assert has_removals(base + [unrepost("pat", "t1", "bob")])
    assert has_removals([repost("pat", "t1", "bob", 5), repost("pat", "t1", "bob", 9, version=2)])
    assert has_removals(base + [tweet("t1", "bob", 10, version=2, parent=("t0", "cat"))])
    assert has_removals(base + [repost("pat", "t1", "bob", 50)])  # a repost and a follow
    assert not has_removals([tweet("t1", "bob", 10), repost("pat", "t1", "bob", 50)])
    history = base + [repost("pat", "t1", "bob", 50), follow("ann", "bob")]
    assert exact_timelines(history, inbox_cap=3, trim_slack=0) == {"ann"}
    assert exact_timelines(history, inbox_cap=1, trim_slack=0) == set()


def test_every_entry_field_of_the_public_shape() -> None:
    events = [follow("ann", "pat"), tweet("r1", "bob", 10, parent=("t0", "bob")), repost("pat", "r1", "bob", 50),
              ProfileVersion("bob", 1, "Bob")]
    assert reference_timelines(events)["ann"] == [{
        "tweet_id": "r1", "author_id": "bob", "version": 1, "text": "x", "author_display_name": "Bob",
        "in_reply_to_tweet_id": "t0", "in_reply_to_author_id": "bob", "reposted_by": "pat", "reposted_at": 50}]


def test_follows_of_reposters_and_authors_in_any_combination_keep_one_entry() -> None:
    kinds = [follow("ann", "bob"), follow("ann", "pat"), follow("ann", "zoe")]
    reposts = [tweet("t1", "bob", 10), repost("pat", "t1", "bob", 30), repost("zoe", "t1", "bob", 20)]
    for n in range(4):
        for chosen in itertools.combinations(kinds, n):
            entries = timeline(list(chosen) + reposts, "ann")
            assert len(entries) <= 1
            followed = {f.followee_id for f in chosen}
            if "bob" in followed:
                assert entries == [("t1", 10, None)]
            elif followed:
                assert entries == [("t1", 20, "zoe")] if "zoe" in followed else [("t1", 30, "pat")]
