"""The reposter and reader steps of a micro-batch, in the stream's sink (docs/reposts-and-replies.md).

The author keys' operator emits, next to its rows, the messages it owes the per-reader steps
(``per_reader`` rows, spark_jobs/output_rows.py). Once the batch's rows are written, the driver runs
the two steps on the executors, in the same micro-batch: the reposter step on the messages keyed by
reposter, then the reader step on the messages keyed by reader and the reposter step's candidates.

Their states live in Cassandra (``per_reader_state``), one blob per key, read before and written
after the key's step, **versioned by the micro-batch**: a key's row holds the state after batch
``batch_id`` and the state it was computed from. A batch that runs again (a failed micro-batch
replayed from the checkpoint, a retried task, a lost shuffle output recomputed) loads the state
from before that batch, so it computes the same states, candidates, rows and timestamps as its
first attempt, and every write is idempotent. Spark never starts batch ``b + 1`` before ``b`` has
committed, so no key ever needs an older state than that.

Why not Spark's own state store: a second and third stateful operator in the query would pass every
output row of the author operator through two more Python operators and their per-grouping-key
round trips (docs/state-buckets.md), and chaining stateful operators in update mode is not
supported; here only the batches that hold reposts, replies or relation changes pay, and only for
the keys they touch (one read and one write of a blob each, concurrently).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from feed_service.core.per_reader.codec import (
    decode_reader_state,
    decode_reposter_state,
    encode_reader_state,
    encode_reposter_state,
)
from feed_service.core.per_reader.messages import (
    READER_STAGE,
    REPOSTER_STAGE,
    AudienceDelta,
    ConditionalReply,
    Relation,
    RepostCandidate,
    RepostedTweet,
    RepostEdge,
)
from feed_service.core.per_reader.reader_step import ReaderState, reader_step
from feed_service.core.per_reader.reposter_step import ReposterState, reposter_step
from feed_service.core.per_reader.messages import PullReposterDelta
from feed_service.core.rows import AuthorTimelineWrite
from feed_service.core.view_changes import (
    ExtrasChange,
    HiddenChange,
    PullReposterChange,
    UserRepostChange,
    ViewChange,
    VisibleChange,
)
from feed_service.kafka.stream_publisher import publish_view_changes
from feed_service.security.roles import STREAM
from feed_service.settings import Settings
from feed_service.store.ports import ViewWriter, WriteCounts
from spark_jobs.cassandra_writers import states_for, writer_for

if TYPE_CHECKING:
    from pyspark import SparkContext

    from feed_service.store.per_reader_state import StepStates

Message = tuple[Any, "int | None"]
"""One of :mod:`feed_service.core.per_reader.messages`' records, with the Kafka timestamp (ms) of
the change that caused it (None: unknown): a step's rows carry the latest of its key's messages'."""


@dataclass(frozen=True, slots=True)
class PerReaderOutputs:
    """Where the steps read and write, production's by default (tests pass fakes); module-level
    functions only: it travels to the executors with the batch's functions."""

    writer_for: Callable[[Settings], ViewWriter] = writer_for
    states_for: Callable[[Settings], "StepStates"] = states_for
    publish_view_changes: Callable[[Settings, Sequence[ViewChange]], int] = publish_view_changes


@dataclass(frozen=True, slots=True)
class StageReport:
    """What one partition of a step did (summed on the driver)."""

    keys: int = 0
    """Keys stepped."""
    states_written: int = 0
    counts: WriteCounts = field(default_factory=WriteCounts)
    changes_published: int = 0
    seconds: float = 0.0
    sent: int = 0
    """Messages sent on to the next step (the reposter step's candidates)."""

    def __add__(self, other: "StageReport") -> "StageReport":
        return StageReport(self.keys + other.keys, self.states_written + other.states_written,
                           self.counts + other.counts, self.changes_published + other.changes_published,
                           self.seconds + other.seconds, self.sent + other.sent)


@dataclass(frozen=True, slots=True)
class PerReaderReport:
    """A batch's per-reader work: the reposter step, the reader step, and the messages between them."""

    reposters: StageReport = field(default_factory=StageReport)
    readers: StageReport = field(default_factory=StageReport)
    messages: int = 0
    candidates: int = 0


