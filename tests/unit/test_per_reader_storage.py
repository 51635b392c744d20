"""The write side of the per-reader tables without Cassandra: MemoryStore resolves every write by its
timestamp as Cassandra does (any order, any duplication, a delete winning a tie), MemoryStageInputs
loads by the batch rule, the writer's '' / 0 conventions, the schema's new tables and their grants.
tests/integration/test_per_reader_tables.py checks the same on the real node."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from feed_service.core.per_reader.messages import ExtrasDelta, VisibleDelta
from feed_service.core.rows import AuthorTimelineWrite, Entry, TimelineWrite
from feed_service.errors import StoreUnavailable
from feed_service.security.roles import (
    BACKFILL,
    SERVER,
    SERVER_TABLES,
    STATE_TABLES,
    STREAM,
    cassandra_grants,
    cassandra_revocations,
    cassandra_role,
)
from feed_service.store.cassandra_writer import _entry_values
from feed_service.store.memory import MemoryStore
from feed_service.store.stage_inputs import MemoryStageInputs, loaded
from feed_service.store.ports import WriteCounts
from feed_service.store.schema import schema_statements
from tests.support.sizes import examples


def _tweet(n: int, author: str = "bob", **fields: object) -> Entry:
    return Entry(f"t{n}", author, 1_000 + n, 1, f"text {n}", 1)._replace(**fields)


def _repost(n: int, by: str, at: int, **fields: object) -> Entry:
    return _tweet(n, reposted_by=by, reposted_at=at, reposter_profile_version=2, **fields)


# --- MemoryStore: timestamps decide --------------------------------------------------------------

OPS = st.sampled_from(["insert", "update", "delete"])


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, int, int, int]]:
    """(op, row, content, ts) writes of a few rows, ties included."""
    return draw(st.lists(st.tuples(OPS, st.integers(0, 2), st.integers(0, 3), st.integers(1, 6)), max_size=20))


def _winner(history: list[tuple[str, int, int, int]], row: int) -> tuple[str, int, int, int] | None:
    """The write Cassandra keeps for ``row``: the highest timestamp, a delete at a tie, then the
    greater content (the writers never write two contents at one timestamp)."""
    mine = [w for w in history if w[1] == row]
    return max(mine, key=lambda w: (w[3], w[0] == "delete", w[2])) if mine else None


@hsettings(max_examples=examples(200), deadline=None, derandomize=True)
@given(histories(), st.randoms(use_true_random=False))
def test_any_order_and_duplication_of_writes_converges_to_the_newest(history, rnd: random.Random) -> None:
    def extras(op: str, row: int, content: int, ts: int) -> ExtrasDelta:
        return ExtrasDelta(op, "ann", _repost(row, "cat", 5_000 + row, text=f"v{content}"), ts)

    def reposts(op: str, row: int, content: int, ts: int) -> AuthorTimelineWrite:
        return AuthorTimelineWrite(op, _repost(row, "cat", 5_000 + row, text=f"v{content}"), ts)

    def visible(op: str, row: int, content: int, ts: int) -> VisibleDelta:
        return VisibleDelta("delete" if op == "delete" else "insert", "ann", f"u{row}", ts)

    def timeline(op: str, row: int, content: int, ts: int) -> TimelineWrite:
        return TimelineWrite(op, "ann", _tweet(row, text=f"v{content}"), ts)

    stores = []
    for _ in range(3):
        store = MemoryStore()
        writes = history + rnd.sample(history, len(history) // 2)  # replays of some of them
        rnd.shuffle(writes)
        cut = rnd.randrange(len(writes) + 1)
        for part in (writes[:cut], writes[cut:]):
            store.write(extras=[extras(*w) for w in part], user_reposts=[reposts(*w) for w in part],
                        visible=[visible(*w) for w in part], timeline=[timeline(*w) for w in part])
        stores.append(store)
    for store in stores:
        expected = {row: _winner(history, row) for row in range(3)}
        live = {row: w for row, w in expected.items() if w is not None and w[0] != "delete"}
        assert {e.tweet_id: e.text for e in store.extras.get("ann", {}).values()} == {
            f"t{row}": f"v{w[2]}" for row, w in live.items()}
        assert {e.tweet_id: e.text for e in store.user_reposts.get("cat", {}).values()} == {
            f"t{row}": f"v{w[2]}" for row, w in live.items()}
        assert {e.tweet_id: e.text for e in store.timelines.get("ann", {}).values()} == {
            f"t{row}": f"v{w[2]}" for row, w in live.items()}
        assert store.visible.get("ann", set()) == {f"u{row}" for row in live}
    first = stores[0]
    assert all((s.extras, s.user_reposts, s.visible, s.timelines)
               == (first.extras, first.user_reposts, first.visible, first.timelines) for s in stores)


def test_a_delete_wins_a_tie_and_an_older_upsert_never_comes_back() -> None:
    store = MemoryStore()
    entry = _repost(1, "cat", 9_000)
    store.write(extras=[ExtrasDelta("delete", "ann", entry, 5)])
    store.write(extras=[ExtrasDelta("insert", "ann", entry, 5), ExtrasDelta("insert", "ann", entry, 4)])
    assert store.extras.get("ann", {}) == {}
    store.write(extras=[ExtrasDelta("insert", "ann", entry, 6)])
    assert list(store.extras["ann"].values()) == [entry]
    assert list(store.extras["ann"]) == [(9_000, "t1")]  # keyed by Entry.at: the repost time


def test_entries_read_back_as_from_cassandra_and_rows_land_in_their_partitions() -> None:
    store = MemoryStore()
    reply = _tweet(2, in_reply_to_tweet_id="t0", in_reply_to_author_id="dan")
    plain = _tweet(3, in_reply_to_tweet_id="", in_reply_to_author_id="")
    counts = store.write(
        extras=[ExtrasDelta("insert", "ann", reply, 1), ExtrasDelta("update", "ann", plain, 1),
                ExtrasDelta("delete", "bea", _tweet(4), 1)],
        user_reposts=[AuthorTimelineWrite("insert", _repost(5, "cat", 7_000), 1)],
        visible=[VisibleDelta("insert", "ann", "dan", 1), VisibleDelta("delete", "ann", "eve", 1)])
    assert counts == WriteCounts(extras_upserts=2, extras_deletes=1, user_reposts=1, visible=2)
    assert store.extras["ann"][(1_003, "t3")].in_reply_to_tweet_id is None  # '' is no reply
    assert store.extras["ann"][(1_002, "t2")] == reply
    assert list(store.user_reposts) == ["cat"] and store.visible == {"ann": {"dan"}}


def test_rows_cassandra_would_refuse_raise_before_anything_is_written() -> None:
    store = MemoryStore()
    with pytest.raises(ValueError, match="names no reposter"):
        store.write(timeline=[TimelineWrite("insert", "ann", _tweet(1), 1)],
                    user_reposts=[AuthorTimelineWrite("insert", _tweet(2), 1)])
    with pytest.raises(ValueError, match="disagree"):
        store.write(extras=[ExtrasDelta("insert", "ann", _tweet(3, reposted_at=5), 1)])
    assert store.timelines == {} and store.written == {}
    store.fail = StoreUnavailable("down")
    with pytest.raises(StoreUnavailable):
        store.write(visible=[VisibleDelta("insert", "ann", "dan", 1)])
    assert store.visible == {} and sum(store.calls.values()) == 0  # ``calls`` counts reads


def test_the_writer_stores_empty_strings_and_zeros_for_absent_fields() -> None:
    e = _tweet(1)
    assert _entry_values(e) == (1_001, "t1", "bob", 1_001, 1, "text 1", 1, "", "", "", 0, 0)
    r = _repost(1, "cat", 9_000, in_reply_to_tweet_id="t0", in_reply_to_author_id="dan")
    assert _entry_values(r) == (9_000, "t1", "bob", 1_001, 1, "text 1", 1, "t0", "dan", "cat", 9_000, 2)
    with pytest.raises(ValueError):
        _entry_values(_tweet(1, reposted_by="cat"))


def test_write_counts_keep_their_positions_and_add_up() -> None:
    assert WriteCounts(1, 2, 3) == WriteCounts(timeline_upserts=1, timeline_deletes=2, tweets=3)
    total = WriteCounts(1, extras_upserts=2, visible=1) + WriteCounts(extras_deletes=3, user_reposts=4, visible=1)
    assert total == WriteCounts(1, extras_upserts=2, extras_deletes=3, user_reposts=4, visible=2)


# --- the stage's inputs: the batch rule ------------------------------------------------------------

def test_a_replayed_batch_loads_the_inputs_the_batch_started_from() -> None:
    inputs = MemoryStageInputs()
    ann, bob = ("rel", "ann", "x"), ("rel", "bob", "x")
    assert inputs.load("s", 7) == []
    assert inputs.save("s", [(ann, "a7", None)], 7).rows == 1
    assert inputs.load("s", 7) == []  # batch 7 again: from before it
    assert inputs.load("s", 8) == [(ann, "a7")]
    inputs.save("s", [(ann, "a8", "a7"), (bob, "b8", None)], 8)
    # batch 8 replayed after it saved its inputs: every input as before batch 8
    assert inputs.load("s", 8) == [(ann, "a7")]
    inputs.save("s", [(ann, "a8", "a7"), (bob, "b8", None)], 8)  # the replay saves the same
    assert sorted(inputs.load("s", 9)) == [(ann, "a8"), (bob, "b8")]
    assert inputs.load("other", 9) == []  # stages are apart
    inputs.save("s", [(bob, None, "b8")], 9)  # an input withdrawn
    assert inputs.load("s", 10) == [(ann, "a8")] and sorted(inputs.load("s", 9)) == [(ann, "a8"), (bob, "b8")]
    inputs.fail = StoreUnavailable("down")
    with pytest.raises(StoreUnavailable):
        inputs.save("s", [(ann, "a10", "a8")], 10)
    inputs.fail = None
    assert inputs.load("s", 11) == [(ann, "a8")]


def test_the_batch_rule() -> None:
    assert loaded((3, b"s", b"p"), 3) == b"p" and loaded((3, b"s", b"p"), 4) == b"s" and loaded(None, 3) is None


# --- schema and grants ---------------------------------------------------------------------------

def _tables() -> set[str]:
    return {m.group(1) for s in schema_statements("ks") if (m := re.match(r"CREATE TABLE IF NOT EXISTS ks\.(\w+)", s))}


def test_the_schema_has_the_per_reader_tables_keyed_as_their_writers_write() -> None:
    created = {m.group(1): s for s in schema_statements("ks")
               if (m := re.match(r"CREATE TABLE IF NOT EXISTS ks\.(\w+)", s))}
    assert {"home_extras", "user_reposts", "reader_visible", "per_reader_inputs"} <= set(created)
    squash = {t: " ".join(s.split()) for t, s in created.items()}
    assert "PRIMARY KEY ((timeline_id), at, tweet_id)" in squash["home_extras"]
    assert "PRIMARY KEY ((user_id), at, tweet_id)" in squash["user_reposts"]
    assert "CLUSTERING ORDER BY (at DESC, tweet_id DESC)" in squash["home_extras"]
    assert "PRIMARY KEY ((stage, bucket), identity)" in squash["per_reader_inputs"]
    for table in ("home_extras", "user_reposts"):  # the writer's columns, the entry's eleven and `at`
        for column in ("reposted_by text", "reposted_at bigint", "reposter_profile_version bigint",
                       "in_reply_to_tweet_id text", "in_reply_to_author_id text", "profile_version bigint"):
            assert column in squash[table]
        assert "gc_grace_seconds = 864000" in squash[table]


def test_every_table_is_either_read_by_the_server_or_state_it_may_not_read() -> None:
    assert set(SERVER_TABLES) | set(STATE_TABLES) == _tables()
    assert not set(SERVER_TABLES) & set(STATE_TABLES)
    grants = cassandra_grants("ks")
    server = cassandra_role(SERVER)
    assert {g for g in grants if g.endswith(f"TO {server}")} == {
        f"GRANT SELECT ON TABLE ks.{t} TO {server}" for t in SERVER_TABLES}
    assert not any("per_reader_inputs" in g or "MODIFY" in g for g in grants if g.endswith(server))
    for role in (STREAM, BACKFILL):  # the writers: the whole keyspace, the state too
        assert {f"GRANT {p} ON KEYSPACE ks TO {cassandra_role(role)}" for p in ("SELECT", "MODIFY")} <= set(grants)
    assert cassandra_revocations("ks") == [("SELECT", "KEYSPACE ks", server)]
