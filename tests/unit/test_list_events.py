"""Lists, list members and a follow's show_reposts at the event layer, by example: the boolean and
choice rules, defaults and round trips, keys and topics, the producer's helpers, ``feedctl publish``,
the rows the stream hands the engine and the workload's shares; the stream's own list follows and
exclusions (internal kinds) and the lists' reader ids.

What a list or the option does to the view is the engine's (docs/event-kinds.md, "Meaning"); nothing
here steps the engine but to check it skips lists meanwhile.
"""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace
from typing import Any

import pytest

from feed_service.core.event_kinds import CHANGELOG_ROLES, EDGE_KINDS, ENVELOPE_COLUMNS, HIDE_KINDS, TYPES
from feed_service.core.events import (
    Exclusion,
    FollowChange,
    InvalidEvent,
    ListChange,
    ListFollow,
    ListMemberChange,
    event_to_json,
    join_keys,
    parse_event,
)
from feed_service.core.list_readers import LIST_READER_PREFIX, list_of, list_reader
from feed_service.kafka.keys import record_key, topic_role
from feed_service.kafka.producer import EventRejected
from feed_service.workload.generator import ListMix, WorkloadModel, generate
from spark_jobs.envelope import EVENT_COLUMNS
from spark_jobs.timeline_join import events_from_rows
from tests.support.fake_producer import make_producer

FOLLOW = {"type": "follow", "op": "follow", "follower_id": "bob", "followee_id": "ann", "version": 3}
UNFOLLOW = {**FOLLOW, "op": "unfollow", "version": 4}
CREATE = {"type": "list", "op": "create", "list_id": "l1", "owner_id": "ann", "version": 5, "name": "friends"}
DELETE = {"type": "list", "op": "delete", "list_id": "l1", "owner_id": "ann", "version": 6}
ADD = {"type": "list_member", "op": "add", "list_id": "l1", "member_id": "bob", "version": 7}
LIST_FOLLOW = {"type": "list_follow", "op": "follow", "reader_id": "\u001flist:l1", "member_id": "bob",
               "owner_id": "ann", "list_id": "l1", "version": 9}
EXCLUDE = {"type": "exclusion", "op": "exclude", "owner_id": "ann", "member_id": "bob", "version": 9}


def _rejected(envelope: dict[str, Any]) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as info:
        parse_event(envelope)
    return info.value


# --- the boolean rule: a follow's show_reposts ---------------------------------------------------------

@pytest.mark.parametrize(("given", "expected"), [({}, True), ({"show_reposts": None}, True),
                                                 ({"show_reposts": True}, True), ({"show_reposts": False}, False)])
def test_show_reposts_is_true_unless_a_follow_says_false(given: dict[str, Any], expected: bool) -> None:
    follow = parse_event({**FOLLOW, **given})
    assert follow == FollowChange("bob", "ann", 3, "follow", expected) and follow.active
    assert FollowChange("bob", "ann", 3, "follow").show_reposts is True  # the dataclass default


@pytest.mark.parametrize("value", ["true", "false", 1, 0, 1.0, [], {}, ""])
def test_show_reposts_must_be_a_json_boolean(value: Any) -> None:
    fault = _rejected({**FOLLOW, "show_reposts": value})
    assert fault.code == "wrong_type"
    assert fault.reason.startswith("field 'show_reposts' must be a boolean or null, got ")


def test_an_unfollow_does_not_read_show_reposts() -> None:
    """Present on an unfollow, whatever its value: ignored like an unknown field, the default kept."""
    for value in (False, "nope", 7):
        unfollow = parse_event({**UNFOLLOW, "show_reposts": value})
        assert unfollow == FollowChange("bob", "ann", 4, "unfollow") and unfollow.show_reposts is True
        assert "show_reposts" not in event_to_json(unfollow)


def test_a_follow_writes_show_reposts_always_and_reads_it_back() -> None:
    for value in (True, False):
        follow = FollowChange("bob", "ann", 3, "follow", value)
        assert event_to_json(follow) == {**FOLLOW, "show_reposts": value}
        assert parse_event(json.dumps(event_to_json(follow))) == follow
    assert event_to_json(parse_event(FOLLOW))["show_reposts"] is True  # absent in, explicit out


