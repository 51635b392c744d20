"""Trimming of stored home timelines (docs/trimming.md): the view's trim, the tracker that decides
when the stream trims, and the rule a trimmed view keeps, over random histories like
tests/unit/test_join_properties.py's, with small caps and slacks so that trims happen all the time."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feed_service.core.events import Event, FollowChange, event_to_json
from feed_service.core.join import StepResult
from feed_service.core.reference import (
    exact_timelines,
    reference_entries,
    reference_tables,
    reference_timelines,
    rule_violations,
    trim_rule_violations,
)
from feed_service.core.rows import Entry, TimelineDelta
from feed_service.core.trim_tracker import TrimTracker
from feed_service.core.view import Materializer, TimelineView
from feed_service.errors import ViewContractError

from .test_join_properties import SETTINGS, Run, check_dimensions, random_event, runs


def _materialize(run: Run, *, inbox_cap: int, trim_slack: int, encode_states: bool = False,
                 pull_threshold: int = 1000) -> Materializer:
    """Run the batches with trimming on, checking the bound after every batch."""
    engine = Materializer(inbox_cap=inbox_cap, encode_states=encode_states, pull_threshold=pull_threshold,
                          trim_slack=trim_slack)
    for batch in run.batches:
        engine.process_batch(batch)
        assert all(len(rows) <= inbox_cap + trim_slack for rows in engine.view.timelines.values())
    return engine


@st.composite
def runs_without_removals(draw: st.DrawFn) -> Run:
    """Histories with no tweet delete, no unfollow and created_at fixed per tweet."""
    rnd = draw(st.randoms(use_true_random=False))
    history: list[Event] = []
    for _ in range(draw(st.integers(0, 80))):
        ev = random_event(rnd, fixed_created_at=True, deletes=False)
        if isinstance(ev, FollowChange) and not ev.active:
            ev = FollowChange(ev.follower_id, ev.followee_id, ev.version, "follow")
        history.append(ev)
    lines = [json.dumps(event_to_json(e)) for e in history]
    lines += [rnd.choice(lines) for _ in range(rnd.randint(0, len(lines) // 3))] if lines else []
    rnd.shuffle(lines)
    batches, i = [], 0
    while i < len(lines):
        n = rnd.randint(1, 12)
        batches.append(lines[i: i + n])
        i += n
    return Run(history, lines, batches, 0)


# -- the rule, over random histories -------------------------------------------------------------


@SETTINGS
@given(run=runs(), inbox_cap=st.integers(1, 4), trim_slack=st.integers(0, 2), encode_states=st.booleans(),
       pull_threshold=st.sampled_from([1, 2, 1000]))
def test_trimmed_view_keeps_the_rule(run: Run, inbox_cap: int, trim_slack: int, encode_states: bool,
                                     pull_threshold: int) -> None:
    # Every entry a live joined tweet with its current content, in order, at most the cap; exact
    # where nothing could have been pushed out and come back short. Strict mode checks every delta.
    engine = _materialize(run, inbox_cap=inbox_cap, trim_slack=trim_slack, encode_states=encode_states,
                          pull_threshold=pull_threshold)
    assert trim_rule_violations(engine.view.snapshot(), run.history, inbox_cap=inbox_cap, trim_slack=trim_slack) == []
    check_dimensions(engine, run)


@SETTINGS
@given(run=runs(), inbox_cap=st.integers(1, 2), trim_slack=st.integers(0, 2))
def test_at_the_cap_every_entry_is_a_live_joined_tweet_with_trimming(run: Run, inbox_cap: int, trim_slack: int) -> None:
    engine = _materialize(run, inbox_cap=inbox_cap, trim_slack=trim_slack)
    whole_join = reference_entries(reference_tables(run.history), inbox_cap=None)
    read = {uid: engine.view.entries(uid) for uid in engine.view.timelines}
    assert rule_violations(read, whole_join, inbox_cap=inbox_cap, exact=()) == []


@SETTINGS
@given(run=runs_without_removals(), inbox_cap=st.integers(1, 3), trim_slack=st.integers(0, 2),
       pull_threshold=st.sampled_from([1, 2, 1000]))
def test_without_removals_trimmed_engine_equals_reference(run: Run, inbox_cap: int, trim_slack: int,
                                                         pull_threshold: int) -> None:
    engine = _materialize(run, inbox_cap=inbox_cap, trim_slack=trim_slack, encode_states=True,
                          pull_threshold=pull_threshold)
    assert engine.view.snapshot() == reference_timelines(run.history, inbox_cap=inbox_cap)


def test_random_histories_do_trim() -> None:
    """The property tests above are not vacuous: their histories make the view trim, and the
    trimmed rows come back through updates and go through deletes."""
    rnd = random.Random(7)
    trims = 0
    for _ in range(80):
        history = [random_event(rnd, fixed_created_at=False, deletes=True) for _ in range(80)]
        engine = Materializer(inbox_cap=1, trim_slack=0)
        for i in range(0, len(history), 5):
            engine.process_batch(history[i: i + 5])
        trims += engine.view.trims
        assert trim_rule_violations(engine.view.snapshot(), history, inbox_cap=1, trim_slack=0) == []
    assert trims > 50


# -- the view's trim, by example -----------------------------------------------------------------


def _entry(n: int, author: str = "bob", text: str = "x") -> Entry:
    return Entry(f"t{n}", author, n, 1, text, 1)


def _result(*deltas: tuple[str, Entry, tuple[str, ...]]) -> StepResult:
    return StepResult(state=None, ts=1, deltas=tuple(TimelineDelta(*d) for d in deltas),  # type: ignore[arg-type]
                      tweets=(), profiles=())


def _ids(view: TimelineView, uid: str = "ann") -> list[str]:
    return [e.tweet_id for e in view.entries(uid)] if uid in view.timelines else []


def _stored(view: TimelineView, uid: str = "ann") -> list[str]:
    return [k[1] for k in sorted(view.timelines.get(uid, {}), reverse=True)]


def test_view_trims_to_the_cap_above_cap_plus_slack() -> None:
    view = TimelineView(inbox_cap=2, trim_slack=1)
    view.apply(_result(*(("insert", _entry(n), ("ann",)) for n in range(3))))
    assert _stored(view) == ["t2", "t1", "t0"] and view.trims == 0  # cap + slack: kept
    view.apply(_result(("insert", _entry(3), ("ann", "cat"))))
    assert _stored(view) == ["t3", "t2"] and _stored(view, "cat") == ["t3"]
    assert (view.trims, view.trimmed_rows) == (1, 2)
    assert view.trimmed == {"ann": {(1, "t1", "bob"), (0, "t0", "bob")}}


def test_view_without_slack_never_trims() -> None:
    view = TimelineView(inbox_cap=1)
    view.apply(_result(*(("insert", _entry(n), ("ann",)) for n in range(5))))
    assert len(view.timelines["ann"]) == 5 and _ids(view) == ["t4"]


def test_delete_of_a_trimmed_row_is_a_no_op_once() -> None:
    view = TimelineView(inbox_cap=1, trim_slack=0)
    view.apply(_result(("insert", _entry(1), ("ann",)), ("insert", _entry(2), ("ann",))))
    assert _stored(view) == ["t2"]
    view.apply(_result(("delete", _entry(1), ("ann",))))  # trimmed: nothing to do, as in Cassandra
    assert _stored(view) == ["t2"] and view.trimmed == {}
    with pytest.raises(ViewContractError, match="delete of missing row"):
        view.apply(_result(("delete", _entry(1), ("ann",))))


def test_update_of_a_trimmed_row_recreates_it_and_insert_is_a_contract_error() -> None:
    view = TimelineView(inbox_cap=1, trim_slack=1)
    view.apply(_result(*(("insert", _entry(n), ("ann",)) for n in range(3))))
    assert _stored(view) == ["t2"]
    view.apply(_result(("update", _entry(0, text="edited"), ("ann",))))  # an upsert re-creates the row
    assert _stored(view) == ["t2", "t0"] and view.timelines["ann"][(0, "t0", "bob")].text == "edited"
    assert _ids(view) == ["t2"]
    with pytest.raises(ViewContractError, match="insert of trimmed row"):
        view.apply(_result(("insert", _entry(1), ("ann",))))  # the engine still holds t1: no insert


def test_non_strict_view_trims_without_remembering() -> None:
    view = TimelineView(inbox_cap=1, trim_slack=0, strict=False)
    view.apply(_result(("insert", _entry(1), ("ann",)), ("insert", _entry(2), ("ann",))))
    view.apply(_result(("delete", _entry(1), ("ann",)), ("update", _entry(0), ("ann",))))
    assert view.trimmed == {} and _stored(view) == ["t2"]  # t0 re-created, then trimmed again


def test_rule_names_the_broken_clause() -> None:
    whole = {"ann": ["c", "b", "a"]}
    assert rule_violations({"ann": ["c", "b", "a"]}, whole, inbox_cap=2, exact=())[0].startswith("ann: 3 entries")
    assert rule_violations({"ann": []}, whole, inbox_cap=2, exact={"ann"}) != []
    assert rule_violations({}, {}, inbox_cap=2, exact={"ann"}) == []


def test_exact_timelines_bounds_the_whole_history() -> None:
    def tweet(n: int, author: str = "bob") -> str:
        return json.dumps({"type": "tweet", "op": "upsert", "tweet_id": f"t{n}", "author_id": author, "version": 1,
                           "created_at": n, "text": "x", "profile_version": 1})

    def follow(who: str, whom: str, op: str = "follow") -> str:
        return json.dumps({"type": "follow", "op": op, "follower_id": who, "followee_id": whom, "version": 1})

    delete = json.dumps({"type": "tweet", "op": "delete", "tweet_id": "t0", "author_id": "bob", "version": 0})
    history = [follow("ann", "bob"), follow("cat", "bob"), follow("cat", "dan"), *map(tweet, range(2)),
               tweet(5, "dan"), delete]
    # with a delete: ann's join had at most 2 rows, cat's 3 (an unfollowed author still counts)
    assert exact_timelines(history, inbox_cap=2, trim_slack=0) == {"ann"}
    assert exact_timelines(history, inbox_cap=2, trim_slack=1) == {"ann", "cat"}
    assert exact_timelines(history + [follow("ann", "dan", "unfollow")], inbox_cap=2, trim_slack=1) == {"ann", "cat"}
    assert exact_timelines(history, inbox_cap=1, trim_slack=9) == set()  # bob had 2 tweets > cap 1
    # an edit moving created_at is a removal, one keeping it is not
    moved = json.dumps({**json.loads(tweet(1)), "version": 2, "created_at": 9})
    assert exact_timelines([follow("ann", "bob"), *map(tweet, range(3)), moved], inbox_cap=1, trim_slack=0) == set()
    kept = json.dumps({**json.loads(tweet(1)), "version": 2, "text": "edited"})
    assert exact_timelines([follow("ann", "bob"), *map(tweet, range(3)), kept], inbox_cap=1, trim_slack=0) == {"ann"}


# -- the tracker ---------------------------------------------------------------------------------


def test_tracker_unknown_timelines_are_due_on_first_write() -> None:
    t = TrimTracker(inbox_cap=20, trim_slack=5)
    assert t.record({"b": 1, "a": 3, "c": 0}) == ["a", "b"]  # c wrote nothing: not even tracked
    assert t.bound("a") is None and t.bound("c") is None
    assert t.record({"a": 1}) == ["a"]  # still unknown until a trim says how many rows it holds
    t.trimmed({"a": 7, "b": 20})
    assert t.record({"a": 18, "b": 5}) == []  # 25, 25: at cap + slack
    assert t.record({"a": 1, "b": 0}) == ["a"]
    assert (t.bound("a"), t.bound("b")) == (26, 25)


def test_tracker_bound_is_an_upper_bound_of_a_trimmed_store() -> None:
    """Against a model store: after every batch and its trims, no timeline holds more than cap +
    slack rows, and the bound is never below the rows held (deletes only lower the truth)."""
    rnd = random.Random(3)
    cap, slack = 4, 2
    tracker = TrimTracker(inbox_cap=cap, trim_slack=slack, max_timelines=3)
    store: dict[str, set[int]] = {}
    for n in range(3000):
        upserts: dict[str, int] = {}
        for _ in range(rnd.randint(0, 6)):
            uid = f"u{rnd.randint(0, 5)}"
            rows = store.setdefault(uid, set())
            if rnd.random() < 0.3 and rows:
                rows.discard(rnd.choice(sorted(rows)))
            else:
                rows.add(rnd.randint(0, 40))  # sometimes an existing row: an update
                upserts[uid] = upserts.get(uid, 0) + 1
        due = tracker.record(upserts)
        kept = {}
        for uid in due:
            rows = store[uid]
            if len(rows) > cap + slack:
                store[uid] = rows = set(sorted(rows, reverse=True)[:cap])
            kept[uid] = len(rows)
        tracker.trimmed(kept)
        assert all(len(rows) <= cap + slack for rows in store.values())
        for uid, rows in store.items():
            bound = tracker.bound(uid)
            assert bound is None or bound >= len(rows)
    assert len(tracker) == 3


def test_tracker_evicts_least_recently_written_and_forgets() -> None:
    t = TrimTracker(inbox_cap=1, trim_slack=0, max_timelines=2)
    t.trimmed({"a": 1, "b": 1})
    t.record({"a": 0})  # no rows: no touch
    t.trimmed({"c": 0})
    assert t.bound("a") is None and t.bound("b") == 1 and t.bound("c") == 0
    assert t.record({"a": 1}) == ["a"]  # evicted: unknown again (and b, now the oldest, goes)
    assert t.bound("b") is None and len(t) == 2
    t.forget(["c"])
    assert t.bound("c") is None and len(t) == 1


# -- the stream's wiring, without Spark or Cassandra ---------------------------------------------


class FakeTrimmer:
    """A store of row counts per timeline with the trimmer's contract."""

    def __init__(self, rows: dict[str, int], *, inbox_cap: int, trim_slack: int) -> None:
        self.rows, self.cap, self.slack = rows, inbox_cap, trim_slack
        self.calls: list[list[str]] = []
        self.fail = False

    def trim(self, timeline_ids):  # type: ignore[no-untyped-def]
        from feed_service.errors import StoreUnavailable
        from feed_service.store.ports import TrimResult

        ids = list(timeline_ids)
        self.calls.append(ids)
        if self.fail:
            raise StoreUnavailable("down")
        kept, timelines, cut = {}, 0, 0
        for tid in ids:
            n = self.rows.get(tid, 0)
            if n > self.cap + self.slack:
                timelines, cut, self.rows[tid] = timelines + 1, cut + n - self.cap, self.cap
            kept[tid] = self.rows.get(tid, 0)
        return TrimResult(kept, timelines, cut)


