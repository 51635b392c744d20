"""The streaming job: Kafka changelogs -> validated changes -> stateful join -> Cassandra.

One query, ``timeline-join``, reads the changelog topics (``SOURCE_ROLES``): valid changes, keyed by
join key (a block under both of its users), go through the join engine in the stateful operator
(RocksDB state store); records that fail validation pass through it under a dead-letter route;
``foreachBatch`` writes from the executors, rows to Cassandra and dead letters (reason, source
topic, partition and offset) to the dead-letter topic. (A second query for the dead letters doubled
the fixed cost of every micro-batch on this 2-core machine.)

Its checkpoint lives under ``--checkpoint``; state and Kafka offsets survive restarts, and a batch
replayed after a crash rewrites the same rows with the same timestamps (dead letters are at least
once: a replayed batch can publish a record twice). The write timestamps
of a new checkpoint start at ``clock_start`` (microseconds at its creation, kept in the checkpoint
folder), so a later pipeline's writes supersede an earlier one's on the same keyspace.

Run with ``feedctl stream`` or ``python -m spark_jobs.stream`` (``spark-submit`` runs the same
``__main__`` when the Kafka connector jars are passed with ``--jars``).

One module per concern:

================  ==================================================================================
``options``       :class:`StreamOptions` and the job's defaults; the trigger they give
``pinned``        what a checkpoint fixes at its creation: clock start, operator, state partitions
``query``         the streaming query: read the changelogs, join, start (:func:`start_stream`)
``batch``         the ``foreachBatch`` function on the driver and where a batch's time went
``sink``          what each executor partition writes (Cassandra, dead letters, view changes)
``trimming``      the driver's trim of home timelines after each batch (docs/trimming.md)
``progress``      the progress record and its file
``supervisor``    keeps the query running: restarts, progress, metrics (:func:`supervise`)
``restarts``      restart bookkeeping (when to give up, what progress reports)
``metrics``       the Prometheus collectors; ``metrics_endpoint`` serves them with the consumer lag
``continuation``  continuing from a backfill (``--bootstrap-from``)
``runner``        the whole run: checks, session, lock, supervisor (:func:`run_stream`)
``cli``           ``feedctl stream`` arguments and :func:`main`
================  ==================================================================================

Modules the stream shares with the backfill, the reshard or ``feedctl state-stats`` stay at the top
of ``spark_jobs``: ``timeline_join`` and ``output_rows`` (the join's Spark adapter and its rows; the
backfill builds engine states with them), ``cassandra_writers`` (one writer per worker: the backfill
writes through it too), ``checkpoint`` (the reshard), ``bootstrap`` (the backfill's manifest),
``state_stats``, ``job_cli`` and ``envelope``.
"""

from spark_jobs.stream.batch import BatchTimes
from spark_jobs.stream.cli import add_arguments, main, options_from_args
from spark_jobs.stream.options import StreamOptions
from spark_jobs.stream.progress import progress_record
from spark_jobs.stream.query import RunningStream, start_stream
from spark_jobs.stream.runner import StreamDependencies, run, run_stream
from spark_jobs.stream.supervisor import supervise

__all__ = [
    "BatchTimes", "RunningStream", "StreamDependencies", "StreamOptions", "add_arguments", "main",
    "options_from_args", "progress_record", "run", "run_stream", "start_stream", "supervise",
]