def test_show_reposts_is_a_boolean_column_after_every_older_one() -> None:
    assert dict(ENVELOPE_COLUMNS)["show_reposts"] == "boolean"
    names = [name for name, _ in ENVELOPE_COLUMNS]
    assert names.index("show_reposts") > names.index("need")  # registry revision 3 after revision 2
    (follow,) = TYPES["follow"]
    assert [f.name for f in follow.fields_of("follow")][-1] == "show_reposts"
    assert "show_reposts" not in [f.name for f in follow.fields_of("unfollow")]


# --- the choice rule: a list's replies_policy; lists ---------------------------------------------------

@pytest.mark.parametrize(("given", "policy", "exclusive"), [
    ({}, "list", False), ({"replies_policy": None, "exclusive": None}, "list", False),
    ({"replies_policy": "followed"}, "followed", False), ({"replies_policy": "none", "exclusive": True}, "none", True),
    ({"replies_policy": "list", "exclusive": False}, "list", False),
])
def test_a_list_create_holds_its_options_with_their_defaults(given: dict[str, Any], policy: str,
                                                             exclusive: bool) -> None:
    created = parse_event({**CREATE, **given})
    assert created == ListChange("l1", "ann", 5, "create", "friends", policy, exclusive) and created.live
    assert event_to_json(created) == {**CREATE, "replies_policy": policy, "exclusive": exclusive}  # always written
    assert parse_event(event_to_json(created)) == created


@pytest.mark.parametrize("value", ["List", "LIST", "all", "", " list", "followed "])
def test_a_replies_policy_outside_its_choices_is_an_unknown_value(value: str) -> None:
    fault = _rejected({**CREATE, "replies_policy": value})
    assert fault.code == "unknown_value"
    assert fault.reason == "field 'replies_policy' must be one of followed, list, none"


@pytest.mark.parametrize("value", [1, True, ["list"], {"a": 1}])
def test_a_replies_policy_that_is_not_a_string_is_the_wrong_type(value: Any) -> None:
    fault = _rejected({**CREATE, "replies_policy": value})
    assert fault.code == "wrong_type" and "'replies_policy' must be a string or null" in fault.reason


@pytest.mark.parametrize(("change", "code"), [
    ({"exclusive": "true"}, "wrong_type"), ({"exclusive": 1}, "wrong_type"), ({"name": None}, "wrong_type"),
    ({"name": 3}, "wrong_type"), ({"list_id": ""}, "empty_id"), ({"owner_id": 7}, "wrong_type"),
    ({"version": -1}, "negative_value"), ({"op": "update"}, "unknown_op"),
    ({"replies_policy": "all", "exclusive": "yes"}, "unknown_value"),  # the first fault in declaration order
])
def test_a_malformed_list_change_is_rejected_with_a_code(change: dict[str, Any], code: str) -> None:
    assert _rejected({**CREATE, **change}).code == code


@pytest.mark.parametrize("name", ["list_id", "owner_id", "version", "name", "op"])
def test_a_list_create_needs_every_field_and_a_delete_no_name(name: str) -> None:
    assert _rejected({k: v for k, v in CREATE.items() if k != name}).code == "missing_field"
    if name != "name":
        assert _rejected({k: v for k, v in DELETE.items() if k != name}).code == "missing_field"


def test_a_list_delete_reads_neither_name_nor_options() -> None:
    deleted = parse_event({**DELETE, "name": 5, "replies_policy": "bogus", "exclusive": "x"})
    assert deleted == ListChange("l1", "ann", 6, "delete") and not deleted.live
    assert (deleted.name, deleted.replies_policy, deleted.exclusive) == (None, "list", False)
    assert event_to_json(deleted) == DELETE


def test_a_list_member_change_is_an_edge_of_a_list_and_a_user() -> None:
    added = parse_event(ADD)
    assert added == ListMemberChange("l1", "bob", 7, "add") and added.active
    removed = parse_event({**ADD, "op": "remove", "version": 8})
    assert removed == ListMemberChange("l1", "bob", 8, "remove") and not removed.active
    assert event_to_json(added) == ADD
    assert parse_event({**ADD, "member_id": "l1"}).member_id == "l1"  # no self-edge rule: a list is not a user
    kind = EDGE_KINDS["list_member"]
    assert (kind.on_op, kind.off_op, kind.tie_winner) == ("add", "remove", "remove")
    (list_kind,) = TYPES["list"]
    assert list_kind.tie_winner == "delete" and list_kind.edge is None


