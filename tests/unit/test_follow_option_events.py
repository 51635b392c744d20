"""A follow's show_reposts at the event layer, by example: the boolean rule, its default and round trip,
the producer's helper, ``feedctl publish``, the rows the stream hands the engine and the workload's share.

What the option does to the view is the engine's (docs/event-kinds.md, "Meaning"); nothing here steps
the engine.
"""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace
from typing import Any

import pytest

from feed_service.core.event_kinds import ENVELOPE_COLUMNS, TYPES
from feed_service.core.events import FollowChange, InvalidEvent, event_to_json, parse_event
from spark_jobs.envelope import EVENT_COLUMNS
from spark_jobs.timeline_join import events_from_rows
from tests.support.fake_producer import make_producer

FOLLOW = {"type": "follow", "op": "follow", "follower_id": "bob", "followee_id": "ann", "version": 3}
UNFOLLOW = {**FOLLOW, "op": "unfollow", "version": 4}


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


# --- the workload's follow_option_share -----------------------------------------------------------


def test_follow_option_changes_flip_show_reposts_of_active_follows() -> None:
    from feed_service.workload.generator import WorkloadModel

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


def test_the_follow_option_share_is_seeded_and_zero_gives_the_workload_of_before(tmp_path) -> None:
    from feed_service.cli.main import main as feedctl
    from feed_service.workload.generator import generate

    plain = list(generate(users=40, events=400, seed=3))
    assert plain == list(generate(users=40, events=400, seed=3, follow_option_share=0))
    assert not any("show_reposts" in e for e in plain)
    out = tmp_path / "events.jsonl"
    assert feedctl(["workload", "--users", "40", "--count", "400", "--seed", "3", "--no-progress",
                    "--follow-option-share", "0.1", "--out", str(out)]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert got == list(generate(users=40, events=400, seed=3, follow_option_share=0.1))
    assert any(e.get("show_reposts") is False for e in got)
