"""Parsing of the event envelope: every kind of invalid input has its own reason; the schema agrees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from feed_service.core.events import (
    FollowChange,
    InvalidEvent,
    ProfileVersion,
    TweetDelete,
    TweetUpsert,
    event_to_json,
    join_key,
    parse_event,
)

SCHEMA = json.loads((Path(__file__).parents[2] / "schemas/events/event.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

UPSERT = {"type": "tweet", "op": "upsert", "tweet_id": "t1", "author_id": "bob", "version": 2,
          "created_at": 1700000000000, "text": "hello", "profile_version": 1}
DELETE = {"type": "tweet", "op": "delete", "tweet_id": "t1", "author_id": "bob", "version": 3}
FOLLOW = {"type": "follow", "op": "follow", "follower_id": "ann", "followee_id": "bob", "version": 0}
PROFILE = {"type": "profile", "user_id": "bob", "version": 1, "display_name": "Bob", "avatar_url": None}


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = {**base, **changes}
    return {k: v for k, v in out.items() if v is not ...}


VALID = [
    (UPSERT, TweetUpsert("t1", "bob", 2, 1700000000000, "hello", 1)),
    (DELETE, TweetDelete("t1", "bob", 3)),
    (FOLLOW, FollowChange("ann", "bob", 0, "follow")),
    (with_(FOLLOW, op="unfollow"), FollowChange("ann", "bob", 0, "unfollow")),
    (PROFILE, ProfileVersion("bob", 1, "Bob")),
    (with_(PROFILE, bio="hi", avatar_url="http://x"), ProfileVersion("bob", 1, "Bob", "http://x", "hi")),
    (with_(UPSERT, text="", extra={"nested": True}, partition=3), TweetUpsert("t1", "bob", 2, 1700000000000, "", 1)),
]

INVALID = [
    ("{not json", "bad_json"),
    (b"\xff\xfe", "bad_json"),
    ("[]", "not_object"),
    ("42", "not_object"),
    (with_(UPSERT, type=...), "missing_field"),
    (with_(UPSERT, text=...), "missing_field"),
    (with_(DELETE, op=...), "missing_field"),
    (with_(UPSERT, version=True), "wrong_type"),
    (with_(UPSERT, created_at=False), "wrong_type"),
    (with_(UPSERT, version="2"), "wrong_type"),
    (with_(UPSERT, version=2.0), "wrong_type"),
    (with_(UPSERT, text=None), "wrong_type"),
    (with_(FOLLOW, follower_id=7), "wrong_type"),
    (with_(PROFILE, avatar_url=3), "wrong_type"),
    (with_(UPSERT, tweet_id=""), "empty_id"),
    (with_(PROFILE, user_id=""), "empty_id"),
    (with_(UPSERT, version=-1), "negative_value"),
    (with_(UPSERT, profile_version=-1), "negative_value"),
    (with_(FOLLOW, version=-5), "negative_value"),
    (with_(UPSERT, type="retweet"), "unknown_type"),
    (with_(UPSERT, type=None), "unknown_type"),
    (with_(UPSERT, op="insert"), "unknown_op"),
    (with_(FOLLOW, op="block"), "unknown_op"),
    (with_(FOLLOW, followee_id="ann"), "self_follow"),
]


@pytest.mark.parametrize(("raw", "event"), VALID)
def test_valid_envelopes_parse_from_dict_str_and_bytes(raw: dict[str, Any], event: object) -> None:
    text = json.dumps(raw)
    assert parse_event(raw) == parse_event(text) == parse_event(text.encode()) == event
    assert parse_event(event_to_json(event)) == event  # type: ignore[arg-type]
    assert VALIDATOR.is_valid(raw)


@pytest.mark.parametrize(("raw", "code"), INVALID)
def test_invalid_envelopes_are_rejected_with_a_reason(raw: Any, code: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        parse_event(raw)
    assert info.value.code == code
    assert info.value.reason


@pytest.mark.parametrize(("raw", "code"), [(r, c) for r, c in INVALID if isinstance(r, dict)])
def test_schema_rejects_what_the_parser_rejects(raw: dict[str, Any], code: str) -> None:
    # Not expressible in JSON Schema: 2.0 is an integer there, and follower != followee.
    if code == "self_follow" or type(raw.get("version")) is float:
        pytest.skip("enforced by parse_event only (documented in the schema)")
    assert not VALIDATOR.is_valid(raw)


def test_reason_names_the_field() -> None:
    with pytest.raises(InvalidEvent, match="'version' must be an integer, got bool"):
        parse_event(with_(DELETE, version=False))


def test_join_key_puts_both_sides_of_an_author_on_one_key() -> None:
    events = [parse_event(UPSERT), parse_event(DELETE), parse_event(with_(FOLLOW, followee_id="bob")), parse_event(PROFILE)]
    assert {join_key(e) for e in events} == {"bob"}


def test_integers_beyond_64_bits_are_rejected_like_the_stream_does() -> None:
    import pytest

    from feed_service.core.events import InvalidEvent, parse_event

    ok = {"type": "profile", "user_id": "a", "version": 2**63 - 1, "display_name": "A"}
    assert parse_event(ok).version == 2**63 - 1
    with pytest.raises(InvalidEvent) as err:
        parse_event({**ok, "version": 2**63})
    assert err.value.code == "wrong_type"