def state_stage(step: str, clock_start: int) -> str:
    """The ``stage`` under which a checkpoint keeps a step's states: the step and the checkpoint's
    first clock, which is unique to it. Batch ids start again at 0 in a new checkpoint, so a state
    versioned by a batch id of another checkpoint must never be read."""
    return f"{step}@{clock_start}"


def _grouped(items: Iterable[tuple[str, Message]]) -> dict[str, list[Message]]:
    groups: dict[str, list[Message]] = {}
    for key, message in items:
        groups.setdefault(key, []).append(message)
    return groups


def _source(messages: Sequence[Message]) -> int | None:
    return max((s for _, s in messages if s is not None), default=None)


def reposter_partition(settings: Settings, batch_id: int, clock_start: int, items: Iterable[tuple[str, Message]],
                       *, outputs: PerReaderOutputs = PerReaderOutputs()) -> Iterator[tuple]:
    """Step every reposter of the partition; yields ``("candidate", reader, RepostCandidate)`` for
    the reader step, then one ``("report", StageReport)``. Writes the reposters' own reposts
    (``user_reposts``), the readers who merge in a pull reposter (``home_timeline.pull_reposters``,
    only with ``settings.pull_reposters``), their view changes, and their states."""
    started = time.perf_counter()
    settings = settings.as_role(STREAM)
    groups = _grouped(items)
    states = outputs.states_for(settings)
    stage = state_stage(REPOSTER_STAGE, clock_start)
    stored = states.load(stage, groups, batch_id)
    rows: list[AuthorTimelineWrite] = []
    pull_readers: list[PullReposterDelta] = []
    changes: list[ViewChange] = []
    to_save: dict[str, tuple[bytes, bytes | None]] = {}
    candidates: list[tuple[str, Message]] = []
    for key in sorted(groups):
        source = _source(groups[key])
        messages = [m for m, _ in groups[key]]
        base = stored.get(key)
        state = decode_reposter_state(base) if base is not None else ReposterState(clock=clock_start)
        done = reposter_step(key, state, [m for m in messages if type(m) is AudienceDelta],
                             [m for m in messages if type(m) is RepostEdge],
                             [m for m in messages if type(m) is RepostedTweet],
                             pull_threshold=settings.reposter_threshold)
        to_save[key] = (encode_reposter_state(done.state), base)
        ts = done.state.clock
        for delta in done.own_timeline:
            rows.append(AuthorTimelineWrite(delta.op, delta.entry, ts))
            changes.append(UserRepostChange(delta.op, delta.entry, ts, source))
        pull_readers.extend(done.pull_readers)
        changes.extend(PullReposterChange(d.op, d.reader, d.reposter, d.ts, source) for d in done.pull_readers)
        candidates.extend((c.reader, (c, source)) for c in done.candidates)
    counts = (outputs.writer_for(settings).write(user_reposts=rows, pull_reposters=pull_readers)
              if rows or pull_readers else WriteCounts())
    published = outputs.publish_view_changes(settings, changes) if changes and settings.view_changes else 0
    if to_save:
        states.save(stage, to_save, batch_id)
    for reader, candidate in candidates:
        yield ("candidate", reader, candidate)
    yield ("report", StageReport(len(groups), len(to_save), counts, published, time.perf_counter() - started,
                                 len(candidates)))


def reader_partition(settings: Settings, batch_id: int, clock_start: int, items: Iterable[tuple[str, Message]],
                     *, outputs: PerReaderOutputs = PerReaderOutputs()) -> Iterator[StageReport]:
    """Step every reader of the partition: write its ``home_extras`` rows, visible and hidden sets,
    their view changes, and its state; yields one :class:`StageReport`."""
    started = time.perf_counter()
    settings = settings.as_role(STREAM)
    groups = _grouped(items)
    states = outputs.states_for(settings)
    stage = state_stage(READER_STAGE, clock_start)
    stored = states.load(stage, groups, batch_id)
    extras, visible, hidden, changes = [], [], [], []
    to_save: dict[str, tuple[bytes, bytes | None]] = {}
    for key in sorted(groups):
        source = _source(groups[key])
        messages = [m for m, _ in groups[key]]
        base = stored.get(key)
        state = decode_reader_state(base) if base is not None else ReaderState({}, {}, {}, {}, clock_start)
        done = reader_step(key, state, [m for m in messages if type(m) is Relation],
                           [m for m in messages if type(m) is ConditionalReply],
                           [m for m in messages if type(m) is RepostCandidate])
        # the step updates the state's containers in place (a reader takes many messages), so
        # whether it changed is not visible from the result: every stepped key is written back
        to_save[key] = (encode_reader_state(done.state), base)
        extras.extend(done.extras)
        visible.extend(done.visible)
        hidden.extend(done.hidden)
        changes.extend(ExtrasChange(d.op, d.entry, d.reader, d.ts, source) for d in done.extras)
        changes.extend(VisibleChange(v.op, v.reader, v.user, v.ts, source) for v in done.visible)
        changes.extend(HiddenChange(h.op, h.reader, h.user, h.ts, source) for h in done.hidden)
    counts = (outputs.writer_for(settings).write(extras=extras, visible=visible, hidden=hidden)
              if extras or visible or hidden else WriteCounts())
    published = outputs.publish_view_changes(settings, changes) if changes and settings.view_changes else 0
    if to_save:
        states.save(stage, to_save, batch_id)
    yield StageReport(len(groups), len(to_save), counts, published, time.perf_counter() - started)


