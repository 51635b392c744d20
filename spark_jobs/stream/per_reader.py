"""The per-reader stage of a micro-batch, in the stream's driver (docs/reposts-and-replies.md).

The author keys' operator emits, next to its rows, the messages it owes the per-reader stage
(``per_reader`` rows, spark_jobs/output_rows.py): relations, conditional tweets, repost edges and
reposted tweets' contents, a few per changed key, never one per reader. Once the batch's rows are
written, the driver steps the stage (:class:`~feed_service.core.per_reader.audience_stage.AudienceStage`,
a join over audiences decided with set operations) and writes what it decided: ``home_extras``,
reposters' own reposts, the readers' visible, hidden and excluded sets, the readers who merge a pull
reposter in, the list stage's facts (``lists`` and the lists' readers' statics), their view changes,
and then the inputs the batch changed (``per_reader_inputs``).

The stage stays in the driver's memory from one batch to the next. It is restored from the stored
inputs when the driver starts, and again whenever the batch it is asked to run is not the next one
after a batch it completed (a batch replayed after a failure, in this process or a new one): the
store's rows are versioned by micro-batch (feed_service/store/stage_inputs.py), so the restored
stage is the one from before that batch, and the replay computes the same rows, timestamps and
view changes as the first attempt. The inputs are saved last, after every row and view change of
the batch: a save never runs ahead of the writes it implies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from feed_service.core.per_reader.audience_stage import AudienceStage, StageResult, TweetKey
from feed_service.core.per_reader.list_stage import ListFact, ListStage
from feed_service.core.per_reader.messages import ListInput, Relation, RepostEdge
from feed_service.core.per_reader.routing import DriverStep, step_batch
from feed_service.core.rows import AuthorTimelineWrite
from feed_service.core.view_changes import (
    ExcludedChange,
    ExtrasChange,
    HiddenChange,
    ListChange,
    PullReposterChange,
    UserRepostChange,
    ViewChange,
    VisibleChange,
)
from feed_service.kafka.stream_publisher import publish_list_edges, publish_view_changes
from feed_service.security.roles import STREAM
from feed_service.settings import Settings
from feed_service.store.ports import ViewWriter, WriteCounts
from spark_jobs.cassandra_writers import inputs_for, writer_for

if TYPE_CHECKING:
    from feed_service.store.stage_inputs import StageInputs

Message = tuple[Any, "int | None"]
"""One of :mod:`feed_service.core.per_reader.messages`' records, with the Kafka timestamp (ms) of
the change that caused it (None: unknown): the rows it leads to carry it, for freshness."""


@dataclass(frozen=True, slots=True)
class PerReaderOutputs:
    """Where the stage reads and writes, production's by default (tests pass fakes)."""

    writer_for: Callable[[Settings], ViewWriter] = writer_for
    inputs_for: Callable[[Settings], "StageInputs"] = inputs_for
    publish_view_changes: Callable[[Settings, Sequence[ViewChange]], int] = publish_view_changes
    publish_list_edges: Callable[[Settings, Sequence[Any]], int] = publish_list_edges


@dataclass(frozen=True, slots=True)
class PerReaderReport:
    """A batch's per-reader work."""

    messages: int = 0
    extras_rows: int = 0
    """``home_extras`` rows written (deletes included)."""
    inputs_saved: int = 0
    """Stage inputs the batch changed and saved: what its state costs to keep."""
    inputs_bytes: int = 0
    """Their bytes (identities and values, after and before): in proportion to what changed."""
    restored: int = 0
    """Inputs read to restore the stage before the batch (0: it was in memory)."""
    counts: WriteCounts = field(default_factory=WriteCounts)
    changes_published: int = 0
    step_seconds: float = 0.0
    write_seconds: float = 0.0


def state_stage(clock_start: int) -> str:
    """The ``stage`` under which a checkpoint keeps its per-reader inputs: the checkpoint's first
    clock, unique to it. Batch ids start again at 0 in a new checkpoint, so inputs versioned by a
    batch id of another checkpoint must never be read."""
    return f"stage@{clock_start}"


def list_stage_name(clock_start: int) -> str:
    """The ``stage`` under which a checkpoint keeps its list stage's inputs (docs/lists.md#in-the-engine)."""
    return f"lists@{clock_start}"


