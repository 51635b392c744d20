"""The batch reference's lists: each rule of docs/lists.md on a small history.

The reference is the view's definition in code, so these are worked examples of the definition
(a list's timeline, exclusive lists in the owner's home timeline, the version rules of lists and
memberships), not tests of an implementation: the lists' engine will be compared with it.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings

from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    InvalidEvent,
    ListChange,
    ListMemberChange,
    MuteChange,
    RepostChange,
    TweetDelete,
    TweetUpsert,
    event_to_json,
    parse_event,
)
from feed_service.core.reference import (
    exact_lists,
    exact_timelines,
    has_removals,
    reference_entries,
    reference_list_entries,
    reference_lists,
    reference_tables,
    reference_timelines,
)
from tests.support.list_runs import LIST_GARBAGE, list_history, list_runs
from tests.support.repost_runs import Run
from tests.support.sizes import examples


def tweet(tid: str, author: str, at: int, *, version: int = 1, parent: str | None = None) -> TweetUpsert:
    """A tweet of ``author`` at ``at``; ``parent``: the author it replies to (parent tweet ``p``)."""
    return TweetUpsert(tid, author, version, at, "x", 1, *(("p", parent) if parent else (None, None)))


def follow(reader: str, followee: str, version: int = 1, *, show_reposts: bool = True) -> FollowChange:
    return FollowChange(reader, followee, version, "follow", show_reposts)


def repost(reposter: str, tid: str, author: str, at: int, version: int = 1) -> RepostChange:
    return RepostChange(reposter, tid, author, version, "repost", at, 1)


def create(lid: str, owner: str, version: int = 1, *, policy: str = "list", exclusive: bool = False,
           name: str = "n") -> ListChange:
    return ListChange(lid, owner, version, "create", name, policy, exclusive)  # type: ignore[arg-type]


def delete(lid: str, owner: str, version: int = 2) -> ListChange:
    return ListChange(lid, owner, version, "delete")


def add(lid: str, member: str, version: int = 1) -> ListMemberChange:
    return ListMemberChange(lid, member, version, "add")


def remove(lid: str, member: str, version: int = 2) -> ListMemberChange:
    return ListMemberChange(lid, member, version, "remove")


Row = tuple[str, int, str | None]


def in_list(events: list[Event], lid: str) -> list[Row] | None:
    """(tweet_id, where it sits, reposted_by) of the list's entries, newest first; None: no such list."""
    lists = reference_list_entries(reference_tables(events), inbox_cap=None)
    if lid not in lists:
        return None
    return [(e.tweet_id, e.at, e.reposted_by) for e in lists[lid]]


def home(events: list[Event], reader: str) -> list[Row]:
    entries = reference_entries(reference_tables(events), inbox_cap=None).get(reader, [])
    return [(e.tweet_id, e.at, e.reposted_by) for e in entries]


# -- members ---------------------------------------------------------------------------------------


def test_a_list_holds_its_members_tweets_whoever_the_owner_follows() -> None:
    events = [create("L", "own"), add("L", "bob"), tweet("t1", "bob", 10), tweet("t2", "cat", 20)]
    assert in_list(events, "L") == [("t1", 10, None)]
    assert home(events, "own") == []


def test_a_member_added_later_brings_its_older_tweets_retroactively() -> None:
    events = [create("L", "own"), tweet("t1", "bob", 10), tweet("t2", "bob", 20)]
    assert in_list(events, "L") == []
    assert in_list(events + [add("L", "bob", version=3)], "L") == [("t2", 20, None), ("t1", 10, None)]


def test_removing_a_member_takes_all_its_entries_out_and_adding_again_brings_them_back() -> None:
    events = [create("L", "own"), add("L", "bob"), add("L", "cat"), tweet("t1", "bob", 10), tweet("t2", "cat", 20)]
    assert in_list(events + [remove("L", "bob")], "L") == [("t2", 20, None)]
    assert in_list(events + [remove("L", "bob"), add("L", "bob", 3)], "L") == [("t2", 20, None), ("t1", 10, None)]


