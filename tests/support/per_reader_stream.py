"""The stream's path through the per-reader stage (spark_jobs/stream/per_reader.py) without Spark:
the author keys stepped by the operator's ``run_key``, their ``per_reader`` rows turned into messages
as the sink does, and the stage run by the driver's :class:`StreamStage`, its rows written to
:attr:`Fakes.store` and its inputs kept in :attr:`Fakes.inputs` (tests/unit/test_stream_per_reader.py,
test_pull_reposters_storage.py, test_backfill_per_reader.py; on Cassandra's tables:
tests/integration/test_per_reader_tables.py).

The tables key a row by tweet id and position, not by author, while the histories of
:mod:`tests.support.repost_runs` reuse tweet ids across authors: :func:`own_ids` makes every tweet id
its author's."""

from __future__ import annotations

import json
import random
from typing import Any

from feed_service.core.events import Event, join_keys, parse_event
from feed_service.errors import InvalidEvent
from feed_service.settings import Settings
from feed_service.store.memory import MemoryStore
from feed_service.store.stage_inputs import MemoryStageInputs
from spark_jobs.output_rows import OUTPUT_COLUMNS, writes_of
from spark_jobs.stream.per_reader import PerReaderOutputs, StreamStage
from spark_jobs.timeline_join import JoinConfig, run_key

from .repost_runs import Run
from .run_key_inputs import Routed


class Fakes:
    """One store and one store of the stage's inputs, reached by module-level functions (as
    :class:`PerReaderOutputs` requires), and the view changes the stage published. A test replaces
    ``store`` or ``inputs`` (with a Cassandra writer, an indexing store) after :func:`reset_fakes`."""

    store = MemoryStore()
    inputs = MemoryStageInputs()
    published: list[Any] = []
    edges: list[Any] = []
    """The list edges the stage published and the next batch has not read back yet."""


def _writer(settings: Settings) -> MemoryStore:
    return Fakes.store


def _inputs(settings: Settings) -> MemoryStageInputs:
    return Fakes.inputs


def _publish(settings: Settings, changes: Any) -> int:
    Fakes.published.extend(changes)
    return len(changes)


def _publish_edges(settings: Settings, edges: Any) -> int:
    Fakes.edges.extend(edges)
    return len(edges)


#: The stage's outputs: :class:`Fakes`.
OUTPUTS = PerReaderOutputs(_writer, _inputs, _publish, _publish_edges)


def reset_fakes() -> None:
    """A new empty :attr:`Fakes.store` and :attr:`Fakes.inputs`, nothing published."""
    Fakes.store = MemoryStore()
    Fakes.inputs = MemoryStageInputs()
    Fakes.published = []
    Fakes.edges = []


def own_ids(run: Run) -> Run:
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
    with ``replay``, some batches run twice, as a failed micro-batch would, and some by a new driver.
    The list edges a batch published are read back by the next one, as the stream reads its own
    topic; batches of them alone follow the run's until none is left."""
    config = JoinConfig(inbox_cap=inbox_cap, pull_threshold=pull_threshold, clock_start=1000)
    settings = Settings(pull_threshold=pull_threshold, pull_reposters=pull_reposters)
    cores: dict[str, tuple[bytes | None, bytes | None]] = {}
    stage = StreamStage(OUTPUTS)
    batches = iter(run.batches)
    batch_id = -1
    while True:
        batch = next(batches, None)
        if batch is None and not Fakes.edges:
            break
        batch_id += 1
        read_back, Fakes.edges = Fakes.edges, []
        groups: dict[str, list[Routed]] = {}
        for event in [*read_back, *_events(batch or [])]:
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
            Fakes.edges = []  # its published edges: the same again below (a compacted topic keeps one)
        if replay is not None and replay.random() < 0.2:  # a new driver restores the stage
            stage = StreamStage(OUTPUTS)
        stage.run(settings, batch_id, config.clock_start, messages)


def nonempty_rows(table: dict[str, dict]) -> dict[str, list]:
    """Each owner's rows of ``table`` sorted, owners without rows left out: a store's table and a
    view's compare equal."""
    return {k: sorted(v.values()) for k, v in table.items() if v}
