"""The backfill's lists without Spark (docs/backfill.md, "Lists"): the list stage over the winners,
its edges folded by the members' keys with their other winners, the per-reader stage over every
message and the lists' facts as one batch (:func:`tests.support.backfill_stages.backfill_stages`),
give the in-memory Materializer's rows table for table over random list histories, and the
reference's derived edges; the stream bootstrapped from it (the list stage restored from its
inputs) continues to the reference. The lists' tables' frames are the stages' sets."""

from __future__ import annotations

import random
from typing import Any

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from feed_service.core.events import Event, ListChange, ListMemberChange, parse_event
from feed_service.core.list_readers import list_of, list_reader
from feed_service.core.per_reader.list_stage import ListFact
from feed_service.core.per_reader.messages import ExcludedDelta
from feed_service.core.reference import reference_entries, reference_list_entries, reference_tables
from feed_service.core.rows import Entry
from feed_service.core.rules import list_admits
from feed_service.core.state import decode_state, visible_followers
from feed_service.core.view import Materializer
from feed_service.errors import InvalidEvent
from spark_jobs.backfill.lists import fact_rows, list_changes, step_list_stage
from spark_jobs.backfill.states import state_inbox_rows
from spark_jobs.backfill.write import LIST_TABLES, excluded_writes, list_fact_writes
from spark_jobs.bootstrap import BOOTSTRAP_BATCH_ID
from spark_jobs.stream.per_reader import list_stage_name, state_stage
from tests.support.backfill_frames import hidden_pairs, list_winners, winners
from tests.support.backfill_stages import TS, backfill, backfill_stages, generated_history, stream_from_states
from tests.support.list_runs import list_runs
from tests.support.per_reader_stream import Fakes, own_ids, reset_fakes
from tests.support.repost_runs import Run
from tests.support.sizes import examples


def _valid(run: Run) -> list[Event]:
    out = []
    for batch in run.batches:
        for line in batch:
            try:
                out.append(parse_event(line))
            except InvalidEvent:
                pass
    return out


def _entry_rows(table: dict[str, dict[Any, Entry]]) -> set[tuple]:
    return {(reader, *entry) for reader, rows in table.items() for entry in rows.values()}


def _pairs(table: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(reader, user) for reader, users in table.items() for user in users}


_MODES = st.sampled_from([1000, 1, 2])
"""Pull thresholds: members, lists' readers among their followers, crossing between push and pull."""


@settings(max_examples=examples(60), deadline=None)
@given(run=list_runs(), pull_threshold=_MODES)
def test_the_backfills_stages_over_the_winners_are_the_materializers_rows(run: Run, pull_threshold: int) -> None:
    run = own_ids(run)
    events = _valid(run)
    done = backfill_stages(events, inbox_cap=100, pull_threshold=pull_threshold)
    engine = Materializer(inbox_cap=100, pull_threshold=pull_threshold)
    for batch in run.batches:
        engine.process_batch(batch)
    view = engine.view

    states = [decode_state(blob) for blob in done.states.values()]
    inbox = {(r[0], *r[1:]) for blob in done.states.values() for r in state_inbox_rows(blob)}
    assert inbox == {row[:9] for row in _entry_rows(view.timelines)}
    assert {(f, s.key) for s in states if s.pull for f in visible_followers(s)} == {
        (f, a) for f, authors in view.pull_follows.items() for a in authors}
    rows = done.rows
    assert set(rows.extras) == _entry_rows(view.extras)
    assert set(rows.user_reposts) == {row[1:] for row in _entry_rows(view.own_reposts)}
    assert set(rows.visible) == _pairs(view.visible)
    assert set(rows.hidden) == _pairs(view.hidden)
    assert set(rows.excluded) == _pairs(view.excluded)
    assert {list_reader(lid): (owner, policy) for lid, owner, _, policy, _ in fact_rows(done.lists)} == {
        reader: (rule.owner, rule.policy) for reader, rule in view.list_rules.items()}

    # The derived edges from an empty stage are the ones in force: the reference's ListSees, Excluded.
    tables = reference_tables(events)
    live, hidden = tables.live_lists(), hidden_pairs(winners(events))
    assert {(f.reader_id, f.member_id, f.op) for f in done.lists.follows} == {
        (list_reader(lid), m, "follow") for lid, members in tables.list_members().items() for m in members
        if (live[lid].owner_id, m) not in hidden}
    assert {(e.owner_id, e.member_id, e.op) for e in done.lists.exclusions} == {
        (owner, m, "exclude") for owner, members in tables.excluded().items() for m in members}