def test_lists_and_members_keys_topics_and_join_keys() -> None:
    created, added = parse_event(CREATE), parse_event(ADD)
    assert (record_key(created), topic_role(created), join_keys(created)) == ("l1", "lists", ("ann",))
    assert (record_key(added), topic_role(added), join_keys(added)) == ("l1|bob", "list_members", ("bob",))
    assert record_key(ListMemberChange("l|1", "b%", 1, "remove")) == "l%7C1|b%25"
    assert record_key(parse_event(DELETE)) == record_key(created)  # one entity: compaction keeps the last


def test_an_author_key_skips_lists_and_members() -> None:
    """The list stage's, never an author key's: a batch of them changes nothing of the key's fold."""
    from feed_service.core.join.fold import fold

    batch = fold("bob", [ListMemberChange("l1", "bob", 7, "add"), FollowChange("ann", "bob", 2, "follow")])
    assert batch.follows == {"ann": (2, True)} and not batch.upserts and not batch.hides
    assert fold("ann", [ListChange("l1", "ann", 5, "create", "friends")]) == fold("ann", [])


# --- the stream's own list edges (internal kinds) and the lists' reader ids ---------------------------

def test_a_list_reader_id_is_a_reserved_prefix_and_the_list_id() -> None:
    assert list_reader("l1") == "\u001flist:l1" == LIST_READER_PREFIX + "l1"
    assert list_of(list_reader("l1")) == "l1" and list_of(list_reader("")) == ""
    assert list_of(list_reader("\u001flist:l2")) == "\u001flist:l2"  # any list id round-trips
    for user in ("ann", "list:l1", "l1", " \u001flist:l1", "\u001flis"):
        assert list_of(user) is None


def test_a_list_follow_is_an_internal_edge_of_a_list_reader_and_a_member() -> None:
    follow = parse_event(LIST_FOLLOW)
    assert follow == ListFollow(list_reader("l1"), "bob", "ann", "l1", 9, "follow") and follow.active
    unfollow = parse_event({**LIST_FOLLOW, "op": "unfollow", "version": 10})
    assert unfollow == ListFollow(list_reader("l1"), "bob", "ann", "l1", 10, "unfollow") and not unfollow.active
    assert event_to_json(follow) == LIST_FOLLOW and parse_event(json.dumps(event_to_json(unfollow))) == unfollow
    kind = EDGE_KINDS["list_follow"]
    assert (kind.on_op, kind.off_op, kind.tie_winner, kind.internal) == ("follow", "unfollow", "unfollow", True)
    assert kind.edge is not None and (kind.edge.subject, kind.edge.target, kind.edge.self_code) == (
        "reader_id", "member_id", None)
    assert parse_event({**LIST_FOLLOW, "reader_id": "bob"}).reader_id == "bob"  # no self-edge rule
    assert (record_key(follow), topic_role(follow), join_keys(follow)) == (
        "list_follow|\u001flist:l1|bob", "list_edges", ("bob",))
    assert record_key(unfollow) == record_key(follow)  # one edge: compaction keeps the last


def test_an_exclusion_is_an_internal_edge_of_an_owner_and_a_member() -> None:
    excluded = parse_event(EXCLUDE)
    assert excluded == Exclusion("ann", "bob", 9, "exclude") and excluded.excluding
    included = parse_event({**EXCLUDE, "op": "include"})
    assert included == Exclusion("ann", "bob", 9, "include") and not included.excluding
    assert parse_event({**EXCLUDE, "member_id": "ann"}) == Exclusion("ann", "ann", 9, "exclude")  # an owner may be a member
    assert event_to_json(excluded) == EXCLUDE
    kind = EDGE_KINDS["exclusion"]
    assert (kind.on_op, kind.off_op, kind.tie_winner, kind.internal) == ("exclude", "include", "exclude", True)
    assert "exclusion" not in HIDE_KINDS  # the stream's own edge, not a user's hide
    assert (record_key(excluded), topic_role(excluded), join_keys(excluded)) == (
        "exclusion|ann|bob", "list_edges", ("bob",))
    # the two kinds share their topic, their keys kept apart by the type
    assert record_key(ListFollow("ann", "bob", "ann", "l1", 1, "follow")) != record_key(excluded)
    assert "list_edges" not in CHANGELOG_ROLES


