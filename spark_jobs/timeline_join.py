"""The join engine inside Spark's keyed stateful operator.

Changes are grouped by join key (tweet author = followee = profile owner) and each group runs one
:func:`feed_service.core.join.step` against the key's state. Per key and micro-batch the state is
read once and written at most once, as one encoded blob (``shared/design/spark-notes.md``: the cost
of Python stateful operators grows with state calls, not bytes).

Output rows are compact (:mod:`spark_jobs.output_rows`): one row per (op, tweet, follower list);
the sink explodes the lists.

Operators (measured side by side in ``bench/bench_stream.py``; the checkpoint records which one
it was created with): ``transformWithState`` (Row API, the default) hands each key's rows over as
``Row`` objects and takes ``Row`` objects back; ``transformWithStateInPandas`` builds a pandas frame
per key on the way in and on the way out, which here doubles the cost of a micro-batch;
``applyInPandasWithState`` ships the state inside the Arrow batch (no state round trips) but builds
the same per-key frames, and takes no initial state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Literal, TypeAlias

from feed_service.core.events import Event, FollowChange, ProfileVersion, TweetDelete, TweetUpsert
from feed_service.core.join import DEFAULT_INBOX_CAP, step
from feed_service.core.state import decode_state, encode_state
from spark_jobs.envelope import ROUTE_DEAD_LETTER, ROUTE_JOIN
from spark_jobs.output_rows import OUTPUT_COLUMNS, OUTPUT_FIELDS, OUTPUT_SCHEMA, dead_letter_rows, result_rows

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

Operator: TypeAlias = Literal["transformWithState", "transformWithStateInPandas", "applyInPandasWithState"]
OPERATORS: tuple[Operator, ...] = ("transformWithState", "transformWithStateInPandas", "applyInPandasWithState")
#: The operators of the transformWithState family: they take an initial state (backfill bootstrap).
INITIAL_STATE_OPERATORS: tuple[Operator, ...] = ("transformWithState", "transformWithStateInPandas")

STATE_SCHEMA = "state binary"


def events_from_rows(rows: Iterable[Any]) -> list[Event]:
    """Typed events from validated rows (validation already happened in the JVM: no re-parse).

    ``rows`` are records with the routed columns as attributes: Spark ``Row`` objects (Row API) or
    the named tuples of ``DataFrame.itertuples`` (pandas APIs, where a null may arrive as NaN).
    """
    events: list[Event] = []
    none = lambda v: None if v is None or v != v else v  # noqa: E731 - pandas gives NaN for nulls
    for r in rows:
        if r.type == "tweet":
            if r.op == "upsert":
                events.append(TweetUpsert(r.tweet_id, r.author_id, int(r.version), int(r.created_at), r.text,
                                          int(r.profile_version)))
            else:
                events.append(TweetDelete(r.tweet_id, r.author_id, int(r.version)))
        elif r.type == "follow":
            events.append(FollowChange(r.follower_id, r.followee_id, int(r.version), r.op))
        else:
            events.append(ProfileVersion(r.user_id, int(r.version), r.display_name, none(r.avatar_url),
                                         none(r.bio)))
    return events


_BIGINT_OUTPUTS = [name for name, sql_type in OUTPUT_FIELDS if sql_type == "bigint"]
_BIGINT_INDEX = {name: OUTPUT_COLUMNS.index(name) for name in _BIGINT_OUTPUTS}


def _frame_rows(frames: Iterator["pd.DataFrame"]) -> Iterator[Any]:
    for pdf in frames:
        yield from pdf.itertuples(index=False)


def run_key(
    state_blob: bytes | None, rows: Iterable[Any], *, inbox_cap: int, clock_start: int
) -> tuple[bytes | None, list[tuple[Any, ...]]]:
    """One key, one batch: (new state blob or None if unchanged, output rows).

    ``step`` returns the very state it was given when the batch changed nothing (stale or duplicate
    changes), so identity says "unchanged" without encoding the state to compare bytes.
    """
    events = events_from_rows(rows)
    if not events:
        return None, []
    previous = decode_state(state_blob) if state_blob is not None else None
    result = step(previous, events, inbox_cap=inbox_cap, clock_start=clock_start)
    blob = None if result.state is previous else encode_state(result.state)
    return blob, result_rows(result)


def _frame(rows: list[tuple[Any, ...]]) -> "pd.DataFrame":
    """Output rows as a frame whose bigint columns are nullable Int64: with plain numpy dtypes a
    column holding a null becomes float64, which rounds integers above 2**53."""
    import pandas as pd

    frame = pd.DataFrame.from_records(rows, columns=OUTPUT_COLUMNS)
    for name in _BIGINT_OUTPUTS:
        i = _BIGINT_INDEX[name]
        frame[name] = pd.array([r[i] for r in rows], dtype="Int64")
    return frame


def apply_in_pandas_fn(inbox_cap: int, clock_start: int) -> Callable:
    """The function for ``applyInPandasWithState``: (key, frames, GroupState) -> output frames."""

    def fn(key: tuple, frames: Iterator["pd.DataFrame"], state: Any) -> Iterator["pd.DataFrame"]:
        if key[0] == ROUTE_DEAD_LETTER:
            yield _frame(dead_letter_rows(_frame_rows(frames)))
            return
        blob = state.get[0] if state.exists else None
        new_blob, rows = run_key(blob, _frame_rows(frames), inbox_cap=inbox_cap, clock_start=clock_start)
        if new_blob is not None:
            state.update((new_blob,))
        if rows:
            yield _frame(rows)

    return fn


def _stored_blob(state: Any) -> bytes | None:
    """The key's state blob, in one round trip (``get`` answers None for a key without state)."""
    value = state.get()
    return bytes(value[0]) if value is not None and value[0] is not None else None


