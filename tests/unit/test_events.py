"""Parsing of the event envelope: every kind of invalid input has its own reason; the schema agrees.

The JSON Schema is the contract published to other producers, ``parse_event`` the rules the engine
and the stream apply. They must accept and reject the same envelopes, except for the rules only
``parse_event`` enforces (:data:`PARSER_ONLY`, also listed in the schema's description); the
property test below checks exactly that, which is also why the producer needs ``parse_event`` only.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from feed_service.core.events import (
    FollowChange,
    InvalidEvent,
    ProfileVersion,
    RepostChange,
    TweetDelete,
    TweetUpsert,
    event_to_json,
    join_key,
    parse_event,
)
from feed_service.kafka.envelope_schema import load_envelope_check
from tests.support.sizes import examples

CHECK = load_envelope_check()

UPSERT = {"type": "tweet", "op": "upsert", "tweet_id": "t1", "author_id": "bob", "version": 2,
          "created_at": 1700000000000, "text": "hello", "profile_version": 1}
DELETE = {"type": "tweet", "op": "delete", "tweet_id": "t1", "author_id": "bob", "version": 3}
FOLLOW = {"type": "follow", "op": "follow", "follower_id": "ann", "followee_id": "bob", "version": 0}
PROFILE = {"type": "profile", "user_id": "bob", "version": 1, "display_name": "Bob", "avatar_url": None}
REPLY = {**UPSERT, "in_reply_to_tweet_id": "t0", "in_reply_to_author_id": "ann"}
REPOST = {"type": "repost", "op": "repost", "reposter_id": "cat", "tweet_id": "t1", "author_id": "bob", "version": 4,
          "created_at": 1700000000500, "profile_version": 2}
UNREPOST = {"type": "repost", "op": "unrepost", "reposter_id": "cat", "tweet_id": "t1", "author_id": "bob", "version": 5}


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
    (REPLY, TweetUpsert("t1", "bob", 2, 1700000000000, "hello", 1, "t0", "ann")),
    (with_(UPSERT, in_reply_to_tweet_id=None, in_reply_to_author_id=None), TweetUpsert("t1", "bob", 2, 1700000000000,
                                                                                     "hello", 1)),
    (REPOST, RepostChange("cat", "t1", "bob", 4, "repost", 1700000000500, 2)),
    (with_(REPOST, reposter_id="bob"), RepostChange("bob", "t1", "bob", 4, "repost", 1700000000500, 2)),
    (UNREPOST, RepostChange("cat", "t1", "bob", 5, "unrepost")),
    (with_(UNREPOST, created_at="soon", profile_version=-1), RepostChange("cat", "t1", "bob", 5, "unrepost")),
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
    (with_(REPLY, in_reply_to_author_id=...), "incomplete_reply"),
    (with_(REPLY, in_reply_to_tweet_id=None), "incomplete_reply"),
    (with_(REPLY, in_reply_to_tweet_id=""), "empty_id"),
    (with_(REPLY, in_reply_to_author_id=7), "wrong_type"),
    (with_(REPLY, text=..., in_reply_to_author_id=...), "missing_field"),  # the fields first, then the pair
    (with_(REPOST, created_at=...), "missing_field"),
    (with_(REPOST, profile_version="2"), "wrong_type"),
    (with_(REPOST, created_at=-1), "negative_value"),
    (with_(UNREPOST, author_id=...), "missing_field"),
    (with_(UNREPOST, op="retweet"), "unknown_op"),
]

PARSER_ONLY = [
    # follower_id != followee_id: JSON Schema cannot compare two properties.
    (with_(FOLLOW, followee_id="ann"), "self_follow", "follower_id != followee_id"),
    # An integer written 2.0: an integer for JSON Schema, not for parse_event (nor the stream).
    (with_(UPSERT, version=2.0), "wrong_type", "1.0 is rejected"),
]
"""Envelopes only ``parse_event`` rejects: (envelope, its reject code, how the schema's description says so)."""


@pytest.mark.parametrize(("raw", "event"), VALID)
def test_valid_envelopes_parse_from_dict_str_and_bytes(raw: dict[str, Any], event: object) -> None:
    text = json.dumps(raw)
    assert parse_event(raw) == parse_event(text) == parse_event(text.encode()) == event
    assert parse_event(event_to_json(event)) == event  # type: ignore[arg-type]
    assert CHECK.is_valid(raw) and CHECK.explain(raw) is None


@pytest.mark.parametrize(("raw", "code"), INVALID)
def test_invalid_envelopes_are_rejected_with_a_reason(raw: Any, code: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        parse_event(raw)
    assert info.value.code == code
    assert info.value.reason


@pytest.mark.parametrize(("raw", "code"), [(r, c) for r, c in INVALID
                                           if isinstance(r, dict) and c not in {p[1] for p in PARSER_ONLY}])
def test_schema_rejects_what_the_parser_rejects(raw: dict[str, Any], code: str) -> None:
    assert not CHECK.is_valid(raw)
    assert CHECK.explain(raw)


@pytest.mark.parametrize(("raw", "code", "documented"), PARSER_ONLY)
def test_rules_only_the_parser_enforces_are_documented_in_the_schema(raw: dict[str, Any], code: str,
                                                                     documented: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        parse_event(raw)
    assert info.value.code == code
    assert CHECK.is_valid(raw)  # on purpose: the schema cannot say it ...
    assert documented in CHECK.schema["description"]  # ... so it says so in words


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


# --- the schema and the parser agree on a generated corpus -------------------------------------------

def _schema_keywords(node: Any) -> Iterator[str]:
    """Every keyword used in a schema node and the schemas nested in it."""
    if not isinstance(node, dict):
        return
    for keyword, value in node.items():
        yield keyword
        if keyword in ("properties", "$defs"):
            for sub in value.values():
                yield from _schema_keywords(sub)
        elif keyword in ("oneOf", "anyOf", "allOf"):
            for sub in value:
                yield from _schema_keywords(sub)
        elif keyword in ("if", "then", "else"):
            yield from _schema_keywords(value)


SCHEMA_KEYWORDS = frozenset({
    "$schema", "$id", "$defs", "$ref", "title", "description",
    "oneOf", "type", "const", "enum", "required", "properties", "minLength", "minimum", "maximum",
    "allOf", "if", "then",
    "default",  # an annotation (what absent means), never a check
})
"""Keywords the corpus below exercises (and fastjsonschema implements: it covers drafts 4-7 fully,
2019-09/2020-12 only in part, and ignores a keyword it does not know)."""


def test_schema_uses_only_keywords_the_agreement_test_covers() -> None:
    unknown = set(_schema_keywords(CHECK.schema)) - SCHEMA_KEYWORDS
    assert not unknown, f"new schema keywords {sorted(unknown)}: extend the corpus below and SCHEMA_KEYWORDS"


_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, 1.0, 2.0, -0.0, 2**63 - 1, 2**63]),
    st.floats(-2, 2, allow_nan=False),
    st.sampled_from(["", "a", "b", "tweet", "follow", "profile", "upsert", "delete", "unfollow", "repost",
                     "unrepost", "true"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.sampled_from(["a"]), st.integers(), max_size=1),
)
_BASES = [
    {"type": "tweet", "op": "upsert", "tweet_id": "t", "author_id": "a", "version": 1, "created_at": 2,
     "text": "x", "profile_version": 0},
    {"type": "tweet", "op": "delete", "tweet_id": "t", "author_id": "a", "version": 1},
    {"type": "follow", "op": "follow", "follower_id": "a", "followee_id": "b", "version": 1},
    {"type": "follow", "op": "follow", "follower_id": "a", "followee_id": "b", "version": 1, "show_reposts": False},
    {"type": "follow", "op": "unfollow", "follower_id": "a", "followee_id": "b", "version": 1, "show_reposts": 1},
    {"type": "profile", "user_id": "a", "version": 1, "display_name": "A", "avatar_url": None, "bio": "b"},
    {"type": "tweet", "op": "upsert", "tweet_id": "t", "author_id": "a", "version": 1, "created_at": 2,
     "text": "x", "profile_version": 0, "in_reply_to_tweet_id": "p", "in_reply_to_author_id": "b"},
    {"type": "repost", "op": "repost", "reposter_id": "r", "tweet_id": "t", "author_id": "a", "version": 1,
     "created_at": 2, "profile_version": 0},
    {"type": "repost", "op": "unrepost", "reposter_id": "r", "tweet_id": "t", "author_id": "a", "version": 1},
]
_FIELDS = sorted({k for base in _BASES for k in base})


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    """Valid envelopes with up to three fields dropped or replaced, and a few non-objects."""
    envelope = dict(draw(st.sampled_from(_BASES)))
    for _ in range(draw(st.integers(0, 3))):
        field = draw(st.sampled_from(_FIELDS))
        if draw(st.booleans()):
            envelope.pop(field, None)
        else:
            envelope[field] = draw(_VALUES)
    return draw(st.one_of(st.just(envelope), st.just(envelope), st.just(envelope), _VALUES))


def _accepted_unless_parser_only(envelope: Any) -> bool:
    """Whether ``parse_event`` accepts ``envelope`` once the rules of :data:`PARSER_ONLY` are waived."""
    if isinstance(envelope, dict):  # waive "no integral floats": write them as integers
        envelope = {k: int(v) if type(v) is float and v.is_integer() else v for k, v in envelope.items()}
    try:
        parse_event(envelope)
    except InvalidEvent as exc:
        return exc.code == "self_follow"  # raised only once every other field is valid
    return True


@hsettings(max_examples=examples(2000), deadline=None)
@given(envelopes())
def test_schema_and_parser_accept_the_same_envelopes(envelope: Any) -> None:
    assert CHECK.is_valid(envelope) == _accepted_unless_parser_only(envelope)
    assert (CHECK.explain(envelope) is None) == CHECK.is_valid(envelope)
