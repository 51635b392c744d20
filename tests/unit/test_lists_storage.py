"""The lists' stores without Cassandra (docs/lists.md#in-the-engine): the writer's statements for
``reader_excluded``, ``lists`` and the statics ``list_owner``, ``list_policy`` of a list's reader
(on a fake session), MemoryStore's outcome of the same writes in any order, and the view changes
``excluded`` and ``list`` against the JSON Schema. tests/integration/test_per_reader_tables.py checks
the writer on the real node, tests/unit/test_stream_per_reader.py the stream's driver writing them."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from feed_service.core.list_readers import list_reader
from feed_service.core.per_reader.list_stage import ListFact
from feed_service.core.per_reader.messages import ExcludedDelta
from feed_service.core.view_changes import (
    ChangeDecodeError,
    ExcludedChange,
    ListChange,
    ViewChange,
    decode,
    encode,
    message_key,
    split,
    to_json,
)
from feed_service.store.memory import MemoryStore
from tests.support.view_change_schema import matches_schema
from tests.support.writer_statements import writer_statements

L1 = list_reader("L1")


def test_excluded_rows_are_inserted_and_deleted_at_their_ts(monkeypatch: pytest.MonkeyPatch) -> None:
    counts, calls = writer_statements(monkeypatch, excluded=[ExcludedDelta("insert", "ann", "bob", 7),
                                                      ExcludedDelta("delete", "ann", "cat", 8)])
    assert counts.excluded == 2 and counts.hidden == counts.lists == 0
    assert calls == [
        ("INSERT INTO ks.reader_excluded (reader_id, user_id) VALUES (?, ?) USING TIMESTAMP ?", ("ann", "bob", 7)),
        ("DELETE FROM ks.reader_excluded USING TIMESTAMP ? WHERE reader_id = ? AND user_id = ?", (8, "ann", "cat")),
    ]


def test_a_live_fact_upserts_its_row_and_its_readers_statics(monkeypatch: pytest.MonkeyPatch) -> None:
    counts, calls = writer_statements(monkeypatch, lists=[ListFact("L1", "ann", "news", "followed", True, 5)])
    assert counts.lists == 1
    assert calls == [
        ("INSERT INTO ks.lists (owner_id, list_id, name, replies_policy, exclusive) VALUES (?, ?, ?, ?, ?)"
         " USING TIMESTAMP ?", ("ann", "L1", "news", "followed", True, 5)),
        ("UPDATE ks.home_timeline USING TIMESTAMP ? SET list_owner = ?, list_policy = ? WHERE timeline_id = ?",
         (5, "ann", "followed", L1)),
    ]


def test_a_moved_list_leaves_its_previous_owner_and_a_deleted_one_its_statics(monkeypatch: pytest.MonkeyPatch) -> None:
    _, moved = writer_statements(monkeypatch, lists=[ListFact("L1", "eve", None, "list", False, 6, "ann")])
    assert moved[0] == ("DELETE FROM ks.lists USING TIMESTAMP ? WHERE owner_id = ? AND list_id = ?", (6, "ann", "L1"))
    assert [values for _, values in moved[1:]] == [("eve", "L1", None, "list", False, 6), (6, "eve", "list", L1)]
    _, gone = writer_statements(monkeypatch, lists=[ListFact("L1", None, None, None, False, 7, "eve")])
    assert gone == [
        ("DELETE FROM ks.lists USING TIMESTAMP ? WHERE owner_id = ? AND list_id = ?", (7, "eve", "L1")),
        ("DELETE list_owner, list_policy FROM ks.home_timeline USING TIMESTAMP ? WHERE timeline_id = ?", (7, L1)),
    ]


def _history() -> tuple[list[ListFact], list[ExcludedDelta]]:
    """A list created, renamed, moved to eve, deleted, created again under ann; a second list kept;
    exclusions set and taken back, with ties of an insert and a delete."""
    facts = [ListFact("L1", "ann", "a", "list", True, 1), ListFact("L2", "bob", "b", "none", False, 1),
             ListFact("L1", "ann", "a2", "followed", True, 2), ListFact("L1", "eve", "a2", "followed", False, 3, "ann"),
             ListFact("L1", None, None, None, False, 4, "eve"), ListFact("L1", "ann", "again", "list", False, 5)]
    excluded = [ExcludedDelta("insert", "ann", "bob", 1), ExcludedDelta("insert", "ann", "cat", 1),
                ExcludedDelta("delete", "ann", "bob", 3), ExcludedDelta("insert", "eve", "bob", 3),
                ExcludedDelta("delete", "eve", "bob", 4), ExcludedDelta("insert", "eve", "bob", 4)]
    return facts, excluded


def test_memory_store_ends_at_the_newest_write_of_each_row_in_any_order() -> None:
    facts, excluded = _history()
    rnd = random.Random(3)
    for _ in range(20):
        store = MemoryStore()
        f = rnd.sample(facts, len(facts)) + rnd.sample(facts, 2)  # shuffled, some replayed
        x = rnd.sample(excluded, len(excluded)) + rnd.sample(excluded, 2)
        cut = rnd.randrange(len(f))
        counts = store.write(lists=f[:cut], excluded=x[:cut]) + store.write(lists=f[cut:], excluded=x[cut:])
        assert (counts.lists, counts.excluded) == (len(f), len(x))
        assert store.list_rows == {"ann": {"L1": ("again", "list", False)}, "bob": {"L2": ("b", "none", False)}}
        assert store.list_rules == {L1: ("ann", "list"), list_reader("L2"): ("bob", "none")}
        assert store.excluded == {"ann": {"cat"}}  # eve's exclusion: deleted at a tie


def test_a_deleted_list_has_no_row_and_no_statics() -> None:
    store = MemoryStore()
    store.write(lists=[ListFact("L1", "ann", "a", "list", True, 1)])
    store.write(lists=[ListFact("L1", None, None, None, False, 2, "ann")])
    assert store.list_rows == {} and store.list_rules == {}
    store.write(lists=[ListFact("L1", "ann", "a", "list", True, 1)])  # a replayed older write: nothing
    assert store.list_rows == {} and store.list_rules == {}


# --- the view changes ----------------------------------------------------------------------------

INT64 = st.integers(-(2**63), 2**63 - 1)
IDS = st.text(min_size=1, max_size=6)
sources = st.none() | INT64
policies = st.sampled_from(["followed", "list", "none"])
changes = st.one_of(
    st.builds(ExcludedChange, st.sampled_from(["insert", "delete"]), IDS, IDS, INT64, sources),
    st.builds(ListChange, st.just("upsert"), IDS, IDS, policies, INT64, sources),
    st.builds(ListChange, st.just("delete"), IDS, IDS, st.none() | policies, INT64, sources),
)
ONE_OF_EACH: list[ViewChange] = [
    ExcludedChange("insert", "ann", "bob", 7, 1_700_000_000_000),
    ExcludedChange("delete", "ann", "bob", 8, None),
    ListChange("upsert", "L1", "ann", "followed", 9, 5),
    ListChange("delete", "L1", "ann", None, 10, None),
]


@hypothesis_settings(deadline=None)
@given(changes)
def test_every_change_round_trips_and_matches_the_schema(change: ViewChange) -> None:
    value = encode(change)
    back = decode(value)
    assert back == change and type(back) is type(change)
    assert json.loads(value) == to_json(change)
    assert matches_schema(to_json(change))
    assert list(split(change, 1)) == [change]  # one row each: nothing to split


@pytest.mark.parametrize("change", ONE_OF_EACH, ids=lambda c: f"{type(c).__name__}-{c.op}")
def test_each_kind_by_example(change: ViewChange) -> None:
    obj = to_json(change)
    assert matches_schema(obj) and decode(encode(change)) == change
    assert obj["kind"] == ("excluded" if type(change) is ExcludedChange else "list")


def test_message_keys_are_the_reader_and_the_list() -> None:
    assert [message_key(c) for c in ONE_OF_EACH] == ["ann", "ann", "L1", "L1"]


def test_the_schema_refuses_what_decode_refuses() -> None:
    excluded, upsert = to_json(ONE_OF_EACH[0]), to_json(ONE_OF_EACH[2])
    bad = [
        {**excluded, "op": "update"}, {k: v for k, v in excluded.items() if k != "user_id"},
        {**excluded, "reader_id": ["ann"]},
        {**upsert, "op": "insert"}, {**upsert, "replies_policy": None}, {**upsert, "owner_id": None},
        {k: v for k, v in upsert.items() if k != "list_id"},
    ]
    for obj in bad:
        assert not matches_schema(obj), obj
        with pytest.raises(ChangeDecodeError):
            decode(json.dumps(obj))
    assert not matches_schema({**upsert, "replies_policy": "all"})  # (decode does not check the policy's values)