@pytest.mark.parametrize(("envelope", "change", "code"), [
    (LIST_FOLLOW, {"reader_id": ""}, "empty_id"), (LIST_FOLLOW, {"owner_id": 1}, "wrong_type"),
    (LIST_FOLLOW, {"list_id": None}, "wrong_type"), (LIST_FOLLOW, {"version": -1}, "negative_value"),
    (LIST_FOLLOW, {"op": "add"}, "unknown_op"), (EXCLUDE, {"op": "exclusive"}, "unknown_op"),
    (EXCLUDE, {"member_id": ""}, "empty_id"), (EXCLUDE, {"version": 1.0}, "wrong_type"),
])
def test_a_malformed_list_edge_is_rejected_with_a_code(envelope: dict[str, Any], change: dict[str, Any],
                                                       code: str) -> None:
    assert _rejected({**envelope, **change}).code == code


@pytest.mark.parametrize("name", ["reader_id", "member_id", "owner_id", "list_id", "version", "op"])
def test_a_list_follow_needs_every_field(name: str) -> None:
    assert _rejected({k: v for k, v in LIST_FOLLOW.items() if k != name}).code == "missing_field"
    if name in EXCLUDE:
        assert _rejected({k: v for k, v in EXCLUDE.items() if k != name}).code == "missing_field"


def test_a_member_key_folds_a_list_follow_as_a_follow_and_an_exclusion_beside_its_hides() -> None:
    """Read back by the members' keys (docs/lists.md#in-the-engine): the list's reader follows the
    member; the owner's exclusion is a fourth hide edge of the owner; one's own exclusion is nothing."""
    from feed_service.core.join.fold import fold
    from feed_service.core.state import EXCLUDES

    reader = list_reader("l1")
    edges = [ListFollow(reader, "bob", "ann", "l1", 3, "follow"), ListFollow(reader, "bob", "ann", "l1", 3, "unfollow"),
             Exclusion("ann", "bob", 3, "exclude"), Exclusion("ann", "bob", 3, "include"), Exclusion("bob", "bob", 4, "exclude")]
    batch = fold("bob", [*edges, FollowChange("ann", "bob", 2, "follow")])
    assert batch.follows == {"ann": (2, True), reader: (3, False)}  # an unfollow wins a tie
    assert batch.hides == {("ann", EXCLUDES): (3, True)}  # an exclude wins a tie


def test_producers_cannot_publish_the_stream_s_own_kinds() -> None:
    producer, (client,) = make_producer()
    for type_, op in (("list_follow", "follow"), ("exclusion", "exclude")):
        for publish in (lambda: producer.publish_change(type_, op), lambda: producer.publish_edge(type_, op, "a", "b")):
            with pytest.raises(EventRejected) as info:
                publish()
            assert info.value.code == "unknown_op"
    assert client.sent == [] and producer.stats.produced == 0


def test_feedctl_publish_has_no_subcommand_for_the_stream_s_own_kinds() -> None:
    for argv in (("list_follow", "follow"), ("exclusion", "exclude"), ("exclude",), ("include",)):
        with pytest.raises(SystemExit):
            _publish_args(*argv)
    assert _publish_args("follow", "--follower", "bob", "--followee", "ann").edge_kind is EDGE_KINDS["follow"]


# --- the stream's rows ------------------------------------------------------------------------------

def _row(**values: Any) -> Any:
    return SimpleNamespace(**{name: values.get(name) for name, _ in EVENT_COLUMNS})


