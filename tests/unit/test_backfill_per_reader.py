"""The backfill's reposts and replies without Spark: the functions it runs (each author key's step with
its messages, the per-reader stage over every message as one batch, the rows they turn into), written
to a :class:`MemoryStore` at ``backfill_ts``, give the reference's timelines; and the stream
bootstrapped from them (author states as the operator's initial state, the stage's inputs seeded at
the bootstrap batch id), fed more batches, still does."""

from __future__ import annotations

import json
import pickle
import random

import pandas as pd
import pytest

from feed_service.core.events import Event, join_keys, parse_event
from feed_service.core.reference import reference_entries, reference_tables, reference_user_timelines
from feed_service.core.rows import Entry, PullFollowWrite
from feed_service.core.state import decode_state, visible_followers
from feed_service.core.stored_step import stored_parts
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from spark_jobs.backfill.join import TIMELINE_COLUMNS
from spark_jobs.backfill.per_reader import ENTRY_COLUMNS, stage_rows, step_stage
from spark_jobs.backfill.states import key_state, state_inbox_rows
from spark_jobs.backfill.write import (
    author_timeline_writes,
    extras_writes,
    hidden_writes,
    pull_reposter_writes,
    timeline_writes,
    user_repost_writes,
    visible_writes,
)
from spark_jobs.bootstrap import BOOTSTRAP_BATCH_ID
from spark_jobs.output_rows import OUTPUT_COLUMNS, writes_of
from spark_jobs.stream.per_reader import StreamStage, state_stage
from feed_service.store.stage_inputs import MemoryStageInputs
from spark_jobs.timeline_join import JoinConfig, run_key
from tests.unit.test_backfill_units import _frame as _event_frame, _row, _winners
from tests.unit.test_stream_per_reader import OUTPUTS, Fakes, Routed, _reset

TS = 1_700_000_000_000_000
ENTRY_NAMES = [name for name, _ in ENTRY_COLUMNS]


def _history(seed: int, events: int = 900) -> list[Event]:
    return [parse_event(e) for e in generate(users=30, events=events, seed=seed, mean_following=6,
                                             repost_share=0.15, reply_share=0.3, hide_share=0.05)]


def _frame(rows: list[tuple], columns: list[str]) -> pd.DataFrame:
    """Rows as the write stage's frame."""
    return pd.DataFrame(rows, columns=columns, dtype=object)


def backfill(events: list[Event], *, inbox_cap: int, pull_threshold: int,
             pull_reposters: bool = False) -> tuple[dict[str, bytes], dict]:
    """The backfill's stages in this process, its rows written to ``Fakes.store`` at :data:`TS`;
    returns the author states and the per-reader stage's inputs (``[(identity, value)]``)."""
    by_key: dict[str, list] = {}
    for ev in _winners(events):
        for key in join_keys(ev):
            by_key.setdefault(key, []).append(ev)
    states: dict[str, bytes] = {}
    messages: list = []
    for key, evs in by_key.items():
        frame = _event_frame([_row(ev, key) for ev in evs])
        done = key_state(frame, inbox_cap=inbox_cap, pull_threshold=pull_threshold, backfill_ts=TS)
        states[done.key] = done.state
        messages += [pickle.loads(blob) for _, _, blob in done.messages]
    rows = stage_rows(step_stage(messages, TS, pull_threshold if pull_reposters else None))

    store = Fakes.store
    inbox = pd.DataFrame([r for blob in states.values() for r in state_inbox_rows(blob)], columns=list(TIMELINE_COLUMNS))
    retained = [(tid, s.key, c[1], c[0], c[2], c[3], *((c[4], c[5]) if len(c) > 4 else (None, None)))
                for s in map(decode_state, states.values()) for tid, c in s.tweets.items()]
    pulls = [PullFollowWrite("insert", f, s.key, TS) for s in map(decode_state, states.values()) if s.pull
             for f in visible_followers(s)]
    store.write(timeline=timeline_writes(inbox, TS),
                author_timeline=author_timeline_writes(pd.DataFrame(retained, columns=list(TIMELINE_COLUMNS[1:])), TS),
                pull_follows=pulls,
                extras=extras_writes(_frame(rows.extras, ["timeline_id", *ENTRY_NAMES]), TS),
                user_reposts=user_repost_writes(_frame(rows.user_reposts, ENTRY_NAMES), TS),
                visible=visible_writes(_frame(rows.visible, ["reader_id", "user_id"]), TS),
                hidden=hidden_writes(_frame(rows.hidden, ["reader_id", "user_id"]), TS),
                pull_reposters=pull_reposter_writes(_frame(rows.pull_reposters, ["reader_id", "reposter_id"]), TS))
    return states, [(tuple(json.loads(identity)), pickle.loads(value)) for identity, value in rows.inputs]


