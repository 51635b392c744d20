"""Write the join's compact output rows from the executors (``mapPartitions``): timeline, tweet,
profile, author-timeline, pull-follow and block rows to Cassandra, passed-through rejected records
to the dead-letter topic, and then what was written to the ``timeline_changes`` topic (the view's
own change stream, docs/view-changes.md); each partition hands back a :class:`PartitionReport`: its
home-timeline upserts per timeline, for the driver's trimming, and counts for the driver's metrics.

Per chunk of rows: the Cassandra write, then (only once it succeeded) the chunk's view changes,
each chunk's messages acknowledged before the next chunk is written. All rows of one view row come
from one join key, and a key's rows of one batch are in one partition, in the order the operator
emitted them, so the messages of one row are published in the order its writes were made. With
``Settings.view_changes`` off (``FEED_VIEW_CHANGES=0``) nothing is published.

Each Python worker keeps one driver session per settings (spark_jobs/cassandra_writers.py), so a
micro-batch pays for statements, not for connections. Where rows and messages go is one
:class:`SinkOutputs` argument, production's by default (tests pass fakes). Rows are written in chunks through
:class:`feed_service.store.cassandra_writer.CassandraWriter` (prepared statements, bounded concurrency,
logical-clock timestamps: see docs/idempotent-writes.md). A failed write raises, which fails the
micro-batch; Spark then retries it from the checkpoint and, writes being idempotent, converges.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

from feed_service.core.view_changes import ViewChange
from feed_service.kafka.stream_publisher import publish_dead_letters, publish_view_changes
from feed_service.security.roles import STREAM
from feed_service.settings import Settings
from feed_service.store.ports import ViewWriter, WriteCounts
from spark_jobs.cassandra_writers import writer_for
from spark_jobs.stream.trimming import merge_counts
from spark_jobs.output_rows import view_changes_of, writes_of

#: Compact rows per write call: bounds executor memory, keeps enough requests in flight.
CHUNK_ROWS = 2000


@dataclass(frozen=True, slots=True)
class SinkOutputs:
    """Where :func:`write_partition` writes, production's by default. It travels to the executors with
    the batch's function, so a field is a module-level function (pickled by name), and the writer is
    a factory: each worker process makes (or reuses) its own connection."""

    writer_for: Callable[[Settings], ViewWriter] = writer_for
    """The worker's writer of view rows for ``settings`` (spark_jobs/cassandra_writers.py)."""
    publish_dead_letters: Callable[[Settings, Sequence[tuple[str, str]]], Any] = publish_dead_letters
    """Publishes (key, value) dead letters, every one acknowledged, else raises."""
    publish_view_changes: Callable[[Settings, Sequence[ViewChange]], int] = publish_view_changes
    """Publishes view changes (docs/view-changes.md), every one acknowledged, else raises; returns the messages."""


@dataclass(frozen=True, slots=True)
class PartitionReport:
    """What :func:`write_partition` did for one partition of a micro-batch (summed over the
    partitions by :func:`merge_reports` on the driver)."""

    upserts: dict[str, int] = field(default_factory=dict)
    """Home-timeline rows inserted or updated per timeline (the trim tracker's input)."""
    counts: WriteCounts = field(default_factory=WriteCounts)
    """Rows written per table."""
    dead_letters: dict[str, int] = field(default_factory=dict)
    """Dead letters published, by ``reason_code`` (``unknown`` when a record does not say)."""
    changes_published: int = 0
    """View-change messages published to ``timeline_changes`` (after splitting)."""
    messages: list[tuple[str, str, Any]] = field(default_factory=list)
    """The batch's messages to the per-reader stage, (step, destination key, message): the driver
    runs those steps once every partition's rows are written (spark_jobs/stream/per_reader.py)."""
    deletes: dict[str, int] = field(default_factory=dict)
    """Home-timeline rows deleted per timeline (the refill check's input: docs/trimming.md#refill)."""


def merge_reports(reports: Iterable[PartitionReport]) -> PartitionReport:
    """The sum of partition reports (counts added per key).

    >>> a = PartitionReport({"ann": 1}, WriteCounts(timeline_upserts=1), {"bad_json": 1}, 2)
    >>> b = PartitionReport({"ann": 2, "cat": 1}, WriteCounts(timeline_upserts=3), {}, 5)
    >>> m = merge_reports([a, b])
    >>> m.upserts, m.counts.timeline_upserts, m.dead_letters, m.changes_published
    ({'ann': 3, 'cat': 1}, 4, {'bad_json': 1}, 7)
    """
    reports = list(reports)
    return PartitionReport(merge_counts(r.upserts for r in reports),
                           sum((r.counts for r in reports), WriteCounts()),
                           merge_counts(r.dead_letters for r in reports),
                           sum(r.changes_published for r in reports),
                           [m for r in reports for m in r.messages],
                           merge_counts(r.deletes for r in reports))


