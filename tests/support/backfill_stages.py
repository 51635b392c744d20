"""The backfill's stages in this process and the stream it bootstraps, without Spark: the list stage
over the lists' winners, each author key's step over its winners and the list stage's edges, the
per-reader stage over every message and the lists' facts as one batch, the rows they write to
:attr:`tests.support.per_reader_stream.Fakes.store` at :data:`TS`; then the operator seeded with the
author states and both driver stages, batch by batch, the list edges read back by the next batch
(tests/unit/test_backfill_per_reader.py, test_backfill_lists.py, test_pull_reposters_storage.py)."""

from __future__ import annotations

import json
import pickle
import random
from typing import NamedTuple

import pandas as pd

from feed_service.core.events import Event, join_keys, parse_event
from feed_service.core.rows import PullFollowWrite
from feed_service.core.state import decode_state, visible_followers
from feed_service.core.stored_step import stored_parts
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from feed_service.core.per_reader.list_stage import ListStageResult
from spark_jobs.backfill.join import TIMELINE_COLUMNS
from spark_jobs.backfill.lists import step_list_stage
from spark_jobs.backfill.per_reader import ENTRY_COLUMNS, StageRows, stage_rows, step_stage
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
from spark_jobs.output_rows import OUTPUT_COLUMNS, writes_of
from spark_jobs.stream.per_reader import StreamStage
from spark_jobs.timeline_join import JoinConfig, run_key

from .backfill_frames import event_frame, event_row, hidden_pairs, list_winners, winners
from .per_reader_stream import OUTPUTS, Fakes
from .run_key_inputs import Routed

#: The backfill's timestamp (``backfill_ts``): every row it writes and every key's clock.
TS = 1_700_000_000_000_000
ENTRY_NAMES = [name for name, _ in ENTRY_COLUMNS]


def generated_history(seed: int, events: int = 900, list_share: float = 0.0) -> list[Event]:
    """The workload generator's ``events`` changes over 30 users (``seed``), with reposts, replies,
    blocks and mutes (and a share ``list_share`` of list changes), parsed."""
    return [parse_event(e) for e in generate(users=30, events=events, seed=seed, mean_following=6,
                                             repost_share=0.15, reply_share=0.3, hide_share=0.05,
                                             list_share=list_share)]


def _frame(rows: list[tuple], columns: list[str]) -> pd.DataFrame:
    """Rows as the write stage's frame."""
    return pd.DataFrame(rows, columns=columns, dtype=object)


class Stages(NamedTuple):
    """What the backfill's stages computed (:func:`backfill_stages`)."""

    states: dict[str, bytes]
    """key -> its encoded author state."""
    rows: StageRows
    """The per-reader stage's rows and inputs."""
    lists: ListStageResult
    """The list stage's step (its edges, facts and inputs)."""


def backfill_stages(events: list[Event], *, inbox_cap: int, pull_threshold: int,
                    pull_reposters: bool = False) -> Stages:
    """The backfill's stages in this process (the job's order: lists, states, per_reader), nothing written."""
    keyed, list_changes = list_winners(winners(events))
    lists = step_list_stage(list_changes, hidden_pairs(keyed), TS)
    by_key: dict[str, list] = {}
    for ev in [*keyed, *lists.follows, *lists.exclusions]:
        for key in join_keys(ev):
            by_key.setdefault(key, []).append(ev)
    states: dict[str, bytes] = {}
    messages: list = []
    for key, evs in by_key.items():
        frame = event_frame([event_row(ev, key) for ev in evs])
        done = key_state(frame, inbox_cap=inbox_cap, pull_threshold=pull_threshold, backfill_ts=TS)
        states[done.key] = done.state
        messages += [pickle.loads(blob) for _, _, blob in done.messages]
    rows = stage_rows(step_stage(messages, TS, pull_threshold if pull_reposters else None, lists.facts))
    return Stages(states, rows, lists)


def backfill(events: list[Event], *, inbox_cap: int, pull_threshold: int,
             pull_reposters: bool = False) -> tuple[dict[str, bytes], list, list]:
    """The backfill's stages in this process, its rows written to ``Fakes.store`` at :data:`TS`
    (those of the lists' tables aside: the store takes them with the lists' stores); returns the
    author states and the per-reader and list stages' inputs (``[(identity, value)]``)."""
    states, rows, lists = backfill_stages(events, inbox_cap=inbox_cap, pull_threshold=pull_threshold,
                                      pull_reposters=pull_reposters)

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
    return (states, [(tuple(json.loads(identity)), pickle.loads(value)) for identity, value in rows.inputs],
            [(identity, value) for identity, value, _ in lists.inputs if value is not None])


def stream_from_states(batches: list[list[Event]], states: dict[str, bytes], *, inbox_cap: int, pull_threshold: int,
           clock_start: int, replay: random.Random, pull_reposters: bool = False) -> None:
    """The stream's operator (``run_key``, the author states seeded with ``states``, as a backfill
    bootstraps it) and sink (rows to ``Fakes.store``, then the driver's stages), batch by batch; some
    batches run twice, as a failed micro-batch's would. The list edges a batch published are read back
    by the next one; batches of them alone follow until none is left."""
    config = JoinConfig(inbox_cap=inbox_cap, pull_threshold=pull_threshold, clock_start=clock_start)
    # as the operator's initial-state handler seeds a new checkpoint
    cores: dict[str, tuple[bytes | None, bytes | None]] = {k: stored_parts(blob) for k, blob in states.items()}
    settings = Settings(pull_threshold=pull_threshold, pull_reposters=pull_reposters)
    stage = StreamStage(OUTPUTS)
    pending = iter(batches)
    batch_id = -1
    while True:
        batch = next(pending, None)
        if batch is None and not Fakes.edges:
            break
        batch_id += 1
        read_back, Fakes.edges = Fakes.edges, []
        groups: dict[str, list[Routed]] = {}
        for event in [*read_back, *(batch or [])]:
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
                Fakes.edges = []  # its published edges: the same again below (a compacted topic keeps one)
            stage.run(settings, batch_id, clock_start, messages)
