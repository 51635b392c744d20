"""Pull reposters' storage without Cassandra (docs/reposts-and-replies.md, hybrid fan-out): the
writer's indexes by tweet (one change per index row and call, what the table holds after it), its
statements for ``home_timeline.pull_reposters`` and ``reader_hidden``, the reader's lookups on a fake
session, the setting; and the stream's and the backfill's paths with ``FEED_PULL_REPOSTERS`` on at
small thresholds, whose tables (with the indexes as Cassandra resolves the writer's changes) equal
``Materializer(pull_reposters=True)``'s view. tests/integration/test_per_reader_tables.py checks the
same on the real node."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feed_service.core.events import event_to_json
from feed_service.core.per_reader.messages import ExtrasDelta, HiddenDelta, PullReposterDelta
from feed_service.core.rows import AuthorTimelineWrite, Entry
from feed_service.core.view import Materializer, TimelineView
from feed_service.core.view_changes import HiddenChange, PullReposterChange
from feed_service.errors import ConfigError
from feed_service.settings import Settings
from feed_service.store.cassandra_reader import CassandraReader
from feed_service.store.cassandra_writer import IndexChange, extras_index, reposts_index
from spark_jobs.bootstrap import BOOTSTRAP_BATCH_ID
from spark_jobs.stream.per_reader import state_stage
from tests.support.backfill_stages import TS, backfill, generated_history, stream_from_states
from tests.support.per_reader_stream import Fakes, nonempty_rows, own_ids, reset_fakes, run_stream
from tests.support.repost_indexes import IndexedStore, view_indexes
from tests.support.writer_statements import writer_statements
from tests.support.repost_runs import SETTINGS, Run, runs

TWEET = Entry("t1", "bob", 10, 1, "hi", 1)


def _repost(by: str, at: int, tweet: Entry = TWEET) -> Entry:
    return tweet._replace(reposted_by=by, reposted_at=at, reposter_profile_version=2)


# --- the indexes by tweet ------------------------------------------------------------------------

def test_a_moved_repost_is_one_index_change_whatever_the_order_of_its_delete_and_insert() -> None:
    old, new = _repost("cat", 50), _repost("dan", 40)
    for rows in ([ExtrasDelta("delete", "ann", old, 7), ExtrasDelta("insert", "ann", new, 7)],
                 [ExtrasDelta("insert", "ann", new, 7), ExtrasDelta("delete", "ann", old, 7)]):
        assert extras_index(rows) == [IndexChange(("ann", "t1"), new, 7)]
    moved = [AuthorTimelineWrite("delete", _repost("cat", 50), 3), AuthorTimelineWrite("insert", _repost("cat", 60), 3)]
    assert reposts_index(moved) == [IndexChange(("t1", "cat"), _repost("cat", 60), 3)]
    assert reposts_index(moved[:1]) == [IndexChange(("t1", "cat"), None, 3)]


def test_the_index_follows_the_newest_change_and_a_delete_wins_a_tie_of_one_row() -> None:
    repost, reply = _repost("cat", 50), TWEET._replace(in_reply_to_tweet_id="t0", in_reply_to_author_id="eve")
    # a repost entry that becomes a shown reply: no repost entry of the tweet any more
    assert extras_index([ExtrasDelta("delete", "ann", repost, 4), ExtrasDelta("insert", "ann", reply, 4)]) == [
        IndexChange(("ann", "t1"), None, 4)]
    # replies only: nothing to index, nothing to delete
    assert extras_index([ExtrasDelta("insert", "ann", reply, 4), ExtrasDelta("delete", "bea", reply, 5)]) == []
    # a repost entry at the tweet's own time that becomes a reply is an update of one row: its index row goes
    assert extras_index([ExtrasDelta("update", "ann", reply, 6)]) == [IndexChange(("ann", "t1"), None, 6)]
    # an older change after a newer one in the call, and an upsert and a delete of one row at one timestamp
    assert extras_index([ExtrasDelta("insert", "ann", repost, 9), ExtrasDelta("delete", "ann", repost, 8)]) == [
        IndexChange(("ann", "t1"), repost, 9)]
    assert extras_index([ExtrasDelta("insert", "ann", repost, 9), ExtrasDelta("delete", "ann", repost, 9)]) == [
        IndexChange(("ann", "t1"), None, 9)]
    # readers and reposters apart
    two = extras_index([ExtrasDelta("insert", "ann", repost, 1), ExtrasDelta("insert", "bea", repost, 2)])
    assert sorted(two) == [IndexChange(("ann", "t1"), repost, 1), IndexChange(("bea", "t1"), repost, 2)]


def test_the_writer_writes_the_static_set_the_hidden_rows_and_the_indexes(monkeypatch: pytest.MonkeyPatch) -> None:
    counts, calls = writer_statements(
        monkeypatch,
        pull_reposters=[PullReposterDelta("insert", "ann", "pat", 5), PullReposterDelta("delete", "bea", "pat", 6)],
        hidden=[HiddenDelta("insert", "ann", "eve", 7), HiddenDelta("delete", "ann", "fay", 7)],
        extras=[ExtrasDelta("delete", "ann", _repost("cat", 50), 8), ExtrasDelta("insert", "ann", _repost("dan", 40), 8)],
        user_reposts=[AuthorTimelineWrite("delete", _repost("cat", 50), 9)])
    assert (counts.pull_reposters, counts.hidden, counts.extras_upserts, counts.extras_deletes) == (2, 2, 1, 1)
    got = {(" ".join(cql.split()[:4]), tuple(tuple(v) if isinstance(v, set) else v for v in values))
           for cql, values in calls}
    assert {
        ("UPDATE ks.home_timeline USING TIMESTAMP", (5, ("pat",), "ann")),
        ("UPDATE ks.home_timeline USING TIMESTAMP", (6, ("pat",), "bea")),
        ("INSERT INTO ks.reader_hidden (reader_id,", ("ann", "eve", 7)),
        ("DELETE FROM ks.reader_hidden USING", (7, "ann", "fay")),
        ("INSERT INTO ks.home_extras_reposts (reader_id,", ("ann", "t1", "bob", 40, "dan", 8)),
        ("DELETE FROM ks.reposts_by_tweet USING", (9, "t1", "cat")),
    } <= got
    adds = [cql for cql, values in calls if values == (5, {"pat"}, "ann")]
    removes = [cql for cql, values in calls if values == (6, {"pat"}, "bea")]
    assert "pull_reposters = pull_reposters + ?" in adds[0] and "pull_reposters = pull_reposters - ?" in removes[0]
    assert len(calls) == 2 + 2 + 2 + 1 + 1 + 1  # the index of the moved repost: one row


# --- the reader's lookups ---------------------------------------------------------------------------

class Answer:
    """A driver ResponseFuture that answers at once."""

    def __init__(self, rows: list[tuple]) -> None:
        self.rows = rows

    def add_callbacks(self, callback, errback, callback_args=(), errback_args=()) -> None:  # noqa: ANN001
        callback(self.rows, *callback_args)


class TableSession:
    """Answers the reader's statements (named by tag) from in-memory rows, filtering IN lists."""

    def __init__(self) -> None:
        self.by_tweet = {"t1": [("cat", "bob", 50), ("dan", "bob", 40), ("eve", "zed", 30)], "t2": [("cat", "bob", 70)]}
        self.pushed = {"ann": [("t1", "bob", 45, "fay"), ("t2", "zed", 80, "fay")]}
        self.hidden = {"ann": [f"u{i}" for i in range(0, 250, 2)]}
        # the inbox's columns, then its statics: pull_authors, pull_reposters, inbox_dropped, list_owner, list_policy
        self.statics = {"ann": [("t9", "bob", 1, 1, "x", 1, "", "", {"star"}, {"pat", "cat"}, None, None, None)],
                        "cat": [(None, None, None, None, None, None, None, None, None, {"pat"}, None, None, None)]}
        self.calls: list[tuple[str, tuple]] = []

    def execute_async(self, statement: str, params: tuple, timeout: float, execution_profile: Any) -> Answer:
        self.calls.append((statement, params))
        key, *rest = params
        if statement == "reposts_of":
            return Answer([r for r in self.by_tweet.get(key, []) if r[0] in rest[0]])
        if statement == "pushed":
            return Answer([r for r in self.pushed.get(key, []) if r[0] in rest[0]])
        if statement == "hidden":
            return Answer([(u,) for u in self.hidden.get(key, []) if u in rest[0]])
        if statement == "pull_reposters":
            rows = self.statics.get(key, [])
            return Answer([(rows[0][9],)] if rows else [])
        return Answer(self.statics.get(key, []) if statement == "inbox_first" else [])


