"""One :class:`~feed_service.store.cassandra_writer.CassandraWriter` (and store of the per-reader
stage's inputs) per Spark Python process and settings.

Workers are reused across tasks, so a micro-batch (the stream's sink, spark_jobs/stream/sink.py) or a
backfill partition (spark_jobs/backfill/write.py) pays for statements, not for connections; the
driver session is shut down when the worker exits.
"""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING

from feed_service.settings import Settings
from feed_service.store.cassandra_writer import CassandraWriter

if TYPE_CHECKING:
    from feed_service.store.stage_inputs import CassandraStageInputs

_writers: dict[tuple, CassandraWriter] = {}


def writer_for(settings: Settings) -> CassandraWriter:
    """The worker process's writer for ``settings`` (connected once, closed at exit), logged in as
    ``settings.role`` on a secured stack: the caller (the stream's sink, the backfill) sets its own."""
    cache_key = (settings.cassandra_hosts, settings.cassandra_port, settings.keyspace, settings.role)
    writer = _writers.get(cache_key)
    if writer is None:
        from feed_service.store.session import connect

        cluster, session = connect(settings)
        atexit.register(cluster.shutdown)
        writer = _writers[cache_key] = CassandraWriter(session, settings.keyspace)
    return writer


_inputs: dict[tuple, "CassandraStageInputs"] = {}


def inputs_for(settings: Settings) -> "CassandraStageInputs":
    """The process's store of the per-reader stage's inputs (spark_jobs/stream/per_reader.py), on the
    same session as :func:`writer_for`'s writer."""
    cache_key = (settings.cassandra_hosts, settings.cassandra_port, settings.keyspace, settings.role)
    inputs = _inputs.get(cache_key)
    if inputs is None:
        from feed_service.store.stage_inputs import CassandraStageInputs

        inputs = _inputs[cache_key] = CassandraStageInputs(writer_for(settings).session, settings.keyspace)
    return inputs
