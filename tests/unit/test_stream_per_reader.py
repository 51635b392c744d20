"""The stream's path through the per-reader stage (spark_jobs/stream/per_reader.py), without Spark:
the author keys stepped by the operator's ``run_key``, their ``per_reader`` rows turned into messages
as the sink does, and the stage run by the driver's :class:`StreamStage` with its inputs in a
batch-versioned store. The rows it writes must be the in-memory Materializer's, batch after batch,
also when a batch runs again (a replayed micro-batch) and when a new driver restores the stage; its
lists' stores (``reader_excluded``, ``lists`` and the lists' readers' statics) and their view changes,
folded as a consumer folds them, the Materializer's and the reference's.

The tables key a row by tweet id and position, not by author (a tweet id names one tweet: the
``tweets`` table's key), while the core's histories reuse tweet ids across authors to provoke wrong
authors in reposts; the histories here make every tweet id its author's
(:func:`tests.support.per_reader_stream.own_ids`), and a repost naming the wrong author still names
another author's id, which joins nothing. The stream's path: :mod:`tests.support.per_reader_stream`."""

from __future__ import annotations

import json
import random

from hypothesis import given
from hypothesis import strategies as st

from feed_service.core.events import FollowChange, ListChange as ListEvent, ListMemberChange, TweetUpsert, event_to_json
from feed_service.core.list_readers import list_reader
from feed_service.core.reference import reference_excluded, reference_tables
from feed_service.core.view import Materializer
from feed_service.core.view_changes import ExcludedChange, ListChange
from spark_jobs.stream.per_reader import state_stage
from tests.support.per_reader_stream import Fakes, nonempty_rows, own_ids, reset_fakes, run_stream
from tests.support.list_runs import list_runs
from tests.support.repost_runs import SETTINGS, Run, runs


@SETTINGS
@given(run=runs(), pull_threshold=st.sampled_from([1, 2, 1000]), replay=st.randoms(use_true_random=False))
def test_the_streams_per_reader_rows_are_the_materializers(run: Run, pull_threshold: int,
                                                           replay: random.Random) -> None:
    _the_streams_rows_are_the_materializers(run, pull_threshold, replay)


def _the_streams_rows_are_the_materializers(run: Run, pull_threshold: int, replay: random.Random) -> None:
    reset_fakes()
    run = own_ids(run)
    run_stream(run, inbox_cap=100, pull_threshold=pull_threshold, replay=replay)
    engine = Materializer(inbox_cap=100, pull_threshold=pull_threshold)
    for batch in run.batches:
        engine.process_batch(batch)
    assert nonempty_rows(Fakes.store.extras) == nonempty_rows(engine.view.extras)
    assert nonempty_rows(Fakes.store.user_reposts) == nonempty_rows(engine.view.own_reposts)
    assert {k: v for k, v in Fakes.store.visible.items() if v} == {k: v for k, v in engine.view.visible.items() if v}
    _the_lists_stores_are_the_materializers_and_the_references(run, engine)


def _the_lists_stores_are_the_materializers_and_the_references(run: Run, engine: Materializer) -> None:
    store = Fakes.store
    excluded = {k: v for k, v in engine.view.excluded.items() if v}
    assert store.excluded == excluded == reference_excluded(reference_tables(line for b in run.batches for line in b))
    assert store.list_rules == {r: (rule.owner, rule.policy) for r, rule in engine.view.list_rules.items()}
    live = reference_tables(line for b in run.batches for line in b).live_lists()
    rows: dict[str, dict] = {}
    for lid, change in live.items():
        rows.setdefault(change.owner_id, {})[lid] = (change.name, change.replies_policy, change.exclusive)
    assert store.list_rows == rows
    assert store.list_rules == {list_reader(lid): (c.owner_id, c.replies_policy) for lid, c in live.items()}
    # the view changes, folded by row as a consumer does (the newest ts wins, a delete a tie), say the same
    assert _fold(Fakes.published, ExcludedChange, lambda c: (c.reader_id, c.user_id)) == {
        (r, u) for r, users in excluded.items() for u in users}
    assert _fold(Fakes.published, ListChange, lambda c: (c.owner_id, c.list_id, c.replies_policy)) == {
        (owner, lid, policy) for owner, held in rows.items() for lid, (_, policy, _) in held.items()}