def test_stream_trimming_trims_due_timelines_and_counts() -> None:
    from feed_service.errors import StoreUnavailable
    from feed_service.settings import Settings
    from spark_jobs.stream.trimming import StreamTrimming

    store = {"a": 30, "b": 3}
    fake = FakeTrimmer(store, inbox_cap=20, trim_slack=5)
    connects = []
    trimming = StreamTrimming(Settings(inbox_cap=20, trim_slack=5), trimmer_factory=lambda: connects.append(1) or fake)
    trimming.after_batch({})
    assert connects == []  # nothing due: no session
    trimming.after_batch({"a": 30, "b": 3})  # unknown: both read; a is cut
    assert fake.calls == [["a", "b"]] and store == {"a": 20, "b": 3}
    assert trimming.record() == {"trim_checked_timelines": 2, "trimmed_timelines": 1, "trimmed_rows": 10}
    store["a"] += 5
    trimming.after_batch({"a": 5, "b": 1})  # 25 and 4: within cap + slack, no read
    store["a"] += 1
    trimming.after_batch({"a": 1})
    assert fake.calls[-1] == ["a"] and store["a"] == 20 and trimming.trims == 2
    fake.fail = True
    with pytest.raises(StoreUnavailable):
        trimming.after_batch({"a": 30})
    assert trimming.tracker.bound("a") is None  # forgotten: due again when the batch is replayed
    fake.fail = False
    calls = len(fake.calls)
    trimming.after_batch({"b": 1})  # b at 5: nothing to read
    assert len(fake.calls) == calls
    trimming.after_batch({"a": 30, "b": 1})  # the replay: a is read again whatever its count says
    assert fake.calls[-1] == ["a"] and store["a"] == 20
    assert connects == [1]  # one session for the life of the stream