def _reader() -> tuple[CassandraReader, TableSession]:
    reader = object.__new__(CassandraReader)  # the statements as tags: nothing to prepare
    session = TableSession()
    reader.session, reader._profile, reader._closed, reader._completions = session, None, False, None
    for name in ("reposts_of", "pushed", "hidden", "pull_reposters", "inbox_first", "inbox_before"):
        setattr(reader, f"_{name}", name)
    return reader, session


def test_the_reader_asks_one_partition_per_tweet_and_keeps_the_asked_authors_and_reposters() -> None:
    async def reads() -> tuple:
        reader, session = _reader()
        got = (await reader.reposts_of([("bob", "t1"), ("zed", "t1"), ("bob", "t2"), ("bob", "t3")], ["cat", "dan"],
                                       timeout=1),
               await reader.reposts_of([("bob", "t1")], [], timeout=1),
               await reader.pushed_reposts("ann", [("bob", "t1"), ("bob", "t2")], timeout=1),
               await reader.hidden_among("ann", [f"u{i}" for i in range(300)], timeout=1),
               await reader.inbox("ann", before=None, limit=5, timeout=1),
               await reader.inbox("cat", before=None, limit=5, timeout=1),
               await reader.inbox("nobody", before=None, limit=5, timeout=1),
               await reader.inbox("nobody", before=(5, "t5"), limit=5, timeout=1),
               await reader.pull_reposters("ann", timeout=1), await reader.pull_reposters("nobody", timeout=1))
        return got, session.calls

    (of, none, pushed, hidden, ann, cat, nobody, below, reposters, no_reposters), calls = asyncio.run(reads())
    assert of == {("bob", "t1"): [(40, "dan"), (50, "cat")], ("bob", "t2"): [(70, "cat")]}  # not eve's, not zed's
    assert none == {}
    assert pushed == {("bob", "t1"): (45, "fay")}  # t2's entry names another author
    assert hidden == {f"u{i}" for i in range(0, 250, 2)}
    assert [c for c in calls if c[0] == "hidden"].__len__() == 3  # 300 ids: three reads of 100
    assert sorted(p[0] for s, p in calls if s == "reposts_of") == ["t1", "t2", "t3"]  # one per tweet id
    assert (ann.pull_authors, ann.pull_reposters, [e.tweet_id for e in ann.entries]) == (["star"], ["cat", "pat"], ["t9"])
    assert (cat.entries, cat.pull_authors, cat.pull_reposters) == ([], [], ["pat"])
    assert (nobody.pull_authors, nobody.pull_reposters) == ([], []) and (below.pull_authors, below.pull_reposters) == (None, None)
    assert (reposters, no_reposters) == (["cat", "pat"], [])