def test_stream_rows_become_follows_with_their_option() -> None:
    """A null show_reposts (absent, or an unfollow's: parse_changes nulls it) or NaN (pandas) is True."""
    nan = float("nan")
    rows = [_row(type="follow", op="follow", follower_id="bob", followee_id="ann", version=3, show_reposts=False),
            _row(type="follow", op="follow", follower_id="bob", followee_id="ann", version=5, show_reposts=None),
            _row(type="follow", op="follow", follower_id="cat", followee_id="ann", version=5, show_reposts=nan),
            _row(type="follow", op="unfollow", follower_id="bob", followee_id="ann", version=6)]
    assert events_from_rows(rows) == [FollowChange("bob", "ann", 3, "follow", False),
                                      FollowChange("bob", "ann", 5, "follow", True),
                                      FollowChange("cat", "ann", 5, "follow", True),
                                      FollowChange("bob", "ann", 6, "unfollow")]


def test_stream_rows_become_lists_and_members() -> None:
    """A delete's name and options are null in the row (parse_changes), as a create's left out ones."""
    nan = float("nan")
    rows = [_row(type="list", op="create", list_id="l1", owner_id="ann", version=5, name="friends",
                 replies_policy="none", exclusive=True),
            _row(type="list", op="create", list_id="l1", owner_id="ann", version=6, name="friends",
                 replies_policy=None, exclusive=nan),
            _row(type="list", op="delete", list_id="l1", owner_id="ann", version=7),
            _row(type="list_member", op="add", list_id="l1", member_id="bob", version=8),
            _row(type="list_follow", op="unfollow", reader_id=list_reader("l1"), member_id="bob", owner_id="ann",
                 list_id="l1", version=9),
            _row(type="exclusion", op="exclude", owner_id="ann", member_id="bob", version=10)]
    assert events_from_rows(rows) == [ListChange("l1", "ann", 5, "create", "friends", "none", True),
                                      ListChange("l1", "ann", 6, "create", "friends"),
                                      ListChange("l1", "ann", 7, "delete"),
                                      ListMemberChange("l1", "bob", 8, "add"),
                                      ListFollow(list_reader("l1"), "bob", "ann", "l1", 9, "unfollow"),
                                      Exclusion("ann", "bob", 10, "exclude")]


# --- the producer and feedctl publish ---------------------------------------------------------------

def test_producer_follow_writes_show_reposts_and_unfollow_does_not() -> None:
    producer, (client,) = make_producer()
    plain = producer.follow("bob", "ann")
    quiet = producer.follow("bob", "cat", show_reposts=False)
    gone = producer.unfollow("bob", "cat")
    producer.close()
    assert (plain.show_reposts, quiet.show_reposts, gone.op) == (True, False, "unfollow")
    sent = [(topic, key, json.loads(value)) for topic, value, key in client.sent]
    assert [(t, k) for t, k, _ in sent] == [("feed.follows.v1", "bob|ann"), ("feed.follows.v1", "bob|cat"),
                                            ("feed.follows.v1", "bob|cat")]
    assert [e.get("show_reposts") for _, _, e in sent] == [True, False, None]
    assert "show_reposts" not in sent[2][2]


def test_producer_list_helpers_write_lists_and_members_to_their_topics() -> None:
    producer, (client,) = make_producer()
    created = producer.list_create("l1", "ann", "friends")
    updated = producer.list_create("l1", "ann", "close friends", replies_policy="none", exclusive=True)
    added = producer.list_add("l1", "bob")
    removed = producer.list_remove("l1", "bob", version=10**15)
    deleted = producer.list_delete("l1", "ann")
    producer.close()
    assert created == ListChange("l1", "ann", created.version, "create", "friends", "list", False)
    assert updated == ListChange("l1", "ann", updated.version, "create", "close friends", "none", True)
    assert created.version < updated.version < deleted.version
    assert added == ListMemberChange("l1", "bob", added.version, "add")
    assert removed == ListMemberChange("l1", "bob", 10**15, "remove")
    assert deleted == ListChange("l1", "ann", deleted.version, "delete")
    sent = [(topic, key, json.loads(value)) for topic, value, key in client.sent]
    assert [(t, k) for t, k, _ in sent] == [("feed.lists.v1", "l1")] * 2 + [("feed.list-members.v1", "l1|bob")] * 2 + [
        ("feed.lists.v1", "l1")]
    assert sent[0][2] == {"type": "list", "op": "create", "list_id": "l1", "owner_id": "ann",
                          "version": created.version, "name": "friends", "replies_policy": "list", "exclusive": False}
    assert "name" not in sent[4][2]


