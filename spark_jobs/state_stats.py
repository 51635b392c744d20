"""How big the join's state is, per author key, and how full the timelines are: the figures of
``feedctl state-stats`` and of the stream's progress record (docs/streaming.md, "State size and rows
per timeline").

The state is read from the stream checkpoint with Spark's state data source (``format("statestore")``),
one committed batch for every state variable, so the figures of one report belong together. It
opens each partition's RocksDB store read-only at a committed version and never commits, so it can
run beside the live query. The aggregation runs in Spark (``percentile_approx``): only the summary
comes back to the driver, never a row per key.

The live figures the query reports every batch (rows, memory, RocksDB file sizes) come from its last
progress (:func:`live_state`); they are cheap but say nothing about single keys.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from feed_service.distribution import EMPTY, Distribution
from feed_service.core.state_buckets import entry_sizes
from feed_service.errors import CheckpointError
from spark_jobs.bucketed_join import CORES_STATE, EDGES_STATE, LARGE_CORES_STATE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from feed_service.settings import Settings

log = logging.getLogger("feed.state_stats")

#: The query's own checkpoint inside the stream's (``start_stream`` in spark_jobs/stream/query.py).
QUERY_SUBDIR = "join"
#: ``percentile_approx`` accuracy: the rank of a reported percentile is off by at most keys / accuracy
#: (exact below that many keys); its memory grows with it.
PERCENTILE_ACCURACY = 100_000
#: The progress figures of a stateful operator that :func:`live_state` keeps, with the custom metrics below.
LIVE_FIELDS = ("numRowsTotal", "numRowsUpdated", "numRowsRemoved", "memoryUsedBytes")
LIVE_CUSTOM_METRICS = ("rocksdbSstFileSize", "rocksdbPinnedBlocksMemoryUsage", "rocksdbTotalBytesWritten")
#: Spark job group of the stream's periodic computation, so stopping the stream can cancel it.
JOB_GROUP = "feed-state-stats"


@dataclass(frozen=True, slots=True)
class StateSize:
    """The state of one committed batch: bytes per key (all state variables of a key together) and
    per state variable (over the keys that hold it). ``batch_id`` None: nothing committed yet."""

    batch_id: int | None
    per_key: Distribution = EMPTY
    variables: Mapping[str, Distribution] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "keys": self.per_key.count, "total_bytes": self.per_key.total,
                "bytes_per_key": self.per_key.to_dict(),
                "variables": {name: d.to_dict() for name, d in self.variables.items()}}


def last_committed_batch(query_checkpoint: Path) -> int | None:
    """The newest batch id in the query's commit log, None if there is none."""
    commits = query_checkpoint / "commits"
    ids = [int(f.name) for f in commits.iterdir() if f.name.isdigit()] if commits.is_dir() else []
    return max(ids) if ids else None


def state_variables(spark: "SparkSession", query_checkpoint: Path) -> tuple[str, ...]:
    """The state variables of the checkpoint's stateful operator (transformWithState's named ones),
    from its operator metadata."""
    names: list[str] = []
    for row in spark.read.format("state-metadata").load(str(query_checkpoint)).collect():
        properties = json.loads(row.operatorProperties or "{}")
        names += [v["stateName"] for v in properties.get("stateVariables", [])]
    return tuple(names)


