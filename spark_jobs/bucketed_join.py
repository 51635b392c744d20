"""The join engine inside ``transformWithState`` grouped by *buckets* of join keys (docs/state-buckets.md).

Spark's Python ``transformWithState`` pays per grouping key three synchronous round trips to the
JVM's state server (set the implicit key, ``get``, ``update``) and one output Arrow batch, about
fifty times the engine's own step for a key. Grouping by ``bucket = pmod(xxhash64(key), N)``
instead pays that once per bucket: the bucket's ValueState holds the core parts of all its keys
(:mod:`feed_service.core.state_buckets`), read once and written at most once per batch, and each
key the batch touches is stepped with :func:`spark_jobs.timeline_join.run_key` as before. The
engine's output is the same; only where its state lives changes.

A key's *edges* part (keys with many follow edges, docs/fan-out.md) is not in the bucket blob: it
is large and rarely needed, so it lives in a MapState of the bucket under the key, read and written
(one round trip each) only by the steps that need it.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Iterator

from feed_service.core.state_buckets import decode_bucket, encode_bucket
from feed_service.core.stored_step import stored_parts
from spark_jobs.envelope import ROUTE_DEAD_LETTER, ROUTE_JOIN
from spark_jobs.output_rows import OUTPUT_COLUMNS, dead_letter_rows
from spark_jobs.timeline_join import JoinConfig, run_key

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The grouping column the bucketed layout adds next to ``route``.
BUCKET_COLUMN = "bucket"
#: State variable names of the bucketed layout (``feedctl state-stats`` reads them by name).
CORES_STATE = "bucket_cores"
EDGES_STATE = "bucket_edges"


def bucket_of(column: "Column | str", buckets: int) -> "Column":
    """``pmod(xxhash64(column), buckets)`` as an int: the bucket of a join key, computed in the JVM
    (a stable hash: the same key lands in the same bucket in every batch and every release)."""
    from pyspark.sql import functions as F

    if buckets < 1:
        raise ValueError(f"state buckets must be at least 1, got {buckets}")
    return F.pmod(F.xxhash64(column if not isinstance(column, str) else F.col(column)), F.lit(buckets)).cast("int")


def bucketed_processor(config: JoinConfig) -> Any:
    """A ``StatefulProcessor`` (Row API) for changes grouped by (``route``, ``bucket``)."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    output_row = Row(*OUTPUT_COLUMNS)
    blob_schema = StructType([StructField("state", BinaryType(), True)])
    key_schema = StructType([StructField("key", StringType(), True)])

    class BucketedJoinProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.cores = handle.getValueState(CORES_STATE, blob_schema)
            self.edges = handle.getMapState(EDGES_STATE, key_schema, blob_schema)

        def _load(self) -> dict[str, bytes]:
            value = self.cores.get()  # one round trip; None for a bucket without state
            return decode_bucket(value[0]) if value is not None and value[0] is not None else {}

        def _edges_of(self, key: str) -> bytes | None:
            value = self.edges.getValue((key,))
            return bytes(value[0]) if value is not None and value[0] is not None else None

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            if key[0] == ROUTE_DEAD_LETTER:
                for r in dead_letter_rows(rows):
                    yield output_row(*r)
                return
            by_key: dict[str, list[Any]] = {}
            for row in rows:
                by_key.setdefault(row.key, []).append(row)
            cores = self._load()
            changed = False
            out: list[tuple[Any, ...]] = []
            for join_key, key_rows in by_key.items():
                done, key_out = run_key(cores.get(join_key), partial(self._edges_of, join_key), key_rows, config,
                                        key=join_key)
                if done is not None:
                    if done.core is not None:
                        cores[join_key] = done.core
                        changed = True
                    if done.edges is not None:
                        self.edges.updateValue((join_key,), (done.edges,))
                    elif done.clear_edges:
                        self.edges.removeKey((join_key,))
                out += key_out
            if changed:
                self.cores.update((encode_bucket(cores),))
            for r in out:
                yield output_row(*r)

        def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
            # One row per bucket (:func:`bucketed_initial_state`): its keys' whole-state blobs.
            cores = self._load()
            for entry in initialState.states:
                core, edges = stored_parts(bytes(entry.state))
                cores[entry.key] = core
                if edges is not None:
                    self.edges.updateValue((entry.key,), (edges,))
            self.cores.update((encode_bucket(cores),))

        def close(self) -> None:
            pass

    return BucketedJoinProcessor()


def bucketed_initial_state(initial_state: "DataFrame", buckets: int) -> "DataFrame":
    """A backfill's per-key states (``key``, ``state``) as one row per bucket (``route``, ``bucket``,
    ``states`` = array of (key, state)): ``handleInitialState`` then writes each bucket's blob once
    instead of once per key."""
    from pyspark.sql import functions as F

    return (initial_state
            .select(F.lit(ROUTE_JOIN).alias("route"), bucket_of("key", buckets).alias(BUCKET_COLUMN),
                    F.struct("key", "state").alias("entry"))
            .groupBy("route", BUCKET_COLUMN).agg(F.collect_list("entry").alias("states")))