def test_producer_rejects_a_bad_list_change_before_sending() -> None:
    producer, (client,) = make_producer()
    with pytest.raises(EventRejected) as info:
        producer.list_create("l1", "ann", "friends", replies_policy="everyone")
    assert info.value.code == "unknown_value"
    with pytest.raises(TypeError, match="no field 'name'"):
        producer.publish_change("list", "delete", list_id="l1", owner_id="ann", name="x")
    with pytest.raises(EventRejected) as info:
        producer.publish_change("refill", "x")
    assert info.value.code == "unknown_op"
    assert client.sent == [] and producer.stats.produced == 0


class _RecordingProducer:
    """What ``feedctl publish`` calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs))


def _publish_args(*argv: str) -> argparse.Namespace:
    from feed_service.cli.commands import publish

    parser = argparse.ArgumentParser()
    publish.register(parser.add_subparsers())
    return parser.parse_args(["publish", *argv])


def test_feedctl_publish_follow_has_a_show_reposts_flag_pair() -> None:
    from feed_service.cli.commands.publish import _publish_one

    producer = _RecordingProducer()
    for extra in ((), ("--no-show-reposts",), ("--show-reposts",)):
        _publish_one(producer, _publish_args("follow", "--follower", "bob", "--followee", "ann", *extra))
    _publish_one(producer, _publish_args("unfollow", "--follower", "bob", "--followee", "ann"))
    assert [kwargs.get("show_reposts") for _, _, kwargs in producer.calls[:3]] == [True, False, True]
    assert [args for _, args, _ in producer.calls] == [("follow", "follow", "bob", "ann")] * 3 + [
        ("follow", "unfollow", "bob", "ann")]
    assert "show_reposts" not in producer.calls[3][2]
    with pytest.raises(SystemExit):  # an unfollow has no such option
        _publish_args("unfollow", "--follower", "bob", "--followee", "ann", "--no-show-reposts")


def test_feedctl_publish_list_and_list_member_subcommands() -> None:
    from feed_service.cli.commands.publish import _publish_one

    producer = _RecordingProducer()
    _publish_one(producer, _publish_args("list", "create", "--list", "l1", "--owner", "ann", "--name", "friends"))
    _publish_one(producer, _publish_args("list", "create", "--list", "l1", "--owner", "ann", "--name", "friends",
                                         "--replies-policy", "none", "--exclusive", "--version", "9"))
    _publish_one(producer, _publish_args("list", "delete", "--list", "l1", "--owner", "ann"))
    _publish_one(producer, _publish_args("list_member", "add", "--list", "l1", "--member", "bob"))
    _publish_one(producer, _publish_args("list-member", "remove", "--list", "l1", "--member", "bob"))
    (n1, a1, k1), (_, _, k2), (n3, a3, k3), (n4, a4, k4), (_, a5, _) = producer.calls
    assert (n1, a1, n3, a3) == ("publish_change", ("list", "create"), "publish_change", ("list", "delete"))
    assert k1 == {"version": None, "list_id": "l1", "owner_id": "ann", "name": "friends", "replies_policy": "list",
                  "exclusive": False}
    assert k2 == {**k1, "version": 9, "replies_policy": "none", "exclusive": True}
    assert k3 == {"version": None, "list_id": "l1", "owner_id": "ann"}
    assert (n4, a4, k4) == ("publish_edge", ("list_member", "add", "l1", "bob"), {"version": None})
    assert a5 == ("list_member", "remove", "l1", "bob")
    for bad in (("list", "create", "--list", "l1", "--owner", "ann", "--name", "x", "--replies-policy", "all"),
                ("list", "create", "--list", "l1", "--owner", "ann"),       # a create needs its name
                ("list", "delete", "--list", "l1", "--owner", "ann", "--name", "x"),
                ("list",), ("add", "--list", "l1", "--member", "bob")):
        with pytest.raises(SystemExit):
            _publish_args(*bad)


# --- the workload --------------------------------------------------------------------------------

def test_list_and_follow_option_shares_are_seeded_and_default_to_none() -> None:
    def stream(**kwargs: Any) -> list[dict[str, Any]]:
        return list(generate(users=150, events=4000, seed=5, setup=False, **kwargs))

    plain = stream()
    assert not any(e["type"] in ("list", "list_member") or "show_reposts" in e for e in plain)
    assert plain == stream(list_share=0, follow_option_share=0)
    mixed = stream(list_share=0.1, follow_option_share=0.05)
    assert mixed == stream(list_share=0.1, follow_option_share=0.05)
    for name in ("list_share", "follow_option_share"):
        for bad in (-0.1, 1.5, float("nan")):
            with pytest.raises(ValueError, match=name):
                WorkloadModel(users=10, **{name: bad})
    with pytest.raises(ValueError, match="mix weights"):
        WorkloadModel(users=10, list_mix=ListMix(create=0, update=0, delete=0, add=0, remove=0))


def test_list_changes_are_valid_and_consistent() -> None:
    """Lists owned by users, members among users, versions rising per entity, no change of a deleted
    list, removes of members only, and every kind of change (policy and exclusive flips included)."""
    model = WorkloadModel(users=120, seed=4, list_share=0.25, follow_option_share=0.05)
    events = list(model.setup()) + [model.step() for _ in range(6000)]
    users = set(model.user_ids)
    lists: dict[str, ListChange] = {}
    deleted: set[str] = set()
    members: dict[tuple[str, str], bool] = {}
    versions: dict[tuple[str, ...], int] = {}
    seen = {"create": 0, "update": 0, "delete": 0, "add": 0, "remove": 0, "policy": 0, "exclusive": 0}
    for e in events:
        event = parse_event(e)
        if isinstance(event, ListChange):
            assert event.owner_id in users and event.list_id not in deleted
            entity: tuple[str, ...] = (event.list_id,)
            before = lists.get(event.list_id)
            if event.live:
                assert "replies_policy" in e and "exclusive" in e  # written out, as event_to_json does
                seen["create" if before is None else "update"] += 1
                if before is not None:
                    assert before.owner_id == event.owner_id
                    seen["policy"] += before.replies_policy != event.replies_policy
                    seen["exclusive"] += before.exclusive != event.exclusive
                lists[event.list_id] = event
            else:
                assert before is not None
                seen["delete"] += 1
                deleted.add(event.list_id)
                del lists[event.list_id]
        elif isinstance(event, ListMemberChange):
            assert event.list_id in lists and event.member_id in users
            entity = (event.list_id, event.member_id)
            assert members.get(entity, False) != event.active, "an add of a non-member, a remove of a member"
            members[entity] = event.active
            seen[event.op] += 1
        else:
            continue
        assert event.version > versions.get(entity, -1)
        versions[entity] = event.version
    assert all(seen.values()), seen
    assert sorted(model.active_lists()) == sorted(lists)
    assert sorted(model.active_list_members()) == sorted(
        edge for edge, on in members.items() if on and edge[0] in lists)


def test_follow_option_changes_flip_show_reposts_of_active_follows() -> None:
    model = WorkloadModel(users=120, seed=6, follow_option_share=0.1)
    events = list(model.setup()) + [model.step() for _ in range(4000)]
    active: dict[tuple[str, str], bool] = {}  # edge -> show_reposts, of the active follows
    flips = {True: 0, False: 0}
    for e in events:
        if e["type"] != "follow":
            continue
        event = parse_event(e)
        edge = (event.follower_id, event.followee_id)
        if "show_reposts" in e:
            assert edge in active and active[edge] != event.show_reposts, "a flip of an active follow's option"
            flips[event.show_reposts] += 1
        if event.active:
            active[edge] = event.show_reposts
        else:
            del active[edge]
    assert flips[False] > 50 and flips[True] > 0
    assert sorted(model.follows_without_reposts()) == sorted(edge for edge, show in active.items() if not show)


def test_workload_cli_list_and_follow_option_shares(tmp_path) -> None:
    from feed_service.cli.main import main as feedctl

    out = tmp_path / "events.jsonl"
    assert feedctl(["workload", "--users", "40", "--count", "400", "--seed", "3", "--no-progress",
                    "--list-share", "0.2", "--follow-option-share", "0.1", "--out", str(out)]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert got == list(generate(users=40, events=400, seed=3, list_share=0.2, follow_option_share=0.1))
    assert any(e["type"] == "list_member" for e in got) and any("show_reposts" in e for e in got)