def restored_stages(values: Sequence[tuple[Any, Any]], list_values: Sequence[tuple[Any, Any]], *,
                    pull_threshold: int | None, clock: int) -> tuple[AudienceStage, ListStage]:
    """Both stages of the driver from their stored inputs: the list stage first (which follows it
    emitted read the owners' relations among the per-reader stage's inputs), then the per-reader
    stage with the lists' facts."""
    hidden = {identity[1:]: value[2] for identity, value in values if identity[0] == "rel" and value is not None}
    lists = ListStage.restore(list_values, clock=clock, hidden=lambda owner, member: hidden.get((owner, member), False))
    facts = [ListFact(lid, *fact, 0) for lid, fact in lists.facts.items()]
    return AudienceStage.restore(values, pull_threshold=pull_threshold, clock=clock, lists=facts), lists


class StreamStage:
    """The per-reader stage of one running stream (module docstring); one per driver process."""

    def __init__(self, outputs: PerReaderOutputs = PerReaderOutputs()) -> None:
        self.outputs = outputs
        self.stage: AudienceStage | None = None
        self.lists: ListStage | None = None
        self.completed: int | None = None
        """The last batch this process stepped and saved completely (None: none, or a failure since)."""

    def run(self, settings: Settings, batch_id: int, clock_start: int, messages: Sequence[Message]) -> PerReaderReport:
        """Step the stage on one micro-batch's messages and write what it decided."""
        settings = settings.as_role(STREAM)
        name, lists_name = state_stage(clock_start), list_stage_name(clock_start)
        store = self.outputs.inputs_for(settings)
        started = time.perf_counter()
        restored = 0
        if self.stage is None or self.lists is None or self.completed is None or batch_id <= self.completed:
            values, list_values = store.load(name, batch_id), store.load(lists_name, batch_id)
            restored = len(values) + len(list_values)
            self.stage, self.lists = restored_stages(values, list_values, pull_threshold=settings.reposter_threshold,
                                                     clock=clock_start)
        self.completed = None  # until this batch is written and saved
        done = step_batch(self.stage, self.lists, [message for message, _ in messages])
        stepped = time.perf_counter()
        sources = _sources(messages)
        counts, published, extras_rows = WriteCounts(), 0, 0
        for result in done.results:
            c, p, e = self._write(settings, result, sources)
            counts, published, extras_rows = counts + c, published + p, extras_rows + e
        c, p = self._write_lists(settings, done, sources)
        counts, published = counts + c, published + p
        if done.edges:  # the members' keys fold them at a later batch (docs/lists.md#in-the-engine)
            self.outputs.publish_list_edges(settings, done.edges)
        saved = store.save(name, _merged_inputs(done.results), batch_id)
        if done.lists is not None and done.lists.inputs:
            saved_lists = store.save(lists_name, done.lists.inputs, batch_id)
            saved = type(saved)(saved.rows + saved_lists.rows, saved.bytes + saved_lists.bytes)
        self.completed = batch_id
        return PerReaderReport(len(messages), extras_rows, saved.rows, saved.bytes, restored, counts, published,
                               stepped - started, time.perf_counter() - stepped)

    def _write(self, settings: Settings, done: StageResult, sources: "_Sources") -> tuple[WriteCounts, int, int]:
        ts = done.ts
        extras = [row for fanout in done.extras for row in fanout.rows()]
        own = [AuthorTimelineWrite(d.op, d.entry, ts) for d in done.own_reposts]
        if not (extras or own or done.visible or done.hidden or done.excluded or done.pull_readers):
            return WriteCounts(), 0, 0
        counts = self.outputs.writer_for(settings).write(
            extras=extras, visible=done.visible, hidden=done.hidden, excluded=done.excluded, user_reposts=own,
            pull_reposters=done.pull_readers)
        published = 0
        if settings.view_changes:
            changes: list[ViewChange] = []
            changes.extend(ExtrasChange(d.op, d.entry, d.reader, d.ts, sources.tweet(d.entry)) for d in extras)
            changes.extend(UserRepostChange(d.op, d.entry, ts, sources.tweet(d.entry)) for d in done.own_reposts)
            changes.extend(VisibleChange(v.op, v.reader, v.user, v.ts, sources.pair(v.reader, v.user))
                           for v in done.visible)
            changes.extend(HiddenChange(h.op, h.reader, h.user, h.ts, sources.pair(h.reader, h.user))
                           for h in done.hidden)
            changes.extend(ExcludedChange(x.op, x.reader, x.user, x.ts, sources.pair(x.reader, x.user))
                           for x in done.excluded)
            changes.extend(PullReposterChange(d.op, d.reader, d.reposter, d.ts, sources.latest)
                           for d in done.pull_readers)
            if changes:
                published = self.outputs.publish_view_changes(settings, changes)
        return counts, published, len(extras)

    def _write_lists(self, settings: Settings, done: DriverStep, sources: "_Sources") -> tuple[WriteCounts, int]:
        """The list stage's facts of the batch (each at the stage's clock): the ``lists`` rows and the
        lists' readers' statics, and a :class:`ListChange` per row an owner gains or loses."""
        facts = () if done.lists is None else done.lists.facts
        if not facts:
            return WriteCounts(), 0
        counts = self.outputs.writer_for(settings).write(lists=facts)
        if not settings.view_changes:
            return counts, 0
        changes: list[ViewChange] = []
        for f in facts:
            source = sources.lists.get(f.list_id, sources.latest)
            if f.previous_owner is not None and f.previous_owner != f.owner_id:
                changes.append(ListChange("delete", f.list_id, f.previous_owner, None, f.ts, source))
            if f.owner_id is not None:
                changes.append(ListChange("upsert", f.list_id, f.owner_id, f.replies_policy, f.ts, source))
        return counts, self.outputs.publish_view_changes(settings, changes) if changes else 0