def test_the_owner_may_be_a_member_of_its_own_list_and_then_its_tweets_show() -> None:
    events = [create("L", "own"), add("L", "own"), tweet("t1", "own", 10)]
    assert in_list(events, "L") == [("t1", 10, None)]


def test_a_membership_of_a_list_never_created_joins_nothing_and_an_empty_list_is_present() -> None:
    events = [add("Lx", "bob"), tweet("t1", "bob", 10), create("L", "own")]
    assert in_list(events, "Lx") is None
    assert in_list(events, "L") == []
    assert reference_lists(events) == {"L": []}


def test_a_membership_made_before_the_list_is_created_counts_once_it_exists() -> None:
    events = [add("L", "bob"), tweet("t1", "bob", 10)]
    assert in_list(events + [create("L", "own", 5)], "L") == [("t1", 10, None)]


# -- the list's own versions -----------------------------------------------------------------------


def test_a_deleted_list_is_absent_its_exclusivity_undone_and_a_later_create_restores_it() -> None:
    events = [create("L", "own", exclusive=True), add("L", "bob"), follow("own", "bob"), tweet("t1", "bob", 10)]
    assert home(events, "own") == [] and in_list(events, "L") == [("t1", 10, None)]
    deleted = events + [delete("L", "own", 2)]
    assert in_list(deleted, "L") is None
    assert home(deleted, "own") == [("t1", 10, None)]
    assert reference_lists(deleted) == {}
    assert in_list(deleted + [create("L", "own", 3)], "L") == [("t1", 10, None)]


def test_a_delete_wins_a_version_tie_with_a_create_and_the_highest_version_wins() -> None:
    events = [add("L", "bob"), tweet("t1", "bob", 10)]
    assert in_list(events + [create("L", "own", 4), delete("L", "own", 4)], "L") is None
    assert in_list(events + [delete("L", "own", 4), create("L", "own", 4)], "L") is None
    assert in_list(events + [delete("L", "own", 3), create("L", "own", 4)], "L") == [("t1", 10, None)]


def test_of_two_creates_at_one_version_the_greater_name_policy_exclusive_wins() -> None:
    events = [add("L", "bob"), add("L", "cat"), tweet("t1", "bob", 10, parent="cat")]
    # same name: "none" > "list", so the reply to a member does not show
    assert in_list(events + [create("L", "own", 2, policy="none"), create("L", "own", 2, policy="list")], "L") == []
    # the name decides first: ("b", list) > ("a", none)
    assert in_list(events + [create("L", "own", 2, policy="none", name="a"),
                             create("L", "own", 2, policy="list", name="b")], "L") == [("t1", 10, None)]
    # then exclusive: true > false
    plain = [follow("own", "bob"), tweet("t2", "bob", 20)]
    assert home(events + plain + [create("L", "own", 2)], "own") == [("t2", 20, None)]
    tie = [create("L", "own", 2, exclusive=False), create("L", "own", 2, exclusive=True)]
    assert home(events + plain + tie, "own") == []
    assert home(events + plain + tie[::-1], "own") == []


def test_the_winning_changes_owner_is_the_lists_owner() -> None:
    events = [create("L", "ann", 1), add("L", "bob"), tweet("t1", "bob", 10), MuteChange("cat", "bob", 1, "mute")]
    assert in_list(events, "L") == [("t1", 10, None)]
    assert in_list(events + [create("L", "cat", 2)], "L") == []  # cat mutes bob: hidden from the new owner


def test_a_remove_wins_a_version_tie_of_a_membership_and_the_highest_version_wins() -> None:
    events = [create("L", "own"), tweet("t1", "bob", 10)]
    assert in_list(events + [add("L", "bob", 3), remove("L", "bob", 3)], "L") == []
    assert in_list(events + [remove("L", "bob", 3), add("L", "bob", 3)], "L") == []
    assert in_list(events + [remove("L", "bob", 3), add("L", "bob", 4)], "L") == [("t1", 10, None)]


# -- the reply rule per policy ---------------------------------------------------------------------