def _value_bytes(df: "DataFrame") -> "Column":
    """Bytes of a state row's value: the lengths of its binary and string fields, added up."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    value = df.schema["value"].dataType
    parts = [F.coalesce(F.octet_length(F.col(f"value.`{f.name}`")), F.lit(0)) for f in value.fields
             if isinstance(f.dataType, (BinaryType, StringType))]
    total = parts[0] if parts else F.lit(0)
    for part in parts[1:]:
        total = total + part
    return total.cast("long")


def state_value_sizes(spark: "SparkSession", query_checkpoint: Path, batch_id: int,
                      variables: tuple[str, ...]) -> "DataFrame":
    """One row per (state variable, join key) of batch ``batch_id``: ``var``, ``key`` (route and join
    key as a struct) and ``bytes`` of the value.

    In the bucketed layout (docs/state-buckets.md) a bucket's blob is split into its join keys'
    entries and its MapStates (edges, core parts kept apart) are read per join key, so the figures
    stay per join key in both layouts.
    """
    from pyspark.sql import functions as F

    def reader(name: str) -> "DataFrame":
        return (spark.read.format("statestore").option("path", str(query_checkpoint))
                .option("batchId", str(batch_id)).option("stateVarName", name).load())

    frames = []
    for name in variables:
        df = reader(name)
        if name == CORES_STATE:
            entry = F.explode(_bucket_entries(F.col("value.state"))).alias("entry")
            frames.append(df.select(F.col("key.route").alias("route"), entry).select(
                F.lit(name).alias("var"), F.struct("route", F.col("entry.key").alias("key")).alias("key"),
                F.col("entry.bytes").alias("bytes")))
        elif name in (EDGES_STATE, LARGE_CORES_STATE):
            frames.append(df.select(F.lit(name).alias("var"),
                                    F.struct(F.col("key.route").alias("route"),
                                             F.col("user_map_key.key").alias("key")).alias("key"),
                                    F.coalesce(F.octet_length(F.col("user_map_value.state")), F.lit(0))
                                    .cast("long").alias("bytes")))
        else:
            frames.append(df.select(F.lit(name).alias("var"), F.col("key"), _value_bytes(df).alias("bytes")))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _bucket_entries(blob: "Column") -> "Column":
    """(join key, bytes) of every entry of a bucket blob, by a Python UDF (the blob's layout is ours)."""
    from pyspark.sql import functions as F

    @F.udf("array<struct<key:string,bytes:bigint>>")
    def entries(value: bytes | None) -> list[tuple[str, int]]:
        return entry_sizes(bytes(value)) if value is not None else []

    return entries(blob)


def _distribution_columns(column: "Column", prefix: str) -> list["Column"]:
    from pyspark.sql import functions as F

    return [F.count(column).alias(f"{prefix}_count"), F.sum(column).alias(f"{prefix}_total"),
            F.percentile_approx(column, [0.5, 0.99], PERCENTILE_ACCURACY).alias(f"{prefix}_pct"),
            F.max(column).alias(f"{prefix}_max")]


def _distribution(row: Any, prefix: str) -> Distribution:
    count = row[f"{prefix}_count"]
    if not count:
        return EMPTY
    p50, p99 = row[f"{prefix}_pct"]
    return Distribution(int(count), int(row[f"{prefix}_total"]), int(p50), int(p99), int(row[f"{prefix}_max"]))


def summarize_sizes(sizes: "DataFrame", variables: tuple[str, ...]) -> tuple[Distribution, dict[str, Distribution]]:
    """Bytes per key and per state variable from :func:`state_value_sizes` rows, aggregated in Spark
    (one job): per key first, then count, total, p50/p99 and max over the keys."""
    from pyspark.sql import functions as F

    names = variables
    per_key = sizes.groupBy("key").agg(
        F.sum("bytes").alias("all"),
        *[F.sum(F.when(F.col("var") == name, F.col("bytes"))).alias(f"v{i}") for i, name in enumerate(names)])
    columns = _distribution_columns(F.col("all"), "all")
    for i in range(len(names)):
        columns += _distribution_columns(F.col(f"v{i}"), f"v{i}")
    row = per_key.agg(*columns).first()
    return _distribution(row, "all"), {name: _distribution(row, f"v{i}") for i, name in enumerate(names)}


def read_state_size(spark: "SparkSession", checkpoint: Path) -> StateSize:
    """The state size of the stream checkpoint ``checkpoint`` at its last committed batch.

    Read-only: safe while the stream runs on the same checkpoint. :class:`CheckpointError` if
    ``checkpoint`` is not a stream checkpoint or its state cannot be read.
    """
    from pyspark.errors import PySparkException

    from spark_jobs.stream.pinned import refuse_retired_operator

    query_checkpoint = checkpoint / QUERY_SUBDIR
    if not query_checkpoint.is_dir():
        raise CheckpointError(f"no stream checkpoint at {checkpoint} (expected {query_checkpoint})")
    refuse_retired_operator(checkpoint)
    batch_id = last_committed_batch(query_checkpoint)
    if batch_id is None:
        return StateSize(None)
    # The RocksDB store reports to the session's state store coordinator when it loads; the
    # coordinator exists once the session's streams manager does (docs/streaming.md).
    _ = spark.streams.active
    try:
        variables = state_variables(spark, query_checkpoint)
        per_key, per_variable = summarize_sizes(state_value_sizes(spark, query_checkpoint, batch_id, variables),
                                                variables)
    except PySparkException as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(f"cannot read the state of {checkpoint} at batch {batch_id}: {first_line}") from exc
    return StateSize(batch_id, per_key, per_variable)


def collect_stats(spark: "SparkSession", settings: "Settings", checkpoint: Path, *,
                  sample: int | None = None) -> dict[str, Any]:
    """The report of ``feedctl state-stats`` and of the stream's periodic computation: the state size
    (:func:`read_state_size`) and rows per timeline (:mod:`feed_service.store.timeline_rows`, every
    partition or ``sample`` of them), as one JSON-ready record with its time and duration."""
    from feed_service.store.timeline_rows import timeline_rows

    started = time.monotonic()
    state = read_state_size(spark, checkpoint)
    tables = timeline_rows(settings, sample=sample)
    return {"time": time.time(), "duration_s": round(time.monotonic() - started, 3), "checkpoint": str(checkpoint),
            "state": state.to_dict(), "timelines": {name: rows.to_dict() for name, rows in tables.items()}}


def live_state(progress: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The state figures of a query's last progress (``StreamingQuery.lastProgress``): per stateful
    operator the fields of :data:`LIVE_FIELDS` and the custom metrics of :data:`LIVE_CUSTOM_METRICS`
    it reports. None before the first progress or without a stateful operator.

    >>> live_state({"stateOperators": [{"operatorName": "transformWithStateInPySparkExec",
    ...     "numRowsTotal": 3, "memoryUsedBytes": 10, "customMetrics": {"rocksdbSstFileSize": 99, "x": 1}}]})
    {'numRowsTotal': 3, 'memoryUsedBytes': 10, 'rocksdbSstFileSize': 99}
    """
    operators = (progress or {}).get("stateOperators") or []
    if not operators:
        return None
    out: dict[str, Any] = {}
    for op in operators:  # one stateful operator in this job; several would add up
        custom = op.get("customMetrics") or {}
        for name, value in [*((f, op.get(f)) for f in LIVE_FIELDS), *((m, custom.get(m)) for m in LIVE_CUSTOM_METRICS)]:
            if isinstance(value, (int, float)):
                out[name] = out.get(name, 0) + value
    return out


class PeriodicStats:
    """Runs ``compute`` every ``interval`` seconds in a daemon thread (the first time after
    ``first_delay``) and keeps the latest result: expensive figures for a cheap progress record.

    A failed run is logged and kept as ``error`` beside the last good result; the next run is tried
    on schedule. ``cancel`` is called on :meth:`stop` to abort a run in flight (a Spark job group).
    """

    def __init__(self, compute: Callable[[], dict[str, Any]], interval: float, *, first_delay: float | None = None,
                 cancel: Callable[[], None] | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, not {interval}")
        self._compute = compute
        self._interval = interval
        self._first_delay = interval if first_delay is None else first_delay
        self._cancel = cancel
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._latest: dict[str, Any] | None = None
        self._error: dict[str, Any] | None = None
        self._running = False
        self._thread = threading.Thread(target=self._run, name="state-stats", daemon=True)

    def start(self) -> "PeriodicStats":
        self._thread.start()
        return self

    def _run(self) -> None:
        delay = self._first_delay
        while not self._stop.wait(delay):
            delay = self._interval
            self._running = True
            try:
                result = self._compute()
            except Exception as exc:  # noqa: BLE001 - reported in the progress record, retried next interval
                if self._stop.is_set():
                    return
                log.warning("state stats failed: %s", exc)
                with self._lock:
                    self._error = {"message": f"{type(exc).__name__}: {exc}"[:500], "time": time.time()}
                continue
            finally:
                self._running = False
            with self._lock:
                self._latest, self._error = result, None

    def latest(self) -> dict[str, Any] | None:
        """The last result (None before the first) and, if the last run failed, its ``error``."""
        with self._lock:
            if self._latest is None and self._error is None:
                return None
            return {**(self._latest or {}), **({"error": self._error} if self._error else {})}

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._cancel is not None and self._running:
            try:
                self._cancel()
            except Exception:  # noqa: BLE001 - best effort: the thread is a daemon anyway
                log.debug("cancelling state stats", exc_info=True)
        if self._thread.ident is not None:
            self._thread.join(timeout)


def stream_stats(spark: "SparkSession", settings: "Settings", checkpoint: Path, interval: float, *,
                 sample: int | None) -> PeriodicStats:
    """The stream's periodic :func:`collect_stats` on its own session, in a job group that
    :meth:`PeriodicStats.stop` cancels (not started yet)."""

    def compute() -> dict[str, Any]:
        spark.sparkContext.setJobGroup(JOB_GROUP, "state size and rows per timeline", interruptOnCancel=True)
        return collect_stats(spark, settings, checkpoint, sample=sample)

    return PeriodicStats(compute, interval, cancel=lambda: spark.sparkContext.cancelJobGroup(JOB_GROUP))
