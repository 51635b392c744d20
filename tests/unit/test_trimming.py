"""Trimming of stored home timelines (docs/trimming.md): the view's trim, the tracker that decides
when the stream trims, and the rule a trimmed view keeps, over the random histories of
tests/support/join_runs.py, with small caps and slacks so that trims happen all the time."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feed_service.core.events import Event, FollowChange, RefillRequest, event_to_json
from feed_service.core.join import StepResult
from feed_service.core.reference import (
    exact_timelines,
    reference_entries,
    reference_tables,
    reference_timelines,
    rule_violations,
    trim_rule_violations,
)
from feed_service.core.list_readers import list_of
from feed_service.core.rows import Entry, TimelineDelta
from feed_service.core.trim_tracker import TrimTracker
from feed_service.core.view import Materializer, TimelineView
from feed_service.errors import ViewContractError
from feed_service.workload.generator import generate

from tests.support.join_runs import SETTINGS, Run, check_dimensions, random_event, runs
from tests.support.list_runs import SETTINGS as LIST_SETTINGS, list_history, list_runs
from tests.support.repost_runs import Run as ListRun


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


@SETTINGS
@given(run=runs(), inbox_cap=st.integers(1, 4), trim_slack=st.integers(0, 2), encode_states=st.booleans(),
       pull_threshold=st.sampled_from([1, 2, 1000]))
def test_refilled_trimmed_view_reads_exactly_what_the_untrimmed_view_reads(
        run: Run, inbox_cap: int, trim_slack: int, encode_states: bool, pull_threshold: int) -> None:
    # Removals of every kind after trims (deletes, unfollows, blocks, mutes, edits moving
    # created_at): a trimmed inbox left short is refilled, so the trim never shows in a read.
    trimmed = _materialize(run, inbox_cap=inbox_cap, trim_slack=trim_slack, encode_states=encode_states,
                           pull_threshold=pull_threshold)
    whole = Materializer(inbox_cap=inbox_cap, encode_states=encode_states, pull_threshold=pull_threshold)
    for batch in run.batches:
        whole.process_batch(batch)
    assert trimmed.view.snapshot() == whole.view.snapshot()


def test_random_histories_do_trim() -> None:
    """The property tests above are not vacuous: their histories make the view trim, and the
    trimmed rows come back through updates and go through deletes."""
    rnd = random.Random(7)
    trims = refilled = 0
    for _ in range(80):
        history = [random_event(rnd, fixed_created_at=False, deletes=True) for _ in range(80)]
        engine = Materializer(inbox_cap=1, trim_slack=0)
        for i in range(0, len(history), 5):
            engine.process_batch(history[i: i + 5])
        trims += engine.view.trims
        refilled += engine.view.refilled_rows
        assert trim_rule_violations(engine.view.snapshot(), history, inbox_cap=1, trim_slack=0) == []
    assert trims > 50 and refilled > 5


# -- lists' readers: trimmed and refilled as homes are (docs/lists.md#in-the-engine) ---------------

class CountingView(TimelineView):
    """A :class:`TimelineView` that keeps the refill requests it made (to show the tests touch lists)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.asked: list[RefillRequest] = []

    def refill_requests(self) -> list[RefillRequest]:
        out = super().refill_requests()
        self.asked += out
        return out


def _materialize_lists(run: ListRun, *, inbox_cap: int, trim_slack: int | None, pull_threshold: int = 1000,
                       encode_states: bool = False, refill: bool = True) -> Materializer:
    """Run a list history's batches, trimming (``trim_slack`` not None) with the bound checked after
    every batch, every list's reader's inbox included; ``refill`` False: the view before the refill
    (as ``bench/bench_trim_exactness.py --no-refill``)."""
    view = CountingView(inbox_cap=inbox_cap, trim_slack=trim_slack)
    engine = Materializer(inbox_cap=inbox_cap, pull_threshold=pull_threshold, pull_reposters=pull_threshold < 1000,
                          encode_states=encode_states, view=view)
    if not refill:
        engine.refill = lambda: None  # type: ignore[method-assign]
    for batch in run.batches:
        engine.process_batch(batch)
        if trim_slack is not None:
            assert all(len(rows) <= inbox_cap + trim_slack for rows in engine.view.timelines.values())
    return engine


