"""Write the join's compact output rows from the executors (``mapPartitions``): timeline, tweet,
profile, author-timeline, pull-follow and block rows to Cassandra, passed-through rejected records
to the dead-letter topic; each partition hands back its home-timeline upserts per timeline, for the
driver's trimming.

Each Python worker keeps one driver session per settings (workers are reused across tasks), so a
micro-batch pays for statements, not for connections. Rows are written in chunks through
:class:`feed_service.store.cassandra_writer.CassandraWriter` (prepared statements, bounded concurrency,
logical-clock timestamps: see docs/idempotent-writes.md). A failed write raises, which fails the
micro-batch; Spark then retries it from the checkpoint and, writes being idempotent, converges.
"""

from __future__ import annotations

import atexit
import time
from typing import Any, Iterator

from feed_service.settings import Settings
from feed_service.kafka.dead_letters import publish_dead_letters
from feed_service.store.cassandra_writer import CassandraWriter
from feed_service.store.ports import WriteCounts
from spark_jobs.output_rows import writes_of

#: Compact rows per write call: bounds executor memory, keeps enough requests in flight.
CHUNK_ROWS = 2000

_writers: dict[tuple, CassandraWriter] = {}


def writer_for(settings: Settings) -> CassandraWriter:
    """The worker process's writer for ``settings`` (connected once, closed at exit)."""
    cache_key = (settings.cassandra_hosts, settings.cassandra_port, settings.keyspace)
    writer = _writers.get(cache_key)
    if writer is None:
        from feed_service.store.session import connect

        cluster, session = connect(settings)
        atexit.register(cluster.shutdown)
        writer = _writers[cache_key] = CassandraWriter(session, settings.keyspace)
    return writer


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
                    write_seconds: Any | None = None) -> dict[str, int]:
    """Write one partition of output rows; add the timeline rows written to ``counter`` and the
    seconds spent writing to ``write_seconds`` (accumulators).

    Returns the home-timeline rows inserted or updated per timeline: the driver's trim tracker adds
    them to its bounds (spark_jobs/trimming.py, docs/trimming.md).
    """
    writer = writer_for(settings)
    total = WriteCounts()
    upserts: dict[str, int] = {}
    spent = 0.0
    for chunk in _chunks(rows, CHUNK_ROWS):
        writes = writes_of(chunk)
        started = time.perf_counter()
        total = total + writer.write(timeline=writes.timeline, tweets=writes.tweets, profiles=writes.profiles,
                                     author_timeline=writes.author_timeline, pull_follows=writes.pull_follows,
                                     blocks=writes.blocks)
        for w in writes.timeline:
            if w.op != "delete":
                upserts[w.timeline_id] = upserts.get(w.timeline_id, 0) + 1
        if writes.dead_letters:
            publish_dead_letters(settings, writes.dead_letters)
        spent += time.perf_counter() - started
    if counter is not None:
        counter.add(total.timeline_upserts + total.timeline_deletes)
    if write_seconds is not None:
        write_seconds.add(spent)
    return upserts