REPLIES = [tweet("self", "bob", 1, parent="bob"), tweet("to-own", "bob", 2, parent="own"),
           tweet("to-member", "bob", 3, parent="cat"), tweet("to-followed", "bob", 4, parent="dan"),
           tweet("to-stranger", "bob", 5, parent="eve"), tweet("plain", "bob", 6)]
REPLY_BASE = [add("L", "bob"), add("L", "cat"), follow("own", "dan")]


@pytest.mark.parametrize(("policy", "shown"), [
    ("list", ["plain", "to-member", "to-own", "self"]),
    ("followed", ["plain", "to-followed", "to-own", "self"]),
    ("none", ["plain", "to-own", "self"]),
])
def test_each_reply_policy_shows_self_replies_replies_to_the_owner_and_its_own_parents(
        policy: str, shown: list[str]) -> None:
    rows = in_list(REPLY_BASE + REPLIES + [create("L", "own", policy=policy)], "L")
    assert rows is not None and [tid for tid, _, _ in rows] == shown


def test_the_list_policy_skips_a_reply_to_a_member_hidden_from_the_owner() -> None:
    events = REPLY_BASE + REPLIES + [create("L", "own", policy="list"), MuteChange("own", "cat", 1, "mute")]
    rows = in_list(events, "L")
    assert rows is not None and "to-member" not in [tid for tid, _, _ in rows]


def test_the_followed_policy_reads_the_owners_home_visibility() -> None:
    events = REPLY_BASE + REPLIES + [create("L", "own", policy="followed"), BlockChange("dan", "own", 1, "block")]
    rows = in_list(events, "L")
    assert rows is not None and "to-followed" not in [tid for tid, _, _ in rows]


# -- visibility --------------------------------------------------------------------------------------


@pytest.mark.parametrize("hiding", [MuteChange("own", "bob", 1, "mute"), BlockChange("own", "bob", 1, "block"),
                                    BlockChange("bob", "own", 1, "block")],
                         ids=["owner mutes", "owner blocks", "member blocks owner"])
def test_a_member_hidden_from_the_owner_brings_nothing(hiding: Event) -> None:
    events = [create("L", "own"), add("L", "bob"), add("L", "cat"), tweet("t1", "bob", 10), tweet("t2", "zed", 5),
              repost("bob", "t2", "zed", 30), tweet("t3", "cat", 20)]
    assert in_list(events, "L") == [("t2", 30, "bob"), ("t3", 20, None), ("t1", 10, None)]
    assert in_list(events + [hiding], "L") == [("t3", 20, None)]


def test_the_owner_blocked_by_someone_else_keeps_the_other_members() -> None:
    events = [create("L", "own"), add("L", "bob"), tweet("t1", "bob", 10), BlockChange("cat", "own", 1, "block")]
    assert in_list(events, "L") == [("t1", 10, None)]


# -- reposts ------------------------------------------------------------------------------------------


def test_a_members_repost_is_an_entry_at_the_earliest_reposter_among_the_members() -> None:
    events = [create("L", "own"), add("L", "pat"), add("L", "zoe"), tweet("t1", "bob", 10),
              repost("ann", "t1", "bob", 20), repost("zoe", "t1", "bob", 40), repost("pat", "t1", "bob", 60)]
    assert in_list(events, "L") == [("t1", 40, "zoe")]  # ann reposts earlier but is no member
    assert in_list(events + [remove("L", "zoe")], "L") == [("t1", 60, "pat")]


def test_a_tweet_direct_for_the_list_shows_at_its_own_time_whoever_reposts_it() -> None:
    events = [create("L", "own"), add("L", "pat"), add("L", "bob"), tweet("t1", "bob", 10),
              repost("pat", "t1", "bob", 40)]
    assert in_list(events, "L") == [("t1", 10, None)]


def test_a_reply_the_policy_skips_comes_by_a_members_repost() -> None:
    events = [create("L", "own", policy="none"), add("L", "pat"), add("L", "bob"), tweet("t1", "bob", 10, parent="eve"),
              repost("pat", "t1", "bob", 40)]
    assert in_list(events, "L") == [("t1", 40, "pat")]


