"""The join engine inside Spark's keyed stateful operator.

Changes are grouped by join key (tweet author = followee = profile owner) and each group runs one
:func:`feed_service.core.join.step` against the key's state. Per key and micro-batch the state is
read once and written at most once, as one encoded blob (``shared/design/spark-notes.md``: the cost
of Python stateful operators grows with state calls, not bytes).

Output rows are compact: one row per (op, tweet, follower list); the sink explodes the lists. The
row's ``kind`` says where it goes: ``timeline``, ``tweet`` or ``profile`` (Cassandra tables) or
``dead_letter`` (a rejected record passed through, for the dead-letter topic).

Operator: ``applyInPandasWithState`` (default) hands the state to Python inside the Arrow batch,
with no per-call round trip to the JVM; ``transformWithStateInPandas`` is kept as the alternative
measured in ``bench/bench_stream.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, TypeAlias

from feed_service.core.events import Event, FollowChange, ProfileVersion, TweetDelete, TweetUpsert
from feed_service.core.join import DEFAULT_INBOX_CAP, StepResult, step
from feed_service.core.state import decode_state, encode_state
from spark_jobs.envelope import ROUTE_DEAD_LETTER, ROUTE_JOIN

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

Operator: TypeAlias = Literal["applyInPandasWithState", "transformWithStateInPandas"]
OPERATORS: tuple[Operator, ...] = ("applyInPandasWithState", "transformWithStateInPandas")

OUTPUT_FIELDS: tuple[tuple[str, str], ...] = (
    ("kind", "string"),
    ("op", "string"),
    ("tweet_id", "string"),
    ("author_id", "string"),
    ("created_at", "bigint"),
    ("version", "bigint"),
    ("text", "string"),
    ("profile_version", "bigint"),
    ("timeline_ids", "array<string>"),
    ("user_id", "string"),
    ("display_name", "string"),
    ("avatar_url", "string"),
    ("bio", "string"),
    ("ts", "bigint"),
    ("dl_key", "string"),
    ("dl_value", "string"),
)
OUTPUT_SCHEMA = ", ".join(f"{name} {sql_type}" for name, sql_type in OUTPUT_FIELDS)
OUTPUT_COLUMNS = [name for name, _ in OUTPUT_FIELDS]
STATE_SCHEMA = "state binary"


def events_from_frame(pdf: "pd.DataFrame") -> list[Event]:
    """Typed events from validated rows (validation already happened in the JVM: no re-parse)."""
    events: list[Event] = []
    none = lambda v: None if v is None or v != v else v  # noqa: E731 - pandas gives NaN for nulls
    for r in pdf.itertuples(index=False):
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


def result_rows(result: StepResult) -> list[tuple[Any, ...]]:
    """One step's outputs as compact output rows (see :data:`OUTPUT_FIELDS`)."""
    ts = result.ts
    rows: list[tuple[Any, ...]] = [
        ("timeline", d.op, e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.profile_version,
         list(d.timeline_ids), None, None, None, None, ts, None, None)
        for d in result.deltas
        for e in (d.entry,)
    ]
    for t in result.tweets:
        e = t.entry
        if e is None:
            rows.append(("tweet", "delete", t.tweet_id, t.author_id, None, None, None, None, None,
                         None, None, None, None, ts, None, None))
        else:
            rows.append(("tweet", "upsert", e.tweet_id, e.author_id, e.created_at, e.version, e.text,
                         e.profile_version, None, None, None, None, None, ts, None, None))
    for p in result.profiles:
        rows.append(("profile", "upsert", None, None, None, p.version, None, None, None,
                     p.user_id, p.display_name, p.avatar_url, p.bio, ts, None, None))
    return rows


def run_key(
    state_blob: bytes | None, frames: Iterator["pd.DataFrame"], *, inbox_cap: int, clock_start: int
) -> tuple[bytes | None, list[tuple[Any, ...]]]:
    """One key, one batch: (new state blob or None if unchanged, output rows)."""
    events = [ev for pdf in frames for ev in events_from_frame(pdf)]
    if not events:
        return None, []
    previous = decode_state(state_blob) if state_blob is not None else None
    result = step(previous, events, inbox_cap=inbox_cap, clock_start=clock_start)
    blob = encode_state(result.state)
    return (None if blob == state_blob else blob), result_rows(result)