@LIST_SETTINGS
@given(run=list_runs(), inbox_cap=st.integers(1, 4), trim_slack=st.integers(0, 2),
       pull_threshold=st.sampled_from([1, 2, 1000]), encode_states=st.booleans())
def test_without_refill_trimmed_list_timelines_keep_the_rule_exact_where_nothing_was_cut(
        run: ListRun, inbox_cap: int, trim_slack: int, pull_threshold: int, encode_states: bool) -> None:
    # Without the refill only the bounds make a timeline exact: exact_lists (and exact_timelines for
    # the homes of the lists' owners) must name no list a trim could have left short.
    engine = _materialize_lists(run, inbox_cap=inbox_cap, trim_slack=trim_slack, pull_threshold=pull_threshold,
                                encode_states=encode_states, refill=False)
    assert trim_rule_violations(engine.view.snapshot(), run.history, inbox_cap=inbox_cap, trim_slack=trim_slack,
                                lists=engine.view.list_snapshot()) == []


@LIST_SETTINGS
@given(run=list_runs(), inbox_cap=st.integers(1, 4), trim_slack=st.integers(0, 2),
       pull_threshold=st.sampled_from([1, 2, 1000]), encode_states=st.booleans())
def test_refilled_trimmed_list_timelines_read_exactly_what_the_untrimmed_ones_read(
        run: ListRun, inbox_cap: int, trim_slack: int, pull_threshold: int, encode_states: bool) -> None:
    # Member removals, list deletes, owner changes, policy changes, the owner's mutes and blocks take
    # rows out of a list's reader's trimmed inbox; its push authors (its members the owner does not
    # hide, less the pulled ones) write them again.
    trimmed = _materialize_lists(run, inbox_cap=inbox_cap, trim_slack=trim_slack, pull_threshold=pull_threshold,
                                 encode_states=encode_states)
    whole = _materialize_lists(run, inbox_cap=inbox_cap, trim_slack=None, pull_threshold=pull_threshold,
                               encode_states=encode_states)
    assert trimmed.view.list_snapshot() == whole.view.list_snapshot()
    assert trimmed.view.snapshot() == whole.view.snapshot()
    assert trim_rule_violations(trimmed.view.snapshot(), run.history, inbox_cap=inbox_cap, trim_slack=trim_slack,
                                lists=trimmed.view.list_snapshot()) == []


def test_random_list_histories_trim_and_refill_lists_readers() -> None:
    """The list tests above are not vacuous: lists' readers' inboxes are trimmed, left short by
    removals and refilled, and the lists they read are exact."""
    rnd = random.Random(11)
    trimmed_lists = asked = 0
    for _ in range(60):
        history = list_history(rnd, 90)
        engine = Materializer(inbox_cap=1, trim_slack=0, view=CountingView(inbox_cap=1, trim_slack=0))
        whole = Materializer(inbox_cap=1)
        for i in range(0, len(history), 6):
            engine.process_batch(history[i: i + 6])
            whole.process_batch(history[i: i + 6])
        trimmed_lists += sum(1 for uid in engine.view.cut if list_of(uid) is not None)
        asked += sum(1 for r in engine.view.asked if list_of(r.reader_id) is not None)  # type: ignore[attr-defined]
        assert engine.view.list_snapshot() == whole.view.list_snapshot()
    assert trimmed_lists > 20 and asked > 20