def stream(batches: list[list[Event]], states: dict[str, bytes], *, inbox_cap: int, pull_threshold: int,
           clock_start: int, replay: random.Random, pull_reposters: bool = False) -> None:
    """The stream's operator (``run_key``, the author states seeded with ``states``) and sink (rows
    to ``Fakes.store``, then the per-reader stage), batch by batch; some batches run twice, as a
    failed micro-batch's would."""
    config = JoinConfig(inbox_cap=inbox_cap, pull_threshold=pull_threshold, clock_start=clock_start)
    # as the operator's initial-state handler seeds a new checkpoint
    cores: dict[str, tuple[bytes | None, bytes | None]] = {k: stored_parts(blob) for k, blob in states.items()}
    settings = Settings(pull_threshold=pull_threshold, pull_reposters=pull_reposters)
    stage = StreamStage(OUTPUTS)
    for batch_id, batch in enumerate(batches):
        groups: dict[str, list[Routed]] = {}
        for event in batch:
            for key in join_keys(event):
                groups.setdefault(key, []).append(Routed(event, key))
        rows: list[tuple] = []
        for key in sorted(groups):
            core, edges = cores.get(key, (None, None))
            done, out = run_key(core, lambda edges=edges: edges, groups[key], config, key=key)
            if done is not None and done.core is not None:
                cores[key] = (done.core, None if done.clear_edges else (done.edges if done.edges is not None else edges))
            rows += out
        writes = writes_of([dict(zip(OUTPUT_COLUMNS, r)) for r in rows])
        Fakes.store.write(timeline_fanout=writes.timeline, author_timeline=writes.author_timeline,
                          pull_follows=writes.pull_follows)
        if writes.messages:
            messages = [m for _, _, m in writes.messages]
            if replay.random() < 0.3:
                stage.run(settings, batch_id, clock_start, messages)
            stage.run(settings, batch_id, clock_start, messages)


