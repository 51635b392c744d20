"""The stream's keyed stateful join: routed changes in, compact output rows out, with the state laid
out per join key or per bucket of join keys (docs/state-buckets.md).

Two layouts, fixed when a checkpoint is created (:mod:`spark_jobs.stream.pinned`):

- ``state_buckets = N > 0`` (new checkpoints, ``transformWithState``): grouped by
  (``route``, ``pmod(xxhash64(key), N)``), each bucket's keys in one state blob
  (:mod:`spark_jobs.bucketed_join`): Spark's fixed cost per grouping key is paid per bucket;
- ``state_buckets = 0``: grouped by (``route``, ``key``), one state per join key
  (:mod:`spark_jobs.timeline_join`): what every checkpoint created before the buckets holds, and
  what ``FEED_STATE_BUCKETS=0`` gives a new one.

The operator is ``transformWithState`` in both (docs/streaming.md, "One stateful operator").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.bucketed_join import BUCKET_COLUMN, bucket_of, bucketed_initial_state, bucketed_processor
from spark_jobs.envelope import ROUTE_JOIN
from spark_jobs.output_rows import OUTPUT_SCHEMA
from spark_jobs.timeline_join import JoinConfig, transform_with_state_processor

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def join_timelines(
    changes: "DataFrame",
    *,
    config: JoinConfig,
    initial_state: "DataFrame | None" = None,
    state_buckets: int = 0,
) -> "DataFrame":
    """Keyed stateful join of routed changes (``route``, ``key``, event and dead-letter columns, as
    :func:`spark_jobs.envelope.routed_changes` makes them) into compact output rows.

    ``initial_state`` (columns ``key``, ``state`` = a whole-state blob, ``encode_state``) seeds a new
    checkpoint's state, e.g. from a backfill.
    ``state_buckets``: 0 groups by join key, N > 0 by N buckets of join keys.
    """
    if state_buckets < 0:
        raise ValueError(f"state buckets must be 0 (one state per key) or more, got {state_buckets}")
    if state_buckets:
        return (changes.withColumn(BUCKET_COLUMN, bucket_of("key", state_buckets))
                .groupBy("route", BUCKET_COLUMN)
                .transformWithState(
                    statefulProcessor=bucketed_processor(config),
                    outputStructType=OUTPUT_SCHEMA,
                    outputMode="Append",
                    timeMode="None",
                    initialState=(bucketed_initial_state(initial_state, state_buckets).groupBy("route", BUCKET_COLUMN)
                                  if initial_state is not None else None),
                ))
    from pyspark.sql import functions as F

    return changes.groupBy("route", "key").transformWithState(
        statefulProcessor=transform_with_state_processor(config),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="None",
        initialState=(initial_state.withColumn("route", F.lit(ROUTE_JOIN)).groupBy("route", "key")
                      if initial_state is not None else None),
    )