def test_a_workload_with_lists_trimmed_at_a_small_cap_reads_as_untrimmed() -> None:
    """The generator's lists (owners, members by popularity, exclusive flips, deletes) with a few
    pull authors and pull reposters (a pulled member writes no inbox row), at cap 6 and slack 2:
    every list and home timeline of the trimmed, refilled view equals the untrimmed one's, and
    keeps the rule against the reference."""
    events = list(generate(users=120, events=3000, seed=5, repost_share=0.1, reply_share=0.2, list_share=0.1,
                           follow_option_share=0.03))
    engines = [Materializer(inbox_cap=6, pull_threshold=30, pull_reposters=True, trim_slack=slack,
                            view=CountingView(inbox_cap=6, trim_slack=slack)) for slack in (2, None)]
    for i in range(0, len(events), 300):
        for engine in engines:
            engine.process_batch(events[i:i + 300])
    trimmed, whole = engines
    assert trimmed.view.list_snapshot() == whole.view.list_snapshot()
    assert trimmed.view.snapshot() == whole.view.snapshot()
    assert trim_rule_violations(trimmed.view.snapshot(), events, inbox_cap=6, trim_slack=2,
                                lists=trimmed.view.list_snapshot()) == []
    lists_trimmed = sum(1 for uid in trimmed.view.cut if list_of(uid) is not None)
    lists_refilled = {r.reader_id for r in trimmed.view.asked if list_of(r.reader_id) is not None}  # type: ignore[attr-defined]
    assert lists_trimmed > 10 and len(lists_refilled) > 2


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
        self.limits: list[int | None] = []
        self.fail = False

    def trim(self, timeline_ids, *, bounds=None, limit=None):  # type: ignore[no-untyped-def]
        from feed_service.errors import StoreUnavailable
        from feed_service.store.ports import TrimResult

        ids = list(timeline_ids)
        self.calls.append(ids)
        self.limits.append(limit)
        if self.fail:
            raise StoreUnavailable("down")
        limit = self.cap + self.slack if limit is None else limit
        kept, timelines, cut = {}, 0, 0
        for tid in ids:
            n = self.rows.get(tid, 0)
            if n > limit:
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
    trimming = StreamTrimming(Settings(inbox_cap=20, trim_slack=5), trimmer_factory=lambda: connects.append(1) or fake,
                              background=False)  # every trim before the batch ends, at cap + slack
    trimming.after_batch({})
    assert connects == []  # nothing due: no session
    trimming.after_batch({"a": 30, "b": 3})  # unknown: both read; a is cut
    assert fake.calls == [["a", "b"]] and store == {"a": 20, "b": 3}
    assert {k: v for k, v in trimming.record().items() if not k.endswith("_ms")} == {
        "trim_checked_timelines": 2, "trimmed_timelines": 1, "trimmed_rows": 10, "trim_critical_timelines": 1,
        "trim_critical_rows": 10, "trim_background_timelines": 0, "trim_background_rows": 0,
        "trim_background_failures": 0}
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
        def write(self, *, timeline_fanout=(), **_):  # type: ignore[no-untyped-def]
            timeline = [r for f in timeline_fanout for r in f.rows()]
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


# -- two thresholds, trims in flight, the background worker ----------------------------------------


def test_tracker_two_thresholds_split_due_timelines() -> None:
    from feed_service.core.trim_tracker import default_margin

    t = TrimTracker(inbox_cap=20, trim_slack=8)  # margin 2: background above 26, now above 28
    assert (t.margin, t.background_limit, t.limit) == (default_margin(8), 26, 28) == (2, 26, 28)
    t.trimmed({"a": 20, "b": 20, "c": 20, "d": 20})
    assert t.record({"a": 6, "b": 7, "c": 8, "d": 9, "e": 1}) == ["d", "e"]  # record: only what cannot wait
    assert t.due(["a", "b", "c", "d", "e", "b"]) == (["d", "e"], ["b", "c"])
    t.begin(["b"])
    assert t.due(["b", "c"]).background == ["c"]  # b's trim is in flight: not handed out twice
    assert TrimTracker(inbox_cap=20, trim_slack=8, margin=0).due(["x"]) == (["x"], [])
    with pytest.raises(ValueError):
        TrimTracker(inbox_cap=20, trim_slack=8, margin=9)


def test_tracker_rows_recorded_during_a_trim_stay_on_top_of_what_it_kept() -> None:
    t = TrimTracker(inbox_cap=10, trim_slack=4)
    t.trimmed({"a": 10})
    t.record({"a": 4})
    t.begin(["a"])
    t.record({"a": 3})  # written while the trim runs: its read may have missed them
    assert t.in_flight("a") and t.bound("a") == 17
    t.trimmed({"a": 10})
    assert t.bound("a") == 13 and not t.in_flight("a")  # kept 10 + 3 recorded since the trim began
    t.begin(["a"])
    t.trimmed({"a": 14})  # the read saw 14 (writes not recorded yet); the bound was lower: keep it
    assert t.bound("a") == 13
    # two trims in flight at once (allowed, if wasteful): the rows since the first began count for both
    t.begin(["a"])
    t.begin(["a"])
    t.record({"a": 2})
    t.trimmed({"a": 10})
    assert t.bound("a") == 12 and t.in_flight("a")
    t.record({"a": 1})
    t.forget(["a"])  # the second one failed
    assert t.bound("a") is None and not t.in_flight("a")
    t.record({"a": 1})
    t.begin(["a"])
    t.trimmed({"a": 5})  # unknown before: what it kept, plus nothing recorded since
    assert t.bound("a") == 5


