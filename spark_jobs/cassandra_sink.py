"""Write the join's compact output rows from the executors (``foreachPartition``): timeline, tweet
and profile rows to Cassandra, passed-through rejected records to the dead-letter topic.

Each Python worker keeps one driver session per settings (workers are reused across tasks), so a
micro-batch pays for statements, not for connections. Rows are written in chunks through
:class:`feed_service.store.cassandra_writer.CassandraWriter` (prepared statements, bounded concurrency,
logical-clock timestamps: see docs/idempotent-writes.md). A failed write raises, which fails the
micro-batch; Spark then retries it from the checkpoint and, writes being idempotent, converges.
"""

from __future__ import annotations

import atexit
from typing import Any, Iterable, Iterator

from feed_service.settings import Settings
from feed_service.errors import DeliveryFailed
from feed_service.store.cassandra_writer import CassandraWriter
from feed_service.store.ports import WriteCounts
from spark_jobs.output_rows import writes_of

#: Compact rows per write call: bounds executor memory, keeps enough requests in flight.
CHUNK_ROWS = 2000

_writers: dict[tuple, CassandraWriter] = {}
_producers: dict[str, Any] = {}


def producer_for(settings: Settings) -> Any:
    """The worker process's Kafka producer for dead letters (idempotent, acks=all)."""
    producer = _producers.get(settings.kafka_bootstrap)
    if producer is None:
        from confluent_kafka import Producer

        producer = _producers[settings.kafka_bootstrap] = Producer({
            "bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5,
        })
    return producer


def publish_dead_letters(settings: Settings, letters: list[tuple[str, str]]) -> None:
    """Publish (key, value) dead-letter records and wait for every delivery report."""
    producer = producer_for(settings)
    failures: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    topic = settings.topic("dead_letter")
    for key, value in letters:
        producer.produce(topic, key=key.encode(), value=value.encode(), on_delivery=report)
        producer.poll(0)
    remaining = producer.flush(60)
    if failures or remaining:
        raise DeliveryFailed(f"{len(failures) + remaining} of {len(letters)} dead letters not delivered: "
                              f"{failures[:1]}")


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


def write_partition(settings: Settings, rows: Iterator[Any], counter: Any | None = None) -> None:
    """Write one partition of output rows; add the timeline rows written to ``counter`` (an accumulator)."""
    writer = writer_for(settings)
    total = WriteCounts()
    for chunk in _chunks(rows, CHUNK_ROWS):
        writes = writes_of(chunk)
        total = total + writer.write(timeline=writes.timeline, tweets=writes.tweets, profiles=writes.profiles)
        if writes.dead_letters:
            publish_dead_letters(settings, writes.dead_letters)
    if counter is not None:
        counter.add(total.timeline_upserts + total.timeline_deletes)