def _merged_inputs(results: Sequence[StageResult]) -> tuple[tuple[Any, Any, Any], ...]:
    """The inputs several steps of one batch assigned, as one step's: per identity the value after the
    last step and the value before the first."""
    merged: dict[Any, tuple[Any, Any]] = {}
    for result in results:
        for identity, after, before in result.inputs:
            had = merged.get(identity)
            merged[identity] = (after, before if had is None else had[1])
    return tuple((identity, after, before) for identity, (after, before) in merged.items())


@dataclass(slots=True)
class _Sources:
    """The Kafka timestamps of the changes behind a batch's messages, by what they name."""

    tweets: dict[TweetKey, int] = field(default_factory=dict)
    pairs: dict[tuple[str, str], int] = field(default_factory=dict)
    lists: dict[str, int] = field(default_factory=dict)
    """list_id -> the latest of its list and membership changes."""
    latest: int | None = None

    def tweet(self, entry: Any) -> int | None:
        return self.tweets.get((entry.author_id, entry.tweet_id), self.latest)

    def pair(self, reader: str, user: str) -> int | None:
        return self.pairs.get((reader, user), self.latest)


def _sources(messages: Sequence[Message]) -> _Sources:
    out = _Sources()
    for m, source in messages:
        if source is None:
            continue
        out.latest = source if out.latest is None else max(out.latest, source)
        if type(m) is Relation:
            k: Any = (m.reader, m.user)
            out.pairs[k] = max(source, out.pairs.get(k, source))
        elif type(m) is ListInput:
            lid = m.change.list_id
            out.lists[lid] = max(source, out.lists.get(lid, source))
        elif type(m) is RepostEdge:
            continue  # an edge names its tweet's author in its rank; the content message names the tweet
        else:
            k = (m.author_id, m.tweet_id)
            out.tweets[k] = max(source, out.tweets.get(k, source))
    return out


_STAGES: dict[tuple, StreamStage] = {}


def run_per_reader(sc: Any, settings: Settings, batch_id: int, clock_start: int, messages: Sequence[Any], *,
                   outputs: PerReaderOutputs = PerReaderOutputs()) -> PerReaderReport:
    """Step this driver's per-reader stage (one per keyspace and checkpoint) on one micro-batch's
    messages, ``(stage, key, (message, source ms))`` as the sink collects them."""
    key = (settings.keyspace, clock_start, outputs)
    stage = _STAGES.get(key)
    if stage is None:
        stage = _STAGES[key] = StreamStage(outputs)
    return stage.run(settings, batch_id, clock_start, [m for _, _, m in messages])