def test_a_members_repost_of_an_author_hidden_from_the_owner_is_no_entry() -> None:
    events = [create("L", "own"), add("L", "pat"), tweet("t1", "bob", 10), repost("pat", "t1", "bob", 40)]
    assert in_list(events, "L") == [("t1", 40, "pat")]
    assert in_list(events + [MuteChange("own", "bob", 1, "mute")], "L") == []
    assert in_list(events + [BlockChange("bob", "own", 1, "block")], "L") == []


def test_show_reposts_off_on_the_owners_follow_does_not_touch_the_list() -> None:
    events = [create("L", "own"), add("L", "pat"), follow("own", "pat", show_reposts=False), tweet("t1", "bob", 10),
              repost("pat", "t1", "bob", 40)]
    assert in_list(events, "L") == [("t1", 40, "pat")]
    assert home(events, "own") == []


def test_a_deleted_tweet_leaves_the_list() -> None:
    events = [create("L", "own"), add("L", "bob"), add("L", "pat"), tweet("t1", "bob", 10), tweet("t2", "zed", 5),
              repost("pat", "t2", "zed", 30)]
    assert in_list(events + [TweetDelete("t1", "bob", 2), TweetDelete("t2", "zed", 2)], "L") == []


# -- exclusive lists and the owner's home timeline ------------------------------------------------


def test_an_exclusive_lists_members_direct_entries_leave_the_owners_home_only() -> None:
    events = [follow("own", "bob"), follow("own", "cat"), follow("ann", "bob"), tweet("t1", "bob", 10),
              tweet("t2", "cat", 20), add("L", "bob")]
    assert home(events + [create("L", "own")], "own") == [("t2", 20, None), ("t1", 10, None)]
    exclusive = events + [create("L", "own", exclusive=True)]
    assert home(exclusive, "own") == [("t2", 20, None)]
    assert home(exclusive, "ann") == [("t1", 10, None)]
    assert in_list(exclusive, "L") == [("t1", 10, None)]
    assert home(exclusive + [create("L", "own", 2, exclusive=False)], "own") == [("t2", 20, None), ("t1", 10, None)]
    assert home(exclusive + [remove("L", "bob")], "own") == [("t2", 20, None), ("t1", 10, None)]


def test_a_non_members_repost_of_a_members_tweet_stays_in_the_owners_home() -> None:
    events = [follow("own", "bob"), follow("own", "pat"), tweet("t1", "bob", 10), repost("pat", "t1", "bob", 40),
              create("L", "own", exclusive=True), add("L", "bob")]
    assert home(events, "own") == [("t1", 40, "pat")]


def test_a_members_repost_is_set_aside_and_the_next_reposter_takes_the_entry() -> None:
    events = [follow("own", "zoe"), follow("own", "pat"), tweet("t1", "bob", 10), repost("zoe", "t1", "bob", 30),
              repost("pat", "t1", "bob", 40), create("L", "own", exclusive=True)]
    assert home(events, "own") == [("t1", 30, "zoe")]
    assert home(events + [add("L", "zoe")], "own") == [("t1", 40, "pat")]
    assert home(events + [add("L", "zoe"), add("L", "pat")], "own") == []


def test_exclusivity_leaves_the_reply_rule_and_the_authors_visibility_as_they_are() -> None:
    # own sees cat through a follow: a reply of bob to cat stays direct although cat is an exclusive member
    events = [follow("own", "bob"), follow("own", "cat"), tweet("t1", "bob", 10, parent="cat"),
              create("L", "own", exclusive=True), add("L", "cat")]
    assert home(events, "own") == [("t1", 10, None)]
    # a member's tweet still comes by a non-member's repost, the member being no hidden author
    events2 = [follow("own", "pat"), tweet("t2", "cat", 20), repost("pat", "t2", "cat", 50),
               create("L", "own", exclusive=True), add("L", "cat")]
    assert home(events2, "own") == [("t2", 50, "pat")]


