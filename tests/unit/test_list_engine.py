"""The lists' engine against the definition (docs/lists.md#in-the-engine): the list stage's edges fed
back to the members' keys, and the per-reader stage deciding a list reader's replies and reposts by
the list's policy and its owner's hides, held to ``reference_list_entries`` over random list
histories (:mod:`tests.support.list_runs`), with members and reposters pushed and pulled (merged at
read by the list's rule)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from feed_service.core.list_readers import list_of, list_reader
from feed_service.core.reference import reference_list_entries, reference_lists, reference_tables, reference_timelines
from feed_service.core.view import Materializer
from feed_service.workload.generator import generate
from tests.support.list_runs import list_runs
from tests.support.repost_runs import SETTINGS, Run


def _entries(engine: Materializer, list_id: str) -> list[tuple]:
    return [(e.tweet_id, e.author_id, e.at, e.reposted_by) for e in engine.view.entries(list_reader(list_id))]


_MODES = st.sampled_from([(1000, False), (1, False), (2, False), (1, True), (2, True)])
"""(pull threshold, pull reposters): members and reposters crossing between push and pull as
readers, lists' readers among them, come and go."""


@SETTINGS
@given(run=list_runs(), mode=_MODES, encode_states=st.booleans())
def test_list_timelines_equal_the_reference_below_the_cap(run: Run, mode: tuple[int, bool], encode_states: bool) -> None:
    engine = Materializer(inbox_cap=100, pull_threshold=mode[0], pull_reposters=mode[1], encode_states=encode_states)
    for batch in run.batches:
        engine.process_batch(batch)
    want = reference_list_entries(reference_tables(run.history), inbox_cap=100)
    for list_id, entries in want.items():
        assert _entries(engine, list_id) == [(e.tweet_id, e.author_id, e.at, e.reposted_by) for e in entries], list_id


@SETTINGS
@given(run=list_runs(), mode=_MODES, encode_states=st.booleans())
def test_home_timelines_with_exclusive_lists_equal_the_reference_below_the_cap(run: Run, mode: tuple[int, bool],
                                                                                encode_states: bool) -> None:
    engine = Materializer(inbox_cap=100, pull_threshold=mode[0], pull_reposters=mode[1], encode_states=encode_states)
    for batch in run.batches:
        engine.process_batch(batch)
    home = {reader: rows for reader, rows in engine.view.snapshot().items() if list_of(reader) is None}
    assert home == reference_timelines(run.history, inbox_cap=100)
    assert engine.rejected == run.garbage


def test_a_workload_with_lists_exclusive_lists_and_pull_reposters_equals_the_reference() -> None:
    """The generator's lists (owners, members by popularity, exclusive flips, deletes) over a follow
    graph with pull authors and pull reposters: a reposter's repost of an exclusive member's tweet is
    decided at read with the reader's excluded sources (``ExcludedDelta``)."""
    events = list(generate(users=300, events=8000, seed=3, repost_share=0.1, reply_share=0.2, list_share=0.05,
                           follow_option_share=0.03))
    engine = Materializer(inbox_cap=800, pull_threshold=15, pull_reposters=True)
    for i in range(0, len(events), 500):
        engine.process_batch(events[i:i + 500])
    lists = reference_lists(events)
    assert sum(map(len, lists.values())) > 1000 and any(e.get("exclusive") for e in events)
    assert engine.view.list_snapshot() == lists
    assert engine.view.snapshot() == reference_timelines(events)