def run_locally(settings: Settings, batch_id: int, clock_start: int, messages: Sequence[tuple[str, str, Message]],
                *, outputs: PerReaderOutputs = PerReaderOutputs()) -> PerReaderReport:
    """Both steps in this process, one partition each: the same functions the executors run."""
    reposter_out = list(reposter_partition(settings, batch_id, clock_start,
                                           ((k, m) for stage, k, m in messages if stage == REPOSTER_STAGE),
                                           outputs=outputs))
    reposters = sum((t[1] for t in reposter_out if t[0] == "report"), StageReport())
    to_readers = [(k, m) for stage, k, m in messages if stage == READER_STAGE]
    to_readers += [(t[1], t[2]) for t in reposter_out if t[0] == "candidate"]
    readers = sum(reader_partition(settings, batch_id, clock_start, to_readers, outputs=outputs), StageReport())
    return PerReaderReport(reposters, readers, len(messages), reposters.sent)


def run_per_reader(sc: "SparkContext", settings: Settings, batch_id: int, clock_start: int,
                   messages: Sequence[tuple[str, str, Message]], *,
                   outputs: PerReaderOutputs = PerReaderOutputs(), local_limit: int | None = None) -> PerReaderReport:
    """Run the reposter step, then the reader step, of one micro-batch.

    ``messages`` are the author keys' (step, destination key, message), collected by the driver
    from the batch's first pass. Up to ``local_limit`` of them (default: the settings') run in this process
    (:func:`run_locally`); more run on the executors, each step one shuffle by key and one task
    per partition, the reposter step's output kept (persisted) so that its candidates and its
    report come from one run.
    """
    if not messages:
        return PerReaderReport()
    if len(messages) <= (settings.per_reader_local_limit if local_limit is None else local_limit):
        return run_locally(settings, batch_id, clock_start, messages, outputs=outputs)
    to_reposters = [(key, m) for stage, key, m in messages if stage == REPOSTER_STAGE]
    to_readers = [(key, m) for stage, key, m in messages if stage == READER_STAGE]
    width = max(1, sc.defaultParallelism)
    reposters = StageReport()
    candidates = 0
    reader_input = sc.parallelize(to_readers, max(1, min(width, len(to_readers) or 1)))
    stepped = None
    if to_reposters:
        slices = max(1, min(width, len({k for k, _ in to_reposters})))
        stepped = (sc.parallelize(to_reposters, slices).partitionBy(slices)
                   .mapPartitions(lambda items: reposter_partition(settings, batch_id, clock_start, items,
                                                                   outputs=outputs))
                   .persist())
        reports = stepped.filter(lambda t: t[0] == "report").map(lambda t: t[1]).collect()
        reposters = sum(reports, StageReport())
        candidates = reposters.sent
        if candidates:
            reader_input = reader_input.union(
                stepped.filter(lambda t: t[0] == "candidate").map(lambda t: (t[1], t[2])))
    try:
        reader_keys = len({k for k, _ in to_readers}) + candidates
        slices = max(1, min(width, reader_keys))
        readers = sum(reader_input.partitionBy(slices)
                      .mapPartitions(lambda items: reader_partition(settings, batch_id, clock_start, items,
                                                                    outputs=outputs))
                      .collect(), StageReport()) if reader_keys else StageReport()
    finally:
        if stepped is not None:
            stepped.unpersist()
    return PerReaderReport(reposters, readers, len(messages), candidates)