def test_someone_elses_exclusive_list_leaves_my_home_as_it_is() -> None:
    events = [follow("own", "bob"), tweet("t1", "bob", 10), create("L", "ann", exclusive=True), add("L", "bob")]
    assert home(events, "own") == [("t1", 10, None)]


# -- the parsed envelopes, removals and order ----------------------------------------------------------


def test_raw_list_envelopes_fold_into_the_tables_and_garbage_is_skipped() -> None:
    history = [create("L", "own", policy="none", exclusive=True), add("L", "bob"), remove("L", "cat"),
               delete("M", "own", 1), tweet("t1", "bob", 10)]
    lines = [json.dumps(event_to_json(e)) for e in history]
    for line in LIST_GARBAGE:
        with pytest.raises(InvalidEvent):
            parse_event(line)
    tables = reference_tables(lines + LIST_GARBAGE)
    assert tables.lists == {"L": history[0], "M": history[3]}
    assert tables.members == {("L", "bob"): (1, True), ("L", "cat"): (2, False)}
    assert reference_lists(lines) == reference_lists(history) == {
        "L": [{"tweet_id": "t1", "author_id": "bob", "version": 1, "text": "x", "author_display_name": None}]}


@pytest.mark.parametrize(("extra", "removes"), [
    ([create("L", "own"), add("L", "bob")], False),
    ([create("L", "own"), create("L", "own", 2, name="renamed")], False),
    ([create("L", "own"), delete("L", "own")], True),
    ([create("L", "own"), remove("L", "bob")], True),
    ([create("L", "own", exclusive=True)], True),
    ([create("L", "own"), create("L", "own", 2, policy="none")], True),
    ([create("L", "own"), create("L", "ann", 2)], True),
    ([create("L", "own"), add("L", "pat"), repost("pat", "t1", "bob", 40)], True),
])
def test_has_removals_counts_the_list_changes_that_can_take_a_row_out(extra: list[Event], removes: bool) -> None:
    assert has_removals([tweet("t1", "bob", 10), *extra]) is removes


def test_an_exclusive_list_makes_a_trimmed_home_timeline_exact_only_within_the_bounds() -> None:
    base = [follow("own", "bob"), follow("own", "cat")] + [tweet(f"t{i}", "bob", i) for i in range(3)]
    assert exact_timelines(base, inbox_cap=2, trim_slack=0) == {"own"}
    assert exact_timelines(base + [create("L", "own", exclusive=True), add("L", "bob")],
                           inbox_cap=2, trim_slack=0) == frozenset()



def test_exact_lists_bound_every_member_ever_added_and_their_reposts() -> None:
    base = ([create("L", "own"), add("L", "bob"), add("L", "cat"), add("Lx", "bob")]
            + [tweet(f"t{i}", "bob", i) for i in range(3)] + [tweet("t9", "cat", 9)])
    assert exact_lists(base, inbox_cap=1, trim_slack=0) == {"L", "Lx"}  # no removals: every list named
    removed = base + [remove("L", "cat")]  # cat's row was in L's inbox: it counts
    assert exact_lists(removed, inbox_cap=3, trim_slack=0) == {"Lx"}  # Lx (never created) holds nothing
    assert exact_lists(removed, inbox_cap=3, trim_slack=1) == {"L", "Lx"}
    assert exact_lists(removed + [repost("cat", "t1", "bob", 20)], inbox_cap=3, trim_slack=1) == {"Lx"}
    assert exact_lists(removed + [tweet("t3", "bob", 3)], inbox_cap=3, trim_slack=9) == frozenset()  # 4 > cap
    # the owner's mute of a member is a removal (the member's rows leave the list): within the bounds only
    muted = base + [MuteChange("own", "cat", 1, "mute")]
    assert exact_lists(muted, inbox_cap=3, trim_slack=0) == {"Lx"}

def _reference(events: list[Event] | list[str]) -> tuple[object, object]:
    return reference_timelines(events, inbox_cap=None), reference_lists(events, inbox_cap=None)