def _sorted(entries: list[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda e: (e.at, e.tweet_id), reverse=True)


def _read(reader: str, inbox_cap: int, admits: Any) -> list[Entry]:
    """A reader's timeline as the reads merge it from ``Fakes.store``: inbox, extras, and its pull
    authors' tweets that ``admits(entry)``."""
    store = Fakes.store
    entries = [*store.timelines.get(reader, {}).values(), *store.extras.get(reader, {}).values()]
    for author in store.follows_pull.get(reader, ()):
        entries += [e for e in store.author_timelines.get(author, {}).values() if admits(e)]
    return _sorted(entries)[:inbox_cap]


def _reads(events: list[Event], inbox_cap: int) -> tuple[dict[str, list[Entry]], dict[str, list[Entry]]]:
    """Every home and list timeline as the reads merge them; a list's owner and policy are the live
    list's (the statics of its reader's partition, which the read side reads)."""
    store = Fakes.store
    live = reference_tables(events).live_lists()
    home: dict[str, list[Entry]] = {}
    lists: dict[str, list[Entry]] = {}
    for reader in {*store.timelines, *store.extras, *store.follows_pull}:
        sees = store.visible.get(reader, set())
        lid = list_of(reader)
        if lid is None:
            got = _read(reader, inbox_cap, lambda e: e.in_reply_to_author_id in (None, e.author_id, reader)
                        or e.in_reply_to_author_id in sees)
            if got:
                home[reader] = got
        elif lid in live:
            owner, policy = live[lid].owner_id, live[lid].replies_policy
            got = _read(reader, inbox_cap, lambda e: list_admits(e.author_id, e.in_reply_to_author_id, owner, policy,
                                                                  sees, store.visible.get(owner, set())))
            if got:
                lists[lid] = got
    return home, lists


def _reference(events: list[Event], inbox_cap: int) -> tuple[dict[str, list[Entry]], dict[str, list[Entry]]]:
    tables = reference_tables(events)
    home = reference_entries(tables, inbox_cap=inbox_cap)
    lists = {lid: entries for lid, entries in reference_list_entries(tables, inbox_cap=inbox_cap).items() if entries}
    assert all(len(v) < inbox_cap for v in [*home.values(), *lists.values()])  # below the cap: exact
    return home, lists


def test_a_stream_bootstrapped_from_the_backfill_continues_lists_to_the_reference() -> None:
    """Exclusive lists bite in the backfilled homes; the stream from the backfill's states and both
    stages' inputs (``stage@`` and ``lists@`` of its clock, at the bootstrap batch id) takes the rest of
    the history's list changes, edges read back by its next batches, to the reference."""
    reset_fakes()
    cap, threshold = 500, 10
    events = generated_history(4, events=1500, list_share=0.08)
    cut = len(events) * 2 // 3
    first, rest = events[:cut], events[cut:]
    assert any(isinstance(e, ListChange) and e.exclusive for e in first)
    assert any(isinstance(e, (ListChange, ListMemberChange)) for e in rest)
    states, per_reader, list_inputs = backfill(first, inbox_cap=cap, pull_threshold=threshold)
    home, lists = _reference(first, cap)
    assert reference_tables(first).excluded() and lists
    assert _reads(first, cap) == (home, lists)
    assert dict(list_inputs)[("clock",)] == TS

    Fakes.inputs.save(state_stage(TS), [(i, v, None) for i, v in per_reader], BOOTSTRAP_BATCH_ID)
    Fakes.inputs.save(list_stage_name(TS), [(i, v, None) for i, v in list_inputs], BOOTSTRAP_BATCH_ID)
    rnd = random.Random(4)
    cuts = sorted(rnd.sample(range(1, len(rest)), 8))
    batches = [rest[a:b] for a, b in zip([0, *cuts], [*cuts, len(rest)])]
    stream_from_states(batches, states, inbox_cap=cap, pull_threshold=threshold, clock_start=TS, replay=rnd)
    assert _reads(events, cap) == _reference(events, cap)


def test_the_lists_tables_frames_are_the_stages_sets() -> None:
    """``reader_excluded``: the per-reader stage's excluded pairs (a reader sees the member of its
    exclusive list); ``lists``: a row per live list, none for a deleted one; both at ``backfill_ts``
    as the writer's records, and behind the writer's arrival."""
    events = [parse_event(e) for e in (
        '{"type":"follow","op":"follow","follower_id":"own","followee_id":"bob","version":1}',
        '{"type":"follow","op":"follow","follower_id":"own","followee_id":"cat","version":1}',
        '{"type":"list","op":"create","list_id":"L1","owner_id":"own","version":2,"name":"x","exclusive":true}',
        '{"type":"list","op":"create","list_id":"L2","owner_id":"own","version":1,"name":"y",'
        '"replies_policy":"none"}',
        '{"type":"list","op":"create","list_id":"L3","owner_id":"own","version":1,"name":"z"}',
        '{"type":"list","op":"delete","list_id":"L3","owner_id":"own","version":2}',
        '{"type":"list_member","op":"add","list_id":"L1","member_id":"bob","version":1}',
        '{"type":"list_member","op":"add","list_id":"L1","member_id":"dan","version":1}',
        '{"type":"list_member","op":"add","list_id":"L2","member_id":"cat","version":1}',
        '{"type":"tweet","op":"upsert","tweet_id":"t1","author_id":"bob","version":1,"created_at":5,'
        '"text":"hi","profile_version":1}',
    )]
    done = backfill_stages(events, inbox_cap=10, pull_threshold=1000)
    assert done.rows.excluded == [("own", "bob")]  # dan is excluded too, but own does not see dan
    facts = fact_rows(done.lists)
    assert sorted(facts) == [("L1", "own", "x", "list", True), ("L2", "own", "y", "none", False)]
    frame = pd.DataFrame(facts, columns=["list_id", "owner_id", "name", "replies_policy", "exclusive"])
    assert sorted(list_fact_writes(frame, TS), key=lambda f: f.list_id) == [
        ListFact("L1", "own", "x", "list", True, TS), ListFact("L2", "own", "y", "none", False, TS)]
    excluded = pd.DataFrame(done.rows.excluded, columns=["reader_id", "user_id"])
    assert excluded_writes(excluded, TS) == [ExcludedDelta("insert", "own", "bob", TS)]
    assert set(LIST_TABLES) == {"reader_excluded", "lists"}
    # the list stage's input from the Spark rows of the winners: a delete's null options as defaults
    keyed, changes = list_winners(winners(events))
    rows = [{"list_id": c.list_id, "owner_id": c.owner_id, "version": c.version, "op": c.op,
             "name": c.name, "replies_policy": None if c.op == "delete" else c.replies_policy,
             "exclusive": None if c.op == "delete" else c.exclusive} for c in changes if isinstance(c, ListChange)]
    members = [{"list_id": c.list_id, "member_id": c.member_id, "version": c.version, "op": c.op}
               for c in changes if isinstance(c, ListMemberChange)]
    assert sorted(map(repr, list_changes(rows, members))) == sorted(map(repr, changes))
    assert step_list_stage(list_changes(rows, members), hidden_pairs(keyed), TS).facts == done.lists.facts
