"""The stream's query: read the changelog topics, parse and route them, join them in the stateful
operator, and write each micro-batch with :func:`~spark_jobs.stream.batch.foreach_batch`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from feed_service.kafka.client_config import spark_kafka_options
from feed_service.kafka.offsets import SOURCE_ROLES
from feed_service.security.roles import STREAM
from feed_service.settings import Settings
from spark_jobs.envelope import parse_changes, routed_changes
from spark_jobs.stream.batch import BatchTimes, foreach_batch
from spark_jobs.stream.options import StreamOptions, trigger_of
from spark_jobs.stream.pinned import clock_start_for, pin_operator, state_buckets_for
from spark_jobs.stream.activity import StreamActivity
from spark_jobs.stream.refill import StreamRefill
from spark_jobs.stream.trimming import StreamTrimming
from spark_jobs.stateful_join import join_timelines
from spark_jobs.timeline_join import JoinConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.stream.inputs import InputGuard
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("feed.stream")

KAFKA_API_TIMEOUT_MS = 15_000
KAFKA_REQUEST_TIMEOUT_MS = 10_000


def read_changelogs(spark: "SparkSession", settings: Settings, options: StreamOptions) -> "DataFrame":
    topics = ",".join(settings.topic(role) for role in SOURCE_ROLES)
    return (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(settings, STREAM))  # TLS and the stream's login on a secured cluster
        .option("subscribe", topics)
        .option("startingOffsets", options.starting_offsets)
        .option("maxOffsetsPerTrigger", str(options.max_offsets_per_trigger))
        # Compacted topics have offset gaps by design; they are not data loss.
        .option("failOnDataLoss", "false")
        # An offset lookup stuck on a broker that died waits out the client's API timeout (60 s by
        # default) before Spark retries it with fresh metadata: fail over in seconds (docs/cluster.md).
        .option("kafka.default.api.timeout.ms", str(KAFKA_API_TIMEOUT_MS))
        .option("kafka.request.timeout.ms", str(KAFKA_REQUEST_TIMEOUT_MS))
        .load()
    )


@dataclass
class RunningStream:
    """The query's handle, plus the accumulator of timeline rows written and the trimming of home
    timelines (its counters: ``trimming.record()``)."""

    join: "StreamingQuery"
    timeline_rows: Any
    trimming: "StreamTrimming | None" = None
    until_caught_up: bool = False
    """The query ends by itself once caught up (availableNow): its end without an error is the goal."""
    times: BatchTimes = field(default_factory=BatchTimes)
    """Where the last batch's sink time went."""
    state_buckets: int = 0
    """The checkpoint's state layout: buckets of join keys, 0 for one state per key (docs/state-buckets.md)."""
    refill: "StreamRefill | None" = None
    """The refill of trimmed inboxes left short (its counters: ``refill.record()``; docs/trimming.md#refill)."""
    activity: "StreamActivity | None" = None
    """Inactive readers: skipped inbox writes, drops and rebuilds (``activity.record()``; docs/activity.md)."""

    def stop(self) -> None:
        try:
            self.join.stop()
        except Exception:  # noqa: BLE001 - stopping a failed query is best effort
            log.exception("stopping %s", self.join.name)
        if self.trimming is not None:
            try:
                self.trimming.close()
            except Exception:  # noqa: BLE001 - closing the trimmer's session is best effort
                log.exception("closing the trimmer")
        if self.refill is not None:
            try:
                self.refill.close()
            except Exception:  # noqa: BLE001 - closing the refill check's session is best effort
                log.exception("closing the refill check")
        if self.activity is not None:
            try:
                self.activity.close()
            except Exception:  # noqa: BLE001 - closing the activity store's session is best effort
                log.exception("closing the activity store")


def start_stream(
    spark: "SparkSession",
    settings: Settings,
    options: StreamOptions,
    *,
    initial_state: "DataFrame | None" = None,
    clock_start: int | None = None,
    input_guard: "InputGuard | None" = None,
) -> RunningStream:
    """Start the query; returns at once (it runs in the background of this SparkSession).

    ``input_guard`` checks each micro-batch's start offsets against the topics before its rows are
    read (spark_jobs/stream/inputs.py); the caller checks it before the start.

    ``initial_state`` (``key``, ``state``) and ``clock_start`` bootstrap a new checkpoint from a
    backfill; ``options.starting_offsets`` then holds the backfill's snapshot offsets.
    """
    parsed = parse_changes(read_changelogs(spark, settings, options))
    config = JoinConfig(inbox_cap=settings.inbox_cap, pull_threshold=settings.pull_threshold,
                        clock_start=clock_start_for(options.checkpoint, clock_start),
                        horizon_ms=settings.retention.horizon_ms)
    pin_operator(options.checkpoint)  # a checkpoint of a retired operator is refused
    buckets = state_buckets_for(options.checkpoint, settings.state_buckets)
    outputs = join_timelines(
        routed_changes(parsed),
        config=config,
        initial_state=initial_state,
        state_buckets=buckets,
    )
    counter = spark.sparkContext.accumulator(0)
    write_seconds = spark.sparkContext.accumulator(0.0)
    times = BatchTimes()
    trimming = StreamTrimming(settings)  # per start: a restarted query trims what it writes first
    refill = StreamRefill(settings)
    activity = StreamActivity(settings, options.checkpoint / "join" / "offsets") if settings.inactive_after_s else None
    join_query = (
        outputs.writeStream.queryName("timeline-join")
        .outputMode("append")
        .option("checkpointLocation", str(options.checkpoint / "join"))
        .trigger(**trigger_of(options))
        .foreachBatch(foreach_batch(settings, counter, trimming, write_seconds, times,
                                    clock_start=config.clock_start, refill=refill, activity=activity,
                                    input_guard=input_guard))
        .start()
    )
    return RunningStream(join_query, counter, trimming, until_caught_up=options.until_caught_up, times=times,
                         state_buckets=buckets, refill=refill, activity=activity)