def test_every_order_and_duplicates_of_a_small_history_give_one_reference() -> None:
    history: list[Event] = [
        create("L", "own", 1, exclusive=True), delete("L", "own", 1), create("L", "own", 2, policy="followed"),
        add("L", "bob", 1), remove("L", "bob", 1), add("L", "bob", 2), follow("own", "bob"),
        tweet("t1", "bob", 10, parent="cat"), follow("own", "cat"),
    ]
    expected = _reference(history)
    assert expected[1] == {"L": [{"tweet_id": "t1", "author_id": "bob", "version": 1, "text": "x",
                                  "author_display_name": None, "in_reply_to_tweet_id": "p",
                                  "in_reply_to_author_id": "cat"}]}
    rnd = random.Random(7)
    for perm in itertools.islice(itertools.permutations(history), 0, None, 997):
        assert _reference(list(perm)) == expected
    for _ in range(50):
        shuffled = history + [rnd.choice(history) for _ in range(4)]
        rnd.shuffle(shuffled)
        assert _reference(shuffled) == expected


def test_the_reference_runs_over_random_list_histories_and_ignores_their_order() -> None:
    rnd = random.Random(41)
    lists_seen = 0
    for _ in range(50):
        history = list_history(rnd, rnd.randint(0, 60))
        expected = _reference(history)
        lists_seen += len(expected[1])  # type: ignore[arg-type]
        shuffled = history + [rnd.choice(history) for _ in range(len(history) // 4)] if history else []
        rnd.shuffle(shuffled)
        assert _reference(shuffled) == expected
    assert lists_seen > 0


def test_the_worked_example_of_docs_lists_md() -> None:
    """The table of docs/lists.md ("Worked examples"), row by row."""
    history: list[Event] = [create("L", "own"), add("L", "bob"), add("L", "cat"), follow("own", "dan"),
                            follow("own", "pat")]
    rows: list[tuple[list[Event], list[Row] | None, list[Row]]] = [
        ([tweet("t1", "bob", 10)], [("t1", 10, None)], []),
        ([tweet("t2", "bob", 20, parent="cat"), tweet("t3", "bob", 30, parent="dan")],
         [("t2", 20, None), ("t1", 10, None)], []),
        ([tweet("t4", "zed", 5), repost("cat", "t4", "zed", 40), repost("pat", "t4", "zed", 50)],
         [("t4", 40, "cat"), ("t2", 20, None), ("t1", 10, None)], [("t4", 50, "pat")]),
        ([MuteChange("own", "cat", 1, "mute")], [("t1", 10, None)], [("t4", 50, "pat")]),
        ([create("L", "own", 2, exclusive=True), follow("own", "bob"), tweet("t5", "bob", 70),
          repost("bob", "t4", "zed", 35)],
         [("t5", 70, None), ("t4", 35, "bob"), ("t1", 10, None)], [("t4", 50, "pat")]),
        ([repost("pat", "t5", "bob", 80)],
         [("t5", 70, None), ("t4", 35, "bob"), ("t1", 10, None)], [("t5", 80, "pat"), ("t4", 50, "pat")]),
        ([delete("L", "own", 3)], None, [("t5", 70, None), ("t4", 35, "bob"), ("t3", 30, None), ("t1", 10, None)]),
    ]
    for added, listed, at_home in rows:
        history += added
        assert (in_list(history, "L"), home(history, "own")) == (listed, at_home), added
    followed = history[:5] + rows[0][0] + rows[1][0] + [create("L", "own", 2, policy="followed")]
    assert in_list(followed, "L") == [("t3", 30, None), ("t1", 10, None)]


@given(list_runs())
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_list_runs_lines_in_batches_give_the_reference_of_its_history(run: Run) -> None:
    """The raw lines of :func:`~tests.support.list_runs.list_runs` (shuffled, duplicated, garbage
    among them) parse into the same final state as the history they were written from."""
    lines = [line for batch in run.batches for line in batch]
    assert _reference(lines) == _reference(run.history)
