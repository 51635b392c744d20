"""The join engine inside Spark's keyed stateful operator, one state per join key (the layout of
checkpoints created before state buckets, or with ``FEED_STATE_BUCKETS=0``: spark_jobs/stateful_join.py).

Changes are grouped by join key (tweet author = followee = profile owner = muted user; a block is
in the groups of both its users, spark_jobs/envelope.py) and each group runs one
:func:`feed_service.core.join.step` against the key's state. Per key and micro-batch the state is
read once and written at most once, as one encoded blob (docs/design.md, "Spark's Python stateful operators": the cost
of Python stateful operators grows with state calls, not bytes).

Output rows are compact (:mod:`spark_jobs.output_rows`): one row per (op, tweet, follower list);
the sink explodes the lists. Each row carries ``source_ms``, the Kafka timestamp of the input row
that caused it (:mod:`feed_service.core.change_sources`), computed whether or not a history horizon
is configured.

Operator: ``transformWithState`` (Row API), each key's rows handed over as ``Row`` objects and
``Row`` objects given back; the checkpoint records it (spark_jobs/stream/pinned.py). The pandas operators
(``transformWithStateInPandas``, ``applyInPandasWithState``) are retired: they built a pandas frame
per key on the way in and out, about twice the cost of a micro-batch, and a checkpoint made with one
is refused at start (docs/streaming.md, "One stateful operator").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import json

from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    RefillRequest,
    RepostChange,
    TweetDelete,
    TweetUpsert,
    event_to_json,
)
from feed_service.core.change_sources import step_sources
from feed_service.core.retention import BEYOND_HORIZON, Retention, beyond_horizon_reason
from feed_service.core.stored_step import StoredStep, step_stored, stored_parts
from spark_jobs.envelope import ROUTE_DEAD_LETTER
from spark_jobs.output_rows import OUTPUT_COLUMNS, dead_letter_rows, message_rows, result_rows

def events_from_rows(rows: Iterable[Any]) -> list[Event]:
    """Typed events from validated rows (validation already happened in the JVM: no re-parse).

    ``rows`` are records with the routed columns as attributes: Spark ``Row`` objects (the stream) or
    the named tuples of ``DataFrame.itertuples`` (the backfill's pandas UDF, where a null may arrive as NaN).
    """
    events: list[Event] = []
    def none(v: Any) -> Any:
        """None for a null as pandas hands it over: NaN, or pd.NA in a nullable column (which
        refuses ``!=`` in a boolean context)."""
        if v is None:
            return None
        try:
            return None if v != v else v
        except TypeError:  # pd.NA
            return None
    for r in rows:
        if r.type == "tweet":
            if r.op == "upsert":
                events.append(TweetUpsert(r.tweet_id, r.author_id, int(r.version), int(r.created_at), r.text,
                                          int(r.profile_version), none(r.in_reply_to_tweet_id),
                                          none(r.in_reply_to_author_id)))
            else:
                events.append(TweetDelete(r.tweet_id, r.author_id, int(r.version)))
        elif r.type == "follow":  # show_reposts: null when absent, on an unfollow too (the default, True)
            show_reposts = none(r.show_reposts)
            events.append(FollowChange(r.follower_id, r.followee_id, int(r.version), r.op,
                                       True if show_reposts is None else bool(show_reposts)))
        elif r.type == "block":
            events.append(BlockChange(r.blocker_id, r.blocked_id, int(r.version), r.op))
        elif r.type == "mute":
            events.append(MuteChange(r.muter_id, r.muted_id, int(r.version), r.op))
        elif r.type == "repost":  # an unrepost's created_at and profile_version are null (parse_changes)
            created_at, profile_version = none(r.created_at), none(r.profile_version)
            events.append(RepostChange(r.reposter_id, r.tweet_id, r.author_id, int(r.version), r.op,
                                       None if created_at is None else int(created_at),
                                       None if profile_version is None else int(profile_version)))
        elif r.type == "refill":
            events.append(RefillRequest(r.reader_id, r.author_id, int(r.below_created_at), r.below_tweet_id,
                                        int(r.need)))
        else:
            events.append(ProfileVersion(r.user_id, int(r.version), r.display_name, none(r.avatar_url),
                                         none(r.bio)))
    return events


@dataclass(frozen=True, slots=True)
class JoinConfig:
    """The view's shape settings, the same for every step of a checkpoint."""

    inbox_cap: int
    pull_threshold: int
    clock_start: int
    horizon_ms: int | None = None
    """History horizon (docs/retention.md); None keeps everything."""

    @property
    def retention(self) -> Retention:
        return Retention(self.horizon_ms)


def run_key(core: bytes | None, load_edges: Callable[[], bytes | None], rows: Iterable[Any],
            config: JoinConfig, *, key: str | None = None) -> tuple[StoredStep | None, list[tuple[Any, ...]]]:
    """One key, one batch: the stored step (None without events) and its output rows.

    The step reads the key's edges part only if it needs it (:func:`step_stored`), and says which
    parts to write back: none when the batch changed nothing (stale or duplicate changes). ``key`` is
    the group's join key: a new key's changes do not name it when they are all blocks between the
    same two users (each user's key gets the block).
    """
    rows = list(rows)
    events = events_from_rows(rows)
    if not events:
        return None, []
    event_times = [_event_ms(r) for r in rows]
    known = [t for t in event_times if t is not None]
    # Lateness is judged only when every change has its Kafka timestamp (hand-made frames have none).
    times = event_times if config.horizon_ms is not None and len(known) == len(event_times) else None
    retention = config.retention
    done = step_stored(core, load_edges, events, inbox_cap=config.inbox_cap,
                       pull_threshold=config.pull_threshold, clock_start=config.clock_start,
                       times=times, retention=retention, key=key)
    sources = step_sources(done.result, events, event_times) if known and done.result.emitted else None
    out = result_rows(done.result, sources)
    out += message_rows(done.side, max(known) if known else None)
    if done.result.late:
        out += dead_letter_rows(_LateLetter(rows[i].dl_key, _late_value(events[i], rows[i], done.result.state.watermark,
                                                                       retention))
                                for i in done.result.late)
    return done, out


def _event_ms(row: Any) -> int | None:
    """A routed row's Kafka timestamp (ms), or None: absent (a hand-made row), null, or NaN / NA
    (pandas frames)."""
    t = getattr(row, "event_time", None)
    if t is None:
        return None
    try:
        return int(t)
    except (TypeError, ValueError):  # float NaN: ValueError; pandas.NA: TypeError
        return None


@dataclass(frozen=True, slots=True)
class _LateLetter:
    dl_key: str
    dl_value: str


def _late_value(event: Event, row: Any, watermark: int, retention: Retention) -> str:
    """The dead-letter value of a change beyond the horizon, in the shape of the JVM-built ones
    (:func:`spark_jobs.envelope.dead_letter_columns`); the record is the event re-serialized."""
    topic, partition, offset = str(row.dl_key).rsplit("/", 2)
    return json.dumps({
        "reason_code": BEYOND_HORIZON,
        "reason": beyond_horizon_reason(int(row.event_time), watermark, retention),
        "source_topic": topic, "source_partition": int(partition), "source_offset": int(offset),
        "value": json.dumps(event_to_json(event), ensure_ascii=False, separators=(",", ":")),
    }, ensure_ascii=False, separators=(",", ":"))


def _stored(state: Any) -> bytes | None:
    """A ValueState's blob, in one round trip (``get`` answers None for a key without state)."""
    value = state.get()
    return bytes(value[0]) if value is not None and value[0] is not None else None


def transform_with_state_processor(config: JoinConfig) -> Any:
    """A ``StatefulProcessor`` for ``transformWithState``: Spark ``Row`` objects in and out.

    Two binary ValueStates per key, the state's core part and (for keys with many follow edges) its
    edges part (docs/fan-out.md). Each state call is a socket round trip to the JVM, so a batch of
    an ordinary key makes two: a ``get`` of the core and at most one ``update``; the edges part is
    read and written only when the step needs it.
    """
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    output_row = Row(*OUTPUT_COLUMNS)

    def outputs(out: list[tuple[Any, ...]]) -> Iterator[Any]:
        return (output_row(*r) for r in out)

    class TimelineJoinProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            schema = StructType([StructField("state", BinaryType(), True)])
            self.core = handle.getValueState("author_state", schema)
            self.edges = handle.getValueState("author_edges", schema)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            if key[0] == ROUTE_DEAD_LETTER:
                yield from outputs(dead_letter_rows(rows))
                return
            done, out = run_key(_stored(self.core), lambda: _stored(self.edges), rows, config, key=key[1])
            if done is not None:
                self._write(done)
            if out:
                yield from outputs(out)

        def _write(self, done: StoredStep) -> None:
            if done.core is not None:
                self.core.update((done.core,))
            if done.edges is not None:
                self.edges.update((done.edges,))
            elif done.clear_edges:
                self.edges.clear()

        def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
            # A backfill's per-key state (bootstrap of a new checkpoint, first batch only).
            core, edges = stored_parts(bytes(initialState.state))
            self.core.update((core,))
            if edges is not None:
                self.edges.update((edges,))

        def close(self) -> None:
            pass

    return TimelineJoinProcessor()