class RowStore:
    """Cassandra's semantics for one table of rows per timeline, as far as trims see them: a row is
    its key and write time; a tombstone hides writes at or below its time, deletes are per row."""

    def __init__(self) -> None:
        self.live: dict[str, dict[int, int]] = {}
        self.tombs: dict[str, dict[int, int]] = {}

    def write(self, tid: str, key: int, ts: int) -> None:
        if self.tombs.get(tid, {}).get(key, -1) < ts:
            rows = self.live.setdefault(tid, {})
            rows[key] = max(ts, rows.get(key, ts))

    def remove(self, tid: str, key: int) -> None:  # a tweet delete or an unfollow: not recorded
        self.live.get(tid, {}).pop(key, None)

    def count(self, tid: str) -> int:
        return len(self.live.get(tid, {}))

    def read(self, tid: str, bound: int | None) -> list[tuple[int, int]]:
        rows = sorted(self.live.get(tid, {}).items(), reverse=True)  # newest first, as clustered
        return rows if bound is None else rows[:bound]

    def delete(self, tid: str, key: int, ts: int) -> None:
        tombs = self.tombs.setdefault(tid, {})
        tombs[key] = max(ts, tombs.get(key, ts))
        rows = self.live.get(tid, {})
        if key in rows and rows[key] <= ts:
            del rows[key]


class StoreTrimmer:
    """The trimmer's contract over a :class:`RowStore`, with a hook between a trim's reads and its
    deletes (where concurrent writes land) and failures on demand."""

    def __init__(self, store: RowStore, *, inbox_cap: int, trim_slack: int) -> None:
        self.store, self.cap, self.slack = store, inbox_cap, trim_slack
        self.between = lambda ids: None
        self.fail_next = 0
        self.calls: list[tuple[list[str], int | None]] = []

    def trim(self, timeline_ids, *, bounds=None, limit=None):  # type: ignore[no-untyped-def]
        from feed_service.errors import StoreTimeout
        from feed_service.store.ports import TrimResult

        ids = list(timeline_ids)
        self.calls.append((ids, limit))
        if self.fail_next:
            self.fail_next -= 1
            raise StoreTimeout("slow")
        limit = self.cap + self.slack if limit is None else limit
        reads = {tid: self.store.read(tid, (bounds or {}).get(tid)) for tid in ids}
        self.between(ids)
        kept, timelines, cut = {}, 0, 0
        for tid, rows in reads.items():
            if len(rows) > limit:
                for key, ts in rows[self.cap :]:
                    self.store.delete(tid, key, ts)
                timelines, cut = timelines + 1, cut + len(rows) - self.cap
                kept[tid] = self.cap
            else:
                kept[tid] = len(rows)
        return TrimResult(kept, timelines, cut)


