"""The view-change kinds of the per-reader rows (docs/reposts-and-replies.md): ``extras``,
``user_repost`` and ``visible``. Their codec against the JSON Schema, their message keys, decode
errors and splitting (none: each names one row)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from feed_service.core.rows import Entry
from feed_service.core.view_changes import (
    ChangeDecodeError,
    ExtrasChange,
    UserRepostChange,
    ViewChange,
    VisibleChange,
    decode,
    encode,
    message_key,
    split,
    to_json,
)
from tests.support.view_change_schema import matches_schema

INT64 = st.integers(-(2**63), 2**63 - 1)
NATURAL = st.integers(0, 2**63 - 1)
IDS = st.text(min_size=1, max_size=6)
sources = st.none() | INT64
delta_ops = st.sampled_from(["insert", "update", "delete"])
follow_ops = st.sampled_from(["insert", "delete"])
entries = st.builds(Entry, IDS, IDS, NATURAL, NATURAL, st.text(max_size=20), NATURAL,
                    *(st.one_of(st.none(), strategy) for strategy in (IDS, IDS, IDS, NATURAL, NATURAL)))
reposts = st.builds(Entry, IDS, IDS, NATURAL, NATURAL, st.text(max_size=20), NATURAL,
                    st.none() | IDS, st.none() | IDS, IDS, st.none() | NATURAL, st.none() | NATURAL)
"""Entries of a user's own reposts: they always name the reposter (the row's partition)."""
changes = st.one_of(
    st.builds(ExtrasChange, delta_ops, entries, IDS, INT64, sources),
    st.builds(UserRepostChange, delta_ops, reposts, INT64, sources),
    st.builds(VisibleChange, follow_ops, IDS, IDS, INT64, sources),
)

REPOST = Entry("t1", "bob", 10, 2, "héllo ☃", 1, None, None, "cat", 50, 4)
REPLY = Entry("t2", "bob", 20, 1, "re", 1, "t0", "dan")
ONE_OF_EACH: list[ViewChange] = [
    ExtrasChange("insert", REPOST, "ann", 7, 1_700_000_000_000),
    ExtrasChange("delete", REPLY, "ann", 8, None),
    UserRepostChange("update", REPOST, 3, 5),
    VisibleChange("delete", "ann", "dan", 9, None),
]


@hypothesis_settings(deadline=None)
@given(changes)
def test_every_change_round_trips_and_matches_the_schema(change: ViewChange) -> None:
    value = encode(change)
    back = decode(value)
    assert back == change and type(back) is type(change)
    assert decode(value.decode()) == change
    assert json.loads(value) == to_json(change)
    assert message_key(back) == message_key(change)
    assert matches_schema(to_json(change))
    assert list(split(change, 1)) == [change]  # one row each: nothing to split


@pytest.mark.parametrize("change", ONE_OF_EACH, ids=lambda c: f"{type(c).__name__}-{c.op}")
def test_each_kind_by_example(change: ViewChange) -> None:
    obj = to_json(change)
    assert matches_schema(obj)
    assert decode(encode(change)) == change
    assert obj["kind"] in ("extras", "user_repost", "visible")


def test_message_keys_are_the_per_reader_step_that_wrote_the_row() -> None:
    assert [message_key(c) for c in ONE_OF_EACH] == ["ann", "ann", "cat", "ann"]


def test_the_entries_keep_their_repost_and_reply_fields() -> None:
    obj = to_json(ONE_OF_EACH[0])
    assert obj["entry"]["reposted_by"] == "cat" and obj["entry"]["reposted_at"] == 50
    assert obj["timeline_id"] == "ann"
    reply = to_json(ONE_OF_EACH[1])["entry"]
    assert reply["in_reply_to_author_id"] == "dan" and "reposted_by" not in reply


def test_the_schema_refuses_what_decode_refuses() -> None:
    extras, repost, visible = to_json(ONE_OF_EACH[0]), to_json(ONE_OF_EACH[2]), to_json(ONE_OF_EACH[3])
    plain = {k: v for k, v in repost["entry"].items() if not k.startswith("repost")}
    bad = [
        {**extras, "op": "upsert"}, {k: v for k, v in extras.items() if k != "timeline_id"},
        {**extras, "timeline_id": ""}, {**extras, "timeline_id": 3},
        {**repost, "entry": plain}, {**repost, "entry": {**repost["entry"], "reposted_at": -1}},
        {**visible, "op": "update"}, {k: v for k, v in visible.items() if k != "user_id"},
        {**visible, "reader_id": ["ann"]},
    ]
    for obj in bad:
        assert not matches_schema(obj), obj
        if obj.get("timeline_id") != "" and obj.get("entry", {}).get("reposted_at", 0) != -1:
            with pytest.raises(ChangeDecodeError):  # (decode does not check lengths or signs)
                decode(json.dumps(obj))


@pytest.mark.parametrize("value", [
    b'{"kind":"extras","op":"insert","entry":{"tweet_id":"t","author_id":"a","created_at":1,"version":1,'
    b'"text":"x","profile_version":1},"ts":1}',  # no timeline_id
    b'{"kind":"extras","op":"insert","entry":{"tweet_id":"t","author_id":"a","created_at":1,"version":1,'
    b'"text":"x","profile_version":1,"reposted_at":"5"},"timeline_id":"r","ts":1}',
    b'{"kind":"user_repost","op":"insert","entry":{"tweet_id":"t","author_id":"a","created_at":1,"version":1,'
    b'"text":"x","profile_version":1},"ts":1}',  # no reposter
    b'{"kind":"user_repost","op":"delete","entry":[],"ts":1}',
    b'{"kind":"visible","op":"update","reader_id":"r","user_id":"u","ts":1}',
    b'{"kind":"visible","op":"insert","reader_id":"r","ts":1}',
    b'{"kind":"visible","op":"insert","reader_id":"r","user_id":null,"ts":1}',
])
def test_anything_else_is_a_decode_error(value: bytes) -> None:
    with pytest.raises(ChangeDecodeError):
        decode(value)