def dead_letter_rows(frames: Iterator["pd.DataFrame"]) -> list[tuple[Any, ...]]:
    """Rejected records pass through the operator untouched, to be published by the sink."""
    return [("dead_letter", None, None, None, None, None, None, None, None, None, None, None, None, None, k, v)
            for pdf in frames for k, v in zip(pdf["dl_key"], pdf["dl_value"])]


def _frame(rows: list[tuple[Any, ...]]) -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame.from_records(rows, columns=OUTPUT_COLUMNS)


def apply_in_pandas_fn(inbox_cap: int, clock_start: int) -> Callable:
    """The function for ``applyInPandasWithState``: (key, frames, GroupState) -> output frames."""

    def fn(key: tuple, frames: Iterator["pd.DataFrame"], state: Any) -> Iterator["pd.DataFrame"]:
        if key[0] == ROUTE_DEAD_LETTER:
            yield _frame(dead_letter_rows(frames))
            return
        blob = state.get[0] if state.exists else None
        new_blob, rows = run_key(blob, frames, inbox_cap=inbox_cap, clock_start=clock_start)
        if new_blob is not None:
            state.update((new_blob,))
        if rows:
            yield _frame(rows)

    return fn


def transform_with_state_processor(inbox_cap: int, clock_start: int) -> Any:
    """A ``StatefulProcessor`` for ``transformWithStateInPandas`` with one binary ValueState per key."""
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    class TimelineJoinProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            schema = StructType([StructField("state", BinaryType(), True)])
            self.state = handle.getValueState("author_state", schema)

        def handleInputRows(self, key: Any, rows: Iterator["pd.DataFrame"], timerValues: Any) -> Iterator["pd.DataFrame"]:
            if key[0] == ROUTE_DEAD_LETTER:
                yield _frame(dead_letter_rows(rows))
                return
            blob = self.state.get()[0] if self.state.exists() else None
            new_blob, out = run_key(bytes(blob) if blob is not None else None, rows,
                                    inbox_cap=inbox_cap, clock_start=clock_start)
            if new_blob is not None:
                self.state.update((new_blob,))
            if out:
                yield _frame(out)

        def handleInitialState(self, key: Any, initialState: "pd.DataFrame", timerValues: Any) -> None:
            # A backfill's per-key state (bootstrap of a new checkpoint, first batch only).
            self.state.update((bytes(initialState["state"].iloc[0]),))

        def close(self) -> None:
            pass

    return TimelineJoinProcessor()


def join_timelines(
    changes: "DataFrame",
    *,
    inbox_cap: int = DEFAULT_INBOX_CAP,
    clock_start: int = 0,
    operator: Operator = "applyInPandasWithState",
    initial_state: "DataFrame | None" = None,
) -> "DataFrame":
    """Keyed stateful join of routed changes (``route``, ``key``, event and dead-letter columns, as
    :func:`spark_jobs.envelope.routed_changes` makes them) into compact output rows.

    ``initial_state`` (columns ``key``, ``state`` = :func:`encode_state` blob) seeds a new
    checkpoint's state, e.g. from a backfill; only ``transformWithStateInPandas`` supports it.
    """
    grouped = changes.groupBy("route", "key")
    if initial_state is not None and operator != "transformWithStateInPandas":
        raise ValueError("initial_state needs operator='transformWithStateInPandas'")
    if operator == "applyInPandasWithState":
        from pyspark.sql.streaming.state import GroupStateTimeout

        return grouped.applyInPandasWithState(
            apply_in_pandas_fn(inbox_cap, clock_start),
            outputStructType=OUTPUT_SCHEMA,
            stateStructType=STATE_SCHEMA,
            outputMode="append",
            timeoutConf=GroupStateTimeout.NoTimeout,
        )
    if operator == "transformWithStateInPandas":
        from pyspark.sql import functions as F

        return grouped.transformWithStateInPandas(
            statefulProcessor=transform_with_state_processor(inbox_cap, clock_start),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="None",
            initialState=(initial_state.withColumn("route", F.lit(ROUTE_JOIN)).groupBy("route", "key")
                          if initial_state is not None else None),
        )
    raise ValueError(f"unknown operator {operator!r}; expected one of {OPERATORS}")