def test_tracker_stays_an_upper_bound_under_interleaved_trims() -> None:
    """Random writes, removals, replays and trims whose reads and deletes interleave with later
    writes and records, some in flight across batch ends, some overlapping: the bound never falls
    below what a timeline holds, and after each batch's strict trims no timeline holds more than
    cap + slack."""
    rnd = random.Random(11)
    cap, slack = 5, 4
    store = RowStore()
    tracker = TrimTracker(inbox_cap=cap, trim_slack=slack, margin=2, max_timelines=50)
    users = [f"u{i}" for i in range(6)]
    clock = {u: 100 for u in users}
    unrecorded: dict[str, int] = {}
    flights: list[list] = []  # [ids, reads (None before the read), limit, bounds], in flight

    def write(tid: str) -> None:
        clock[tid] += 1
        if rnd.random() < 0.15:
            key = rnd.randint(0, clock[tid])  # an old tweet, an update, a replay below a tombstone...
            ts = rnd.choice([clock[tid], store.tombs.get(tid, {}).get(key, clock[tid])])
        else:
            key, ts = clock[tid], clock[tid]
        store.write(tid, key, ts)
        unrecorded[tid] = unrecorded.get(tid, 0) + 1

    def finish(ids: list[str], reads: dict[str, list[tuple[int, int]]], limit: int) -> None:
        kept = {}
        for tid in ids:
            rows = reads[tid]
            if len(rows) > limit:
                for key, ts in rows[cap:]:
                    store.delete(tid, key, ts)
                rows = rows[:cap]
            kept[tid] = len(rows)
        tracker.trimmed(kept)

    def check() -> None:
        for tid in users:
            bound = tracker.bound(tid)
            assert bound is None or bound + unrecorded.get(tid, 0) >= store.count(tid), tid

    def step_flights() -> None:
        for flight in list(flights):
            ids, reads, limit, _ = flight
            roll = rnd.random()
            if reads is None and roll < 0.5:
                flight[1] = {t: store.read(t, b) for t, b in flight[3].items()}
            elif reads is not None and roll < 0.4:
                flights.remove(flight)
                if rnd.random() < 0.1:
                    tracker.forget(ids)  # it failed after deleting some, or none
                else:
                    finish(ids, reads, limit)
                check()

    for _ in range(3000):
        for _ in range(rnd.randint(0, 8)):
            tid = rnd.choice(users)
            if rnd.random() < 0.1 and store.live.get(tid):
                store.remove(tid, rnd.choice(sorted(store.live[tid])))
            else:
                write(tid)
            step_flights()
        # the batch ends: its rows are recorded, the strict trims run (some timelines may have a
        # background trim still in flight: they are trimmed again, concurrently)
        written, batch = list(unrecorded), dict(unrecorded)
        unrecorded.clear()
        tracker.record(batch)
        check()
        due = tracker.due(written)
        if due.now:
            bounds = tracker.bounds(due.now)
            tracker.begin(due.now)
            finish(due.now, {t: store.read(t, bounds[t]) for t in due.now}, tracker.limit)
        assert all(store.count(t) <= cap + slack for t in users)
        check()
        if due.background:
            bounds = tracker.bounds(due.background)  # taken when the trim is handed out, as the stream does
            tracker.begin(due.background)
            flights.append([due.background, None, tracker.background_limit, bounds])
    assert any(store.tombs.values())


def _wrap_record(trimming, recorded):  # type: ignore[no-untyped-def]
    record = trimming.tracker.record

    def wrapped(upserts):  # type: ignore[no-untyped-def]
        out = record(upserts)
        recorded.set()
        return out

    trimming.tracker.record = wrapped


def test_background_trims_run_after_the_batch_and_keep_the_bound() -> None:
    import threading

    from feed_service.settings import Settings
    from spark_jobs.stream.trimming import StreamTrimming

    cap, slack = 10, 8  # margin 2: background above 16, now above 18
    store = RowStore()
    fake = StoreTrimmer(store, inbox_cap=cap, trim_slack=slack)
    connects: list[int] = []
    trimming = StreamTrimming(Settings(inbox_cap=cap, trim_slack=slack),
                              trimmer_factory=lambda: connects.append(1) or fake)
    clock = 0

    def batch(rows: dict[str, int]) -> dict[str, int]:
        nonlocal clock
        for tid, n in rows.items():
            for _ in range(n):
                clock += 1
                store.write(tid, clock, clock)
        return rows

    trimming.after_batch(batch({"a": 10, "b": 10}))  # unknown: read now, both within the limit
    assert fake.calls == [(["a", "b"], 18)] and trimming.critical.checked == 2
    trimming.after_batch(batch({"a": 7, "b": 9}))  # 17: background; 19: now
    trimming._wait_background()
    assert fake.calls[1:] == [(["b"], 18), (["a"], 16)]
    assert (store.count("a"), store.count("b")) == (10, 10)
    assert trimming.tracker.bound("a") == 10 and trimming.in_background.rows == 7 and trimming.critical.rows == 9

    # The next batch writes while a's background trim is between its read and its deletes, and
    # records its rows before that trim ends: they are added on top of what the trim kept. (The
    # waits are guards against a hang, not timings: each event is set by the other thread.)
    written, recorded = threading.Event(), threading.Event()

    def next_batch_meanwhile(ids: list[str]) -> None:
        fake.between = lambda ids: None
        batch({"a": 1})  # not in the trim's read
        written.set()
        recorded.wait(60)

    fake.between = next_batch_meanwhile
    trimming.after_batch(batch({"a": 7}))  # 17: background
    _wrap_record(trimming, recorded)
    written.wait(60)
    trimming.after_batch({"a": 1})  # records a's row (releasing the worker), then waits for the worker
    assert store.count("a") == 11 and trimming.tracker.bound("a") == 11 and not trimming.tracker.in_flight("a")
    assert all(store.count(t) <= cap + slack for t in store.live)
    trimming.close()
    assert connects == [1, 1]  # one trimmer per thread