def _fold(changes: list, kind: type, row) -> set:  # type: ignore[no-untyped-def, type-arg]
    """The rows ``changes`` of ``kind`` leave, each keyed by its first two fields, the newest ts of a
    key winning (a delete at a tie)."""
    held: dict = {}  # type: ignore[type-arg]
    for c in changes:
        if type(c) is kind:
            key = row(c)[:2]
            was = held.get(key)
            if was is None or (c.ts, c.op == "delete") > (was.ts, was.op == "delete"):
                held[key] = c
    return {row(c) for c in held.values() if c.op != "delete"}


def test_a_reply_to_an_unseen_parent_is_written_once_the_parent_is_followed() -> None:
    reset_fakes()
    lines = [json.dumps(event_to_json(e)) for e in (
        FollowChange("ann", "bob", 1, "follow"),
        TweetUpsert("t1", "bob", 1, 10, "re: cat", 1, "c1", "cat"),
    )]
    later = [json.dumps(event_to_json(FollowChange("ann", "cat", 1, "follow")))]
    run_stream(Run([], [lines], 0), inbox_cap=100, pull_threshold=1000)
    assert not any(Fakes.store.extras.values())
    run_stream(Run([], [lines, later], 0), inbox_cap=100, pull_threshold=1000)
    (entry,) = Fakes.store.extras["ann"].values()
    assert (entry.tweet_id, entry.in_reply_to_author_id, entry.reposted_by) == ("t1", "cat", None)


def test_a_list_moved_to_another_owner_and_deleted_leaves_no_row_behind() -> None:
    reset_fakes()
    lines = [json.dumps(event_to_json(e)) for e in (
        ListEvent("L1", "ann", 1, "create", "news", "list", True),
        ListMemberChange("L1", "bob", 1, "add"),
        FollowChange("ann", "bob", 1, "follow"),
    )]
    moved = [json.dumps(event_to_json(ListEvent("L1", "eve", 2, "create", "news", "none", False)))]
    gone = [json.dumps(event_to_json(ListEvent("L1", "eve", 3, "delete")))]
    run_stream(Run([], [lines], 0), inbox_cap=100, pull_threshold=1000)
    assert Fakes.store.list_rows == {"ann": {"L1": ("news", "list", True)}}
    assert Fakes.store.list_rules == {list_reader("L1"): ("ann", "list")} and Fakes.store.excluded == {"ann": {"bob"}}
    reset_fakes()
    run_stream(Run([], [lines, moved], 0), inbox_cap=100, pull_threshold=1000)
    assert Fakes.store.list_rows == {"eve": {"L1": ("news", "none", False)}} and Fakes.store.excluded == {}
    assert Fakes.store.list_rules == {list_reader("L1"): ("eve", "none")}
    changes = [(c.op, c.owner_id) for c in Fakes.published if type(c) is ListChange]
    assert changes == [("upsert", "ann"), ("delete", "ann"), ("upsert", "eve")]
    assert [(c.op, c.reader_id, c.user_id) for c in Fakes.published if type(c) is ExcludedChange] == [
        ("insert", "ann", "bob"), ("delete", "ann", "bob")]
    reset_fakes()
    run_stream(Run([], [lines, moved, gone], 0), inbox_cap=100, pull_threshold=1000)
    assert Fakes.store.list_rows == {} and Fakes.store.list_rules == {}
    assert [(c.op, c.owner_id, c.replies_policy) for c in Fakes.published if type(c) is ListChange][-1] == (
        "delete", "eve", None)


def test_states_are_kept_per_checkpoint() -> None:
    assert state_stage(1000) != state_stage(2000)


@SETTINGS
@given(run=list_runs(), pull_threshold=st.sampled_from([1, 2, 1000]), replay=st.randoms(use_true_random=False))
def test_the_streams_per_reader_rows_with_lists_are_the_materializers(run: Run, pull_threshold: int,
                                                                      replay: random.Random) -> None:
    """The list stage beside the per-reader stage in the driver: its edges published and read back by
    the next batch (docs/lists.md#in-the-engine), replayed and restored as the stage is."""
    _the_streams_rows_are_the_materializers(run, pull_threshold, replay)
