"""Stage ``read``: the snapshot's Kafka records, parsed and validated by the stream's own rules.

Spark's Kafka source in batch mode with explicit ``endingOffsets``; the envelope is parsed and
validated by :mod:`spark_jobs.envelope`. Tombstones (null values, left by compaction) are skipped
and counted; invalid records are counted by reason and, on request, sent to the dead-letter topic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from feed_service.kafka.client_config import spark_kafka_options
from feed_service.kafka.offsets import CHANGELOG_SOURCE_ROLES
from feed_service.security.roles import BACKFILL
from feed_service.settings import Settings
from spark_jobs.backfill.snapshot import Snapshot
from spark_jobs.envelope import EVENT_COLUMNS, dead_letters

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def read_snapshot(spark: "SparkSession", settings: Settings, snapshot: Snapshot) -> "DataFrame":
    """The Kafka records of the snapshot's changelog topics: every partition from earliest to its end
    offset (the stream's refill requests change nothing in the view: not read)."""
    changelogs = {settings.topic(role) for role in CHANGELOG_SOURCE_ROLES}
    end = {topic: parts for topic, parts in snapshot.end.items() if topic in changelogs}
    assign = {topic: [int(p) for p in parts] for topic, parts in end.items()}
    return (
        spark.read.format("kafka")
        .options(**spark_kafka_options(settings, BACKFILL))  # TLS and the backfill's login on a secured cluster
        .option("assign", json.dumps(assign))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", json.dumps(end))
        # Compacted topics have offset gaps by design; they are not data loss.
        .option("failOnDataLoss", "false")
        .load()
    )


def classify(parsed: "DataFrame") -> "DataFrame":
    """Add ``tombstone`` (null value: a compaction delete marker, not an event) to parsed rows."""
    from pyspark.sql import functions as F

    return parsed.withColumn("tombstone", F.col("raw").isNull())


def valid_events(parsed: "DataFrame") -> "DataFrame":
    """Valid change events: ``key`` and the typed event columns (tombstones and rejects dropped)."""
    from pyspark.sql import functions as F

    return parsed.where(F.col("reject_code").isNull() & ~F.col("tombstone")).select(
        "key", *(name for name, _ in EVENT_COLUMNS))


def _invalid() -> "Column":
    """An invalid record: rejected by validation, and not a tombstone (those have no envelope)."""
    from pyspark.sql import functions as F

    return F.col("reject_code").isNotNull() & ~F.col("tombstone")


@dataclass(frozen=True, slots=True)
class PartitionCounts:
    """What one topic partition of the snapshot held."""

    topic: str
    partition: int
    records: int
    tombstones: int
    invalid: int

    def describe(self) -> str:
        return (f"{self.topic} p{self.partition}: {self.records} records read, {self.tombstones} tombstones,"
                f" {self.invalid} invalid")


@dataclass(frozen=True, slots=True)
class ReadCounts:
    """Counts of the read stage, per partition and in total; only these reach the driver."""

    partitions: tuple[PartitionCounts, ...]
    invalid_by_reason: dict[str, int]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def tombstones(self) -> int:
        return sum(p.tombstones for p in self.partitions)

    @property
    def invalid(self) -> int:
        return sum(p.invalid for p in self.partitions)

    def summary(self) -> dict[str, Any]:
        """The read stage's entries of the backfill summary."""
        return {
            "partitions": {f"{p.topic}/{p.partition}": {"records": p.records, "tombstones": p.tombstones,
                                                         "invalid": p.invalid} for p in self.partitions},
            "records_read": self.records,
            "tombstones": self.tombstones,
            "invalid": self.invalid,
            "invalid_by_reason": dict(sorted(self.invalid_by_reason.items())),
        }


def count_records(parsed: "DataFrame", snapshot: Mapping[str, Mapping[int, int]] | None = None) -> ReadCounts:
    """Records, tombstones and invalid records per partition, and invalid records by reason; every
    partition of ``snapshot`` (topic -> partition -> end offset) is listed, an empty one with zeros
    (a topic nothing was published to yet, e.g. a new kind's)."""
    from pyspark.sql import functions as F

    per_partition = (parsed.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(F.col("tombstone").cast("int")).alias("tombstones"),
        F.sum(_invalid().cast("int")).alias("invalid"),
    ).orderBy("topic", "partition").collect())
    reasons = {r.reject_code: r["count"]
               for r in parsed.where(_invalid()).groupBy("reject_code").count().collect()}
    counts = {(r.topic, r.partition): PartitionCounts(r.topic, r.partition, r.records, r.tombstones, r.invalid)
              for r in per_partition}
    for topic, parts in (snapshot or {}).items():
        for p in parts:
            counts.setdefault((topic, int(p)), PartitionCounts(topic, int(p), 0, 0, 0))
    return ReadCounts(tuple(counts[k] for k in sorted(counts)), reasons)


def send_dead_letters(parsed: "DataFrame", settings: Settings) -> None:
    """Invalid records to the dead-letter topic (tombstones are never sent)."""
    from pyspark.sql import functions as F

    (dead_letters(parsed.where(~F.col("tombstone"))).write.format("kafka")
     .options(**spark_kafka_options(settings, BACKFILL))
     .option("topic", settings.topic("dead_letter")).save())
