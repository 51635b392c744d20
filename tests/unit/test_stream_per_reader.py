"""The stream's path through the per-reader stage (spark_jobs/stream/per_reader.py), without Spark:
the author keys stepped by the operator's ``run_key``, their ``per_reader`` rows turned into messages
as the sink does, and the stage run by the driver's :class:`StreamStage` with its inputs in a
batch-versioned store. The rows it writes must be the in-memory Materializer's, batch after batch,
also when a batch runs again (a replayed micro-batch) and when a new driver restores the stage.

The tables key a row by tweet id and position, not by author (a tweet id names one tweet: the
``tweets`` table's key), while the core's histories reuse tweet ids across authors to provoke wrong
authors in reposts; the histories here make every tweet id its author's (:func:`_own_ids`), and a
repost naming the wrong author still names another author's id, which joins nothing."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    RepostChange,
    TweetDelete,
    TweetUpsert,
    event_to_json,
    join_keys,
    parse_event,
)
from feed_service.core.view import Materializer
from feed_service.errors import InvalidEvent
from feed_service.settings import Settings
from feed_service.store.memory import MemoryStore
from feed_service.store.stage_inputs import MemoryStageInputs
from spark_jobs.envelope import EVENT_COLUMNS
from spark_jobs.output_rows import OUTPUT_COLUMNS, writes_of
from spark_jobs.stream.per_reader import PerReaderOutputs, StreamStage, state_stage
from spark_jobs.timeline_join import JoinConfig, run_key
from tests.unit.test_reposts_replies_properties import SETTINGS, Run, runs

TYPES = {TweetUpsert: "tweet", TweetDelete: "tweet", FollowChange: "follow", BlockChange: "block",
         MuteChange: "mute", RepostChange: "repost", ProfileVersion: "profile"}


class Routed:
    """A routed row as the Row API hands it over: the event columns as attributes."""

    def __init__(self, event: Event, key: str) -> None:
        for name, _ in EVENT_COLUMNS:
            setattr(self, name, getattr(event, name, None))
        self.type = TYPES[type(event)]
        self.op = getattr(event, "op", "delete" if type(event) is TweetDelete else "upsert")
        self.key = key


class Fakes:
    """One store and one store of the stage's inputs, reached by module-level functions (as
    :class:`PerReaderOutputs` requires)."""

    store = MemoryStore()
    inputs = MemoryStageInputs()
    published: list[Any] = []


def _writer(settings: Settings) -> MemoryStore:
    return Fakes.store


def _inputs(settings: Settings) -> MemoryStageInputs:
    return Fakes.inputs


def _publish(settings: Settings, changes: Any) -> int:
    Fakes.published.extend(changes)
    return len(changes)


OUTPUTS = PerReaderOutputs(_writer, _inputs, _publish)


def _own_ids(run: Run) -> Run:
    """``run`` with every tweet id prefixed by the author it names (garbage left as it is)."""
    def line(raw: str) -> str:
        try:
            obj = json.loads(raw)
        except ValueError:
            return raw
        if isinstance(obj, dict) and obj.get("type") in ("tweet", "repost") and isinstance(obj.get("tweet_id"), str):
            obj["tweet_id"] = f"{obj.get('author_id')}:{obj['tweet_id']}"
            if isinstance(obj.get("in_reply_to_tweet_id"), str):
                obj["in_reply_to_tweet_id"] = f"{obj.get('in_reply_to_author_id')}:{obj['in_reply_to_tweet_id']}"
            return json.dumps(obj)
        return raw
    return Run(run.history, [[line(r) for r in batch] for batch in run.batches], run.garbage)


def _events(batch: list[str]) -> list[Event]:
    out = []
    for line in batch:
        try:
            out.append(parse_event(line))
        except InvalidEvent:
            pass
    return out


def run_stream(run: Run, *, inbox_cap: int, pull_threshold: int, replay: random.Random | None = None,
               pull_reposters: bool = False) -> None:
    """The operator (``run_key`` per join key), then the driver's per-reader stage, batch by batch;
    with ``replay``, some batches run twice, as a failed micro-batch would, and some by a new driver."""
    config = JoinConfig(inbox_cap=inbox_cap, pull_threshold=pull_threshold, clock_start=1000)
    settings = Settings(pull_threshold=pull_threshold, pull_reposters=pull_reposters)
    cores: dict[str, tuple[bytes | None, bytes | None]] = {}
    stage = StreamStage(OUTPUTS)
    for batch_id, batch in enumerate(run.batches):
        groups: dict[str, list[Routed]] = {}
        for event in _events(batch):
            for key in join_keys(event):
                groups.setdefault(key, []).append(Routed(event, key))
        rows: list[tuple] = []
        for key in sorted(groups):
            core, edges = cores.get(key, (None, None))
            done, out = run_key(core, lambda: edges, groups[key], config, key=key)
            if done is not None and done.core is not None:
                cores[key] = (done.core, None if done.clear_edges else (done.edges if done.edges is not None else edges))
            rows += out
        messages = writes_of([dict(zip(OUTPUT_COLUMNS, r)) for r in rows]).messages
        if not messages:
            continue
        messages = [m for _, _, m in messages]
        if replay is not None and replay.random() < 0.3:  # a first attempt whose batch then fails
            stage.run(settings, batch_id, config.clock_start, messages)
        if replay is not None and replay.random() < 0.2:  # a new driver restores the stage
            stage = StreamStage(OUTPUTS)
        stage.run(settings, batch_id, config.clock_start, messages)


def _reset() -> None:
    Fakes.store = MemoryStore()
    Fakes.inputs = MemoryStageInputs()
    Fakes.published = []


def _rows(table: dict[str, dict]) -> dict[str, list]:
    return {k: sorted(v.values()) for k, v in table.items() if v}


@SETTINGS
@given(run=runs(), pull_threshold=st.sampled_from([1, 2, 1000]), replay=st.randoms(use_true_random=False))
def test_the_streams_per_reader_rows_are_the_materializers(run: Run, pull_threshold: int,
                                                           replay: random.Random) -> None:
    _reset()
    run = _own_ids(run)
    run_stream(run, inbox_cap=100, pull_threshold=pull_threshold, replay=replay)
    engine = Materializer(inbox_cap=100, pull_threshold=pull_threshold)
    for batch in run.batches:
        engine.process_batch(batch)
    assert _rows(Fakes.store.extras) == _rows(engine.view.extras)
    assert _rows(Fakes.store.user_reposts) == _rows(engine.view.own_reposts)
    assert {k: v for k, v in Fakes.store.visible.items() if v} == {k: v for k, v in engine.view.visible.items() if v}


def test_a_reply_to_an_unseen_parent_is_written_once_the_parent_is_followed() -> None:
    _reset()
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


def test_states_are_kept_per_checkpoint() -> None:
    assert state_stage(1000) != state_stage(2000)