# --- the setting -----------------------------------------------------------------------------------

def test_the_setting_is_on_by_default_and_travels_to_child_processes() -> None:
    assert Settings().pull_reposters is True and Settings().reposter_threshold == Settings().pull_threshold
    on = Settings.from_env({"FEED_PULL_THRESHOLD": "7"})
    assert on.pull_reposters and on.reposter_threshold == 7
    off = Settings.from_env({"FEED_PULL_REPOSTERS": "0"})
    assert not off.pull_reposters and off.reposter_threshold is None
    assert Settings.from_env(on.to_env()).pull_reposters is True
    assert Settings.from_env(off.to_env()).pull_reposters is False
    with pytest.raises(ConfigError):
        Settings.from_env({"FEED_PULL_REPOSTERS": "maybe"})
    with pytest.raises(ConfigError):
        Settings(pull_reposters=1)  # type: ignore[arg-type]


# --- the stream's and the backfill's tables ----------------------------------------------------------

def _sets(table: dict[str, set[str]]) -> dict[str, set[str]]:
    return {k: v for k, v in table.items() if v}


def assert_tables_are_the_views(store: IndexedStore, view: TimelineView) -> None:
    assert nonempty_rows(store.extras) == nonempty_rows(view.extras)
    assert nonempty_rows(store.user_reposts) == nonempty_rows(view.own_reposts)
    assert _sets(store.visible) == _sets(view.visible)
    assert _sets(store.hidden) == _sets(view.hidden)
    assert _sets(store.reposters_pull) == _sets(view.pull_reposters)
    indexes = view_indexes(view)
    assert store.index("home_extras_reposts") == indexes["home_extras_reposts"]
    assert store.index("reposts_by_tweet") == indexes["reposts_by_tweet"]


