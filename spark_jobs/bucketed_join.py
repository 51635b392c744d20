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
(one round trip each) only by the steps that need it. A key whose core part outgrows
:data:`INLINE_CORE_LIMIT` (an author with many retained tweets) moves to another MapState the same
way, its blob entry left empty: every batch that touches a bucket rewrites the bucket's blob, so
the blob holds small keys only and its size stays bounded by keys × limit.
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
LARGE_CORES_STATE = "bucket_large_cores"

INLINE_CORE_LIMIT = 8192
"""Bytes of a core part kept in the bucket's blob; a larger one is kept apart (docs/state-buckets.md:
rewriting 8 KB with every touched bucket costs about what the two round trips of a key kept apart
cost when it is touched). Changing it is safe: a key moves at its next write."""
APART = b""
"""The blob entry of a key whose core part is kept apart (a real core part is never empty)."""


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
            self.large = handle.getMapState(LARGE_CORES_STATE, key_schema, blob_schema)

        def _load(self) -> dict[str, bytes]:
            value = self.cores.get()  # one round trip; None for a bucket without state
            return decode_bucket(value[0]) if value is not None and value[0] is not None else {}

        def _edges_of(self, key: str) -> bytes | None:
            value = self.edges.getValue((key,))
            return bytes(value[0]) if value is not None and value[0] is not None else None

        def _core_of(self, cores: dict[str, bytes], key: str) -> bytes | None:
            core = cores.get(key)
            if core != APART:
                return core
            value = self.large.getValue((key,))
            if value is None or value[0] is None:
                raise ValueError(f"state of {key!r}: its bucket says its core part is kept apart, but there is none")
            return bytes(value[0])

        def _put_core(self, cores: dict[str, bytes], key: str, core: bytes) -> bool:
            """Store ``core`` inline or apart; True if the bucket's blob changed."""
            was_apart = cores.get(key) == APART
            if len(core) > INLINE_CORE_LIMIT:
                self.large.updateValue((key,), (core,))
                cores[key] = APART
                return not was_apart
            if was_apart:
                self.large.removeKey((key,))
            cores[key] = core
            return True

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
                done, key_out = run_key(self._core_of(cores, join_key), partial(self._edges_of, join_key), key_rows,
                                        config, key=join_key)
                if done is not None:
                    if done.core is not None:
                        changed = self._put_core(cores, join_key, done.core) or changed
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
            for entry in initialState.states:  # a Row, or a dict as PySpark 4.2 hands over structs in arrays
                key = entry["key"]
                core, edges = stored_parts(bytes(entry["state"]))
                self._put_core(cores, key, core)
                if edges is not None:
                    self.edges.updateValue((key,), (edges,))
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