def test_failed_background_trims_are_counted_and_come_due_again() -> None:
    from feed_service.settings import Settings
    from spark_jobs.stream.trimming import StreamTrimming

    store = RowStore()
    fake = StoreTrimmer(store, inbox_cap=10, trim_slack=8)
    trimming = StreamTrimming(Settings(inbox_cap=10, trim_slack=8), trimmer_factory=lambda: fake)
    for key in range(17):
        store.write("a", key, key)
    trimming.tracker.trimmed({"a": 0})
    fake.fail_next = 1
    trimming.after_batch({"a": 17})  # background: fails there, the batch does not
    trimming._wait_background()
    assert trimming.background_failures == 1 and trimming.record()["trim_background_failures"] == 1
    assert trimming.tracker.bound("a") is None and not trimming.tracker.in_flight("a")
    store.write("a", 17, 17)
    trimming.after_batch({"a": 1})  # unknown: trimmed before this batch ends
    assert fake.calls[-1] == (["a"], 18) and store.count("a") == 18 and trimming.tracker.bound("a") == 18
    store.write("a", 18, 18)
    trimming.after_batch({"a": 1})  # 19: now, cut to the cap
    assert store.count("a") == 10 and trimming.critical.rows == 9
    # a strict trim that fails still fails the batch
    fake.fail_next = 1
    for key in range(19, 30):
        store.write("a", key, key)
    with pytest.raises(Exception, match="slow"):
        trimming.after_batch({"a": 11})
    assert trimming.tracker.bound("a") is None
    trimming.close()


def test_close_drops_queued_background_trims_and_closes_both_trimmers() -> None:
    import threading

    from feed_service.settings import Settings
    from spark_jobs.stream import trimming as module
    from spark_jobs.stream.trimming import StreamTrimming

    store = RowStore()
    closed: list[str] = []
    fakes = []

    def factory():  # type: ignore[no-untyped-def]
        fake = StoreTrimmer(store, inbox_cap=10, trim_slack=8)
        fake.close = lambda: closed.append("closed")  # type: ignore[attr-defined]
        fakes.append(fake)
        return fake

    trimming = StreamTrimming(Settings(inbox_cap=10, trim_slack=8), trimmer_factory=factory)
    ids = [f"t{i:04d}" for i in range(module.BACKGROUND_CHUNK * 3)]
    for tid in ids:
        for key in range(17):
            store.write(tid, key, key)
    trimming.tracker.trimmed({tid: 0 for tid in ids})
    trimming.after_batch({tid: 17 for tid in ids})  # all background, three chunks
    trimming._wait_background()
    assert trimming.in_background.checked == len(ids) and len(fakes) == 1  # the worker's own trimmer

    for tid in ids:
        for key in range(17, 24):
            store.write(tid, key, key)

    # Hold the worker inside its first chunk until close() has begun: that chunk completes, the
    # rest is dropped. (The waits guard against a hang; the other thread sets each event.)
    started = threading.Event()

    def hold(chunk: list[str]) -> None:
        started.set()
        trimming._closing.wait(60)

    fakes[-1].between = hold
    trimming.after_batch({tid: 7 for tid in ids})  # 17 again: background
    started.wait(60)
    trimming.close()
    assert trimming.in_background.checked == len(ids) + module.BACKGROUND_CHUNK  # one more chunk, not three
    assert not any(trimming.tracker.in_flight(t) for t in ids)
    assert all(store.count(t) <= 18 for t in ids)
    assert closed == ["closed"]  # the worker's trimmer; the critical path never connected