def test_write_partition_reports_upserts_per_timeline() -> None:
    import spark_jobs.stream.sink as sink
    from feed_service.settings import Settings
    from feed_service.store.ports import WriteCounts
    from spark_jobs.output_rows import OUTPUT_COLUMNS, result_rows

    class Writer:
        def write(self, *, timeline=(), **_):  # type: ignore[no-untyped-def]
            timeline = list(timeline)
            deletes = sum(1 for r in timeline if r.op == "delete")
            return WriteCounts(len(timeline) - deletes, deletes)

    class Counter:
        value = 0

        def add(self, n: int) -> None:
            self.value += n

    result = _result(("insert", _entry(1), ("ann", "cat")), ("update", _entry(2), ("ann",)),
                     ("delete", _entry(3), ("ann", "dan")))
    rows = [dict(zip(OUTPUT_COLUMNS, r)) for r in result_rows(result)]
    counter = Counter()
    report = sink.write_partition(Settings(view_changes=False), iter(rows), counter,
                                  outputs=sink.SinkOutputs(writer_for=lambda settings: Writer()))
    assert report.upserts == {"ann": 2, "cat": 1}
    assert report.counts == WriteCounts(3, 2) and report.changes_published == 0 and report.dead_letters == {}
    assert counter.value == 5
