"""The backfill's reposts and replies without Spark: the functions it runs (each author key's step with
its messages, the per-reader stage over every message as one batch, the rows they turn into), written
to a :class:`MemoryStore` at ``backfill_ts``, give the reference's timelines; and the stream
bootstrapped from them (author states as the operator's initial state, the stage's inputs seeded at
the bootstrap batch id), fed more batches, still does. The stages: :mod:`tests.support.backfill_stages`."""

from __future__ import annotations

import json
import pickle
import random

import pytest

from feed_service.core.events import Event
from feed_service.core.reference import reference_entries, reference_tables, reference_user_timelines
from feed_service.core.rows import Entry
from feed_service.core.state import decode_state
from feed_service.settings import Settings
from feed_service.store.stage_inputs import MemoryStageInputs
from spark_jobs.bootstrap import BOOTSTRAP_BATCH_ID
from spark_jobs.stream.per_reader import state_stage
from tests.support.backfill_stages import TS, backfill, generated_history, stream_from_states
from tests.support.per_reader_stream import Fakes, reset_fakes


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
    reset_fakes()
    cap = 500
    events = generated_history(seed)
    cut = len(events) * 2 // 3
    first, rest = events[:cut], events[cut:]
    states, per_reader, _ = backfill(first, inbox_cap=cap, pull_threshold=pull_threshold)
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
    stream_from_states(batches, states, inbox_cap=cap, pull_threshold=pull_threshold, clock_start=TS, replay=rnd)
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