def _applied(changes: list, of: type, owner: str, member: str) -> dict[str, set[str]]:
    """Per-owner sets after the published changes of one kind, each pair's highest ``ts`` winning."""
    newest: dict[tuple[str, str], tuple[int, bool]] = {}
    for c in changes:
        if type(c) is of:
            pair = (getattr(c, owner), getattr(c, member))
            newest[pair] = max(newest.get(pair, (-1, False)), (c.ts, c.op == "delete"))
    out: dict[str, set[str]] = {}
    for (o, m), (_, deleted) in newest.items():
        if not deleted:
            out.setdefault(o, set()).add(m)
    return out


@SETTINGS
@given(run=runs(), pull_threshold=st.sampled_from([1, 2, 3]), replay=st.randoms(use_true_random=False))
def test_the_streams_tables_with_pull_reposters_are_the_materializers(run: Run, pull_threshold: int,
                                                                      replay: random.Random) -> None:
    reset_fakes()
    Fakes.store = IndexedStore()
    run = own_ids(run)
    run_stream(run, inbox_cap=100, pull_threshold=pull_threshold, replay=replay, pull_reposters=True)
    engine = Materializer(inbox_cap=100, pull_threshold=pull_threshold, pull_reposters=True)
    for batch in run.batches:
        engine.process_batch(batch)
    assert_tables_are_the_views(Fakes.store, engine.view)  # type: ignore[arg-type]
    # the view changes say the same as the tables
    assert _applied(Fakes.published, PullReposterChange, "timeline_id", "reposter_id") == _sets(engine.view.pull_reposters)
    assert _applied(Fakes.published, HiddenChange, "reader_id", "user_id") == _sets(engine.view.hidden)


def test_with_the_setting_off_no_reposter_is_pull() -> None:
    reset_fakes()
    Fakes.store = IndexedStore()
    run = Run([], [[json.dumps(event_to_json(e)) for e in generated_history(1, 400)]], 0)
    run_stream(run, inbox_cap=500, pull_threshold=1)
    assert Fakes.store.reposters_pull == {} and Fakes.store.hidden
    assert not any(type(c) is PullReposterChange for c in Fakes.published)


@pytest.mark.parametrize("seed, pull_threshold", [(1, 4), (2, 6), (3, 8)])
def test_the_backfill_and_the_stream_it_bootstraps_write_the_materializers_tables(seed: int,
                                                                                  pull_threshold: int) -> None:
    reset_fakes()
    Fakes.store = IndexedStore()
    cap = 500
    events = generated_history(seed)
    cut = len(events) * 2 // 3
    first, rest = events[:cut], events[cut:]
    states, per_reader, _ = backfill(first, inbox_cap=cap, pull_threshold=pull_threshold, pull_reposters=True)
    engine = Materializer(inbox_cap=cap, pull_threshold=pull_threshold, pull_reposters=True)
    engine.process_batch([json.dumps(event_to_json(e)) for e in first])
    assert engine.view.pull_reposters and engine.view.hidden and all(view_indexes(engine.view).values())
    assert_tables_are_the_views(Fakes.store, engine.view)  # type: ignore[arg-type]

    Fakes.inputs.save(state_stage(TS), [(identity, value, None) for identity, value in per_reader],
                      BOOTSTRAP_BATCH_ID)
    rnd = random.Random(seed)
    cuts = sorted(rnd.sample(range(1, len(rest)), 8))
    batches = [rest[a:b] for a, b in zip([0, *cuts], [*cuts, len(rest)])]
    stream_from_states(batches, states, inbox_cap=cap, pull_threshold=pull_threshold, clock_start=TS, replay=rnd,
              pull_reposters=True)
    for batch in batches:
        engine.process_batch([json.dumps(event_to_json(e)) for e in batch])
    assert_tables_are_the_views(Fakes.store, engine.view)  # type: ignore[arg-type]