def _sorted(entries: list[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda e: (e.at, e.tweet_id), reverse=True)


def read_home(inbox_cap: int) -> dict[str, list[Entry]]:
    """Every home timeline as the read service merges it: the inbox, the reader's extras, and its
    pull authors' tweets that are plain or reply to the reader or to someone it sees."""
    store = Fakes.store
    out: dict[str, list[Entry]] = {}
    for reader in {*store.timelines, *store.extras, *store.follows_pull}:
        entries = [*store.timelines.get(reader, {}).values(), *store.extras.get(reader, {}).values()]
        sees = store.visible.get(reader, set())
        for author in store.follows_pull.get(reader, ()):
            entries += [e for e in store.author_timelines.get(author, {}).values()
                        if e.in_reply_to_author_id in (None, author, reader) or e.in_reply_to_author_id in sees]
        if entries:
            out[reader] = _sorted(entries)[:inbox_cap]
    return out


def read_users(inbox_cap: int) -> dict[str, list[Entry]]:
    store = Fakes.store
    users = {*store.author_timelines, *store.user_reposts}
    return {u: _sorted([*store.author_timelines.get(u, {}).values(), *store.user_reposts.get(u, {}).values()])[:inbox_cap]
            for u in users}


def _reference(events: list[Event], inbox_cap: int) -> tuple[dict, dict]:
    tables = reference_tables(events)
    home = reference_entries(tables, inbox_cap=inbox_cap)
    assert home and all(len(v) < inbox_cap for v in home.values())  # below the cap: exact
    return home, reference_user_timelines(tables, inbox_cap=inbox_cap)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("pull_threshold", [1000, 10])
def test_backfill_then_bootstrapped_stream_equal_the_reference(seed: int, pull_threshold: int) -> None:
    _reset()
    cap = 500
    events = _history(seed)
    cut = len(events) * 2 // 3
    first, rest = events[:cut], events[cut:]
    states, per_reader = backfill(first, inbox_cap=cap, pull_threshold=pull_threshold)
    home, users = _reference(first, cap)
    got_home = read_home(cap)
    assert any(e.reposted_by for v in got_home.values() for e in v)
    assert any(e.in_reply_to_author_id not in (None, e.author_id) for v in got_home.values() for e in v)
    assert got_home == home
    assert read_users(cap) == users
    # every key's clock is backfill_ts, whether it wrote or not
    assert {decode_state(b).clock for b in states.values()} == {TS}
    assert dict(per_reader)[("clock",)] == TS

    # The stream bootstrapped from it: the stage's inputs under its stage at the bootstrap batch id.
    Fakes.inputs.save(state_stage(TS), [(identity, value, None) for identity, value in per_reader], BOOTSTRAP_BATCH_ID)
    rnd = random.Random(seed)
    cuts = sorted(rnd.sample(range(1, len(rest)), 8))
    batches = [rest[a:b] for a, b in zip([0, *cuts], [*cuts, len(rest)])]
    stream(batches, states, inbox_cap=cap, pull_threshold=pull_threshold, clock_start=TS, replay=rnd)
    home, users = _reference(events, cap)
    assert read_home(cap) == home
    assert read_users(cap) == users


class _FakeRead:
    """``spark.read.schema(...).parquet(path).rdd.mapPartitions(fn).collect()`` over fixed partitions."""

    def __init__(self, partitions: list[list[dict]]) -> None:
        self.partitions = partitions
        self.read, self.rdd = self, self

    def schema(self, _: str) -> "_FakeRead":
        return self

    def parquet(self, _: str) -> "_FakeRead":
        return self

    def mapPartitions(self, fn):  # noqa: N802 - Spark's name
        self.done = [x for part in self.partitions for x in fn(iter(part))]
        return self

    def collect(self) -> list:
        return self.done


def test_seeding_saves_the_inputs_under_the_checkpoints_stage_below_its_first_batch(monkeypatch) -> None:
    import spark_jobs.stream.continuation as continuation

    monkeypatch.setattr(continuation, "SEED_CHUNK", 2)
    store = MemoryStageInputs()
    rows = [{"identity": json.dumps(["rel", f"u{i}", "bob"]), "value": pickle.dumps((i, True, False))}
            for i in range(5)]
    fake = _FakeRead([rows[:3], rows[3:], []])
    saved = continuation.seed_per_reader_inputs(fake, Settings(), "unused", 77, inputs_for=lambda settings: store)
    assert saved == 5
    assert (("rel", "u4", "bob"), (4, True, False)) in store.load(state_stage(77), 0)
    # a batch 0 that saved an input, then failed: its replay, and a new seed, start from the seed again
    store.save(state_stage(77), [(("rel", "u4", "bob"), (9, False, False), (4, True, False))], 0)
    assert (("rel", "u4", "bob"), (4, True, False)) in store.load(state_stage(77), 0)
    continuation.seed_per_reader_inputs(fake, Settings(), "unused", 77, inputs_for=lambda settings: store)
    assert (("rel", "u4", "bob"), (4, True, False)) in store.load(state_stage(77), 0)
    assert store.rows[(state_stage(77), '["rel","u4","bob"]')][0] == BOOTSTRAP_BATCH_ID