def without_readers(rows: Iterable[Any], skip: frozenset[str], skipped: Any | None = None) -> Iterator[Any]:
    """``rows`` with the inbox rows of the readers in ``skip`` left out (their inboxes are not kept:
    docs/activity.md#the-stream); a timeline row keeps its other readers. The rows left out are added
    to ``skipped`` (an accumulator). Only ``timeline`` rows change: pull follows, extras and the rest
    are what reads of such a reader merge.

    >>> rows = [{"kind": "timeline", "timeline_ids": ["ann", "bob"]}, {"kind": "timeline", "timeline_ids": ["bob"]},
    ...         {"kind": "pull_follow", "timeline_ids": ["bob"]}]
    >>> list(without_readers(rows, frozenset({"bob"})))
    [{'kind': 'timeline', 'timeline_ids': ['ann']}, {'kind': 'pull_follow', 'timeline_ids': ['bob']}]
    """
    left_out = 0
    for r in rows:
        if skip and r["kind"] == "timeline":
            ids = r["timeline_ids"]
            kept = [t for t in ids if t not in skip]
            if len(kept) != len(ids):
                left_out += len(ids) - len(kept)
                if not kept:
                    continue
                r = {**(r.asDict() if hasattr(r, "asDict") else r), "timeline_ids": kept}
        yield r
    if skipped is not None and left_out:
        skipped.add(left_out)


def reason_code(dl_value: str | None) -> str:
    """The ``reason_code`` of a dead-letter record's JSON value, ``unknown`` if it has none.

    >>> reason_code('{"reason_code":"bad_json","reason":"x"}'), reason_code("{"), reason_code(None)
    ('bad_json', 'unknown', 'unknown')
    """
    try:
        code = json.loads(dl_value)["reason_code"]  # type: ignore[arg-type]
    except (TypeError, ValueError, KeyError):
        return "unknown"
    return code if isinstance(code, str) and code else "unknown"


def _chunks(rows: Iterator[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def write_partition(settings: Settings, rows: Iterator[Any], counter: Any | None = None,
                    write_seconds: Any | None = None, *, outputs: SinkOutputs = SinkOutputs(),
                    chunk_rows: int = CHUNK_ROWS) -> PartitionReport:
    """Write one partition of output rows to ``outputs``, then publish its dead letters and
    (``settings.view_changes``) its view changes, ``chunk_rows`` at a time; add the timeline rows
    written to ``counter`` and the seconds spent writing and publishing to ``write_seconds`` (accumulators).

    Returns the partition's :class:`PartitionReport`; its ``upserts`` (home-timeline rows inserted
    or updated per timeline) go to the driver's trim tracker (spark_jobs/stream/trimming.py, docs/trimming.md).
    A failed write or an unacknowledged message raises: the micro-batch fails and is run again.
    """
    settings = settings.as_role(STREAM)  # the executors write and publish as the stream
    writer = outputs.writer_for(settings)
    total = WriteCounts()
    upserts: dict[str, int] = {}
    deletes: dict[str, int] = {}
    letters: dict[str, int] = {}
    published = 0
    spent = 0.0
    messages: list[tuple[str, str, Any]] = []
    for chunk in _chunks(rows, chunk_rows):
        writes = writes_of(chunk)
        messages += writes.messages
        started = time.perf_counter()
        total = total + writer.write(timeline_fanout=writes.timeline, tweets=writes.tweets,
                                     profiles=writes.profiles, author_timeline=writes.author_timeline,
                                     pull_follows=writes.pull_follows, blocks=writes.blocks)
        for w in writes.timeline:
            counts = deletes if w.op == "delete" else upserts
            for tid in w.timeline_ids:
                counts[tid] = counts.get(tid, 0) + 1
        if writes.dead_letters:
            outputs.publish_dead_letters(settings, writes.dead_letters)
            for _, value in writes.dead_letters:
                code = reason_code(value)
                letters[code] = letters.get(code, 0) + 1
        if settings.view_changes:
            changes = view_changes_of(chunk)
            if changes:  # only now: the chunk's rows are in Cassandra
                published += outputs.publish_view_changes(settings, changes)
        spent += time.perf_counter() - started
    if counter is not None:
        counter.add(total.timeline_upserts + total.timeline_deletes)
    if write_seconds is not None:
        write_seconds.add(spent)
    return PartitionReport(upserts, total, letters, published, messages, deletes)