def transform_with_state_processor(inbox_cap: int, clock_start: int, *, rows_api: bool) -> Any:
    """A ``StatefulProcessor`` with one binary ValueState per key, for ``transformWithState``
    (``rows_api``: Spark ``Row`` in and out) or ``transformWithStateInPandas`` (pandas frames).

    Per key and batch it makes two state calls, a ``get`` and at most one ``update``: each is a
    socket round trip to the JVM (``shared/design/spark-notes.md``).
    """
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    output_row = Row(*OUTPUT_COLUMNS)

    def inputs(rows: Iterator[Any]) -> Iterator[Any]:
        return rows if rows_api else _frame_rows(rows)

    def outputs(out: list[tuple[Any, ...]]) -> Iterator[Any]:
        if rows_api:
            return (output_row(*r) for r in out)
        return iter((_frame(out),))

    class TimelineJoinProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            schema = StructType([StructField("state", BinaryType(), True)])
            self.state = handle.getValueState("author_state", schema)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            if key[0] == ROUTE_DEAD_LETTER:
                yield from outputs(dead_letter_rows(inputs(rows)))
                return
            new_blob, out = run_key(_stored_blob(self.state), inputs(rows),
                                    inbox_cap=inbox_cap, clock_start=clock_start)
            if new_blob is not None:
                self.state.update((new_blob,))
            if out:
                yield from outputs(out)

        def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
            # A backfill's per-key state (bootstrap of a new checkpoint, first batch only).
            blob = initialState.state if rows_api else initialState["state"].iloc[0]
            self.state.update((bytes(blob),))

        def close(self) -> None:
            pass

    return TimelineJoinProcessor()


def join_timelines(
    changes: "DataFrame",
    *,
    inbox_cap: int = DEFAULT_INBOX_CAP,
    clock_start: int = 0,
    operator: Operator = "transformWithState",
    initial_state: "DataFrame | None" = None,
) -> "DataFrame":
    """Keyed stateful join of routed changes (``route``, ``key``, event and dead-letter columns, as
    :func:`spark_jobs.envelope.routed_changes` makes them) into compact output rows.

    ``initial_state`` (columns ``key``, ``state`` = :func:`encode_state` blob) seeds a new
    checkpoint's state, e.g. from a backfill; only the transformWithState operators support it.
    """
    grouped = changes.groupBy("route", "key")
    if initial_state is not None and operator not in INITIAL_STATE_OPERATORS:
        raise ValueError(f"initial_state needs one of the operators {INITIAL_STATE_OPERATORS}")
    if operator == "applyInPandasWithState":
        from pyspark.sql.streaming.state import GroupStateTimeout

        return grouped.applyInPandasWithState(
            apply_in_pandas_fn(inbox_cap, clock_start),
            outputStructType=OUTPUT_SCHEMA,
            stateStructType=STATE_SCHEMA,
            outputMode="append",
            timeoutConf=GroupStateTimeout.NoTimeout,
        )
    if operator in INITIAL_STATE_OPERATORS:
        from pyspark.sql import functions as F

        rows_api = operator == "transformWithState"
        transform = grouped.transformWithState if rows_api else grouped.transformWithStateInPandas
        return transform(
            statefulProcessor=transform_with_state_processor(inbox_cap, clock_start, rows_api=rows_api),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="None",
            initialState=(initial_state.withColumn("route", F.lit(ROUTE_JOIN)).groupBy("route", "key")
                          if initial_state is not None else None),
        )
    raise ValueError(f"unknown operator {operator!r}; expected one of {OPERATORS}")
