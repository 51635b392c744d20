"""A harness for the streaming job's ``StatefulProcessor`` without a query, a session or a JVM
(tests/unit/test_stream_processor.py, test_bucketed_join.py, test_view_changes.py).

In the style of PySpark's own transformWithState tests (``TwsTester``): an in-memory state handle
that logs every state call, state seeded per key, routed rows fed one batch at a time as
``pyspark.sql.Row`` objects (the columns :func:`spark_jobs.envelope.routed_changes` makes), and the
output rows the processor must give. PySpark's ``TwsTester`` hands the processor a one-column
grouping key; this job groups by (route, key), so the harness is a small one of its own. Importing it
starts no JVM."""

from __future__ import annotations

import json
from typing import Any, Iterable

from pyspark.sql import Row

from feed_service.core.events import Event, FollowChange, TweetUpsert, event_to_json, join_key
from feed_service.core.join import step
from feed_service.core.rows import Entry
from feed_service.core.state import AuthorState, decode_parts, encode_state
from feed_service.core.stored_step import stored_parts
from spark_jobs.envelope import EVENT_COLUMNS, ROUTE_DEAD_LETTER, ROUTE_JOIN
from spark_jobs.output_rows import OUTPUT_COLUMNS
from spark_jobs.timeline_join import JoinConfig, transform_with_state_processor

EVENT_NAMES = tuple(name for name, _ in EVENT_COLUMNS)
#: The columns of :func:`spark_jobs.envelope.routed_changes`, in order.
RoutedRow = Row("route", "key", *EVENT_NAMES, "event_time", "dl_key", "dl_value")
#: The processor's output rows (:data:`spark_jobs.output_rows.OUTPUT_COLUMNS`).
OutputRow = Row(*OUTPUT_COLUMNS)
NO_EXTRA = (None,) * (len(OUTPUT_COLUMNS) - 17)  # the reply and repost columns
#: The processor's two value states (the core part, the edges part) and the topic the rows come from.
STATE_NAME = "author_state"
EDGES_NAME = "author_edges"
TWEETS_TOPIC = "feed.tweets.v1"


class FakeValueState:
    """One ValueState: a value per grouping key (the handle's current key), every call logged."""

    def __init__(self, handle: "FakeHandle") -> None:
        self.handle = handle
        self.values: dict[Any, tuple] = {}
        self.calls: list[tuple[str, Any]] = []

    def _log(self, call: str) -> Any:
        self.handle.calls.append((call, self.handle.key))
        self.calls.append((call, self.handle.key))
        return self.handle.key

    def exists(self) -> bool:
        return self._log("exists") in self.values

    def get(self) -> tuple | None:
        return self.values.get(self._log("get"))

    def update(self, value: tuple) -> None:
        self.values[self._log("update")] = value

    def clear(self) -> None:
        self.values.pop(self._log("clear"), None)


class FakeHandle:
    """The ``StatefulProcessorHandle`` the processor gets in ``init``: ValueState only."""

    def __init__(self) -> None:
        self.key: Any = None
        self.calls: list[tuple[str, Any]] = []
        self.schemas: dict[str, Any] = {}
        self.value_states: dict[str, FakeValueState] = {}

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> FakeValueState:
        self.schemas[stateName] = schema
        return self.value_states.setdefault(stateName, FakeValueState(self))


class Harness:
    """Runs the processor the way transformWithState does: ``init`` once, then one call per key."""

    def __init__(self, *, inbox_cap: int = 800, clock_start: int = 0, horizon_ms: int | None = None) -> None:
        self.processor = transform_with_state_processor(JoinConfig(inbox_cap, 2000, clock_start, horizon_ms))
        self.handle = FakeHandle()
        self.processor.init(self.handle)

    @property
    def _state(self) -> FakeValueState:
        return self.handle.value_states[STATE_NAME]

    def seed(self, key: tuple[str, str], state: AuthorState) -> bytes:
        """Put a state's stored parts under ``key`` as the state store would return them (binary:
        bytearray); returns the core part."""
        core, edges = stored_parts(encode_state(state))
        self._state.values[key] = (bytearray(core),)
        if edges is not None:
            self.handle.value_states[EDGES_NAME].values[key] = (bytearray(edges),)
        return core

    def blob(self, key: tuple[str, str]) -> bytes | None:
        value = self._state.values.get(key)
        return None if value is None else bytes(value[0])

    def peek(self, key: tuple[str, str]) -> AuthorState | None:
        blob = self.blob(key)
        edges = self.handle.value_states[EDGES_NAME].values.get(key)
        return None if blob is None else decode_parts(blob, None if edges is None else bytes(edges[0]))

    def feed(self, key: tuple[str, str], rows: Iterable[Row]) -> list[Row]:
        """One micro-batch of one key; returns the output rows but the messages to the per-reader steps, which go to ``self.messages``."""
        self.handle.key = key
        self.handle.calls.clear()
        rows = list(rows)
        out = list(self.processor.handleInputRows(key, iter(rows), None))
        self.messages = [r for r in out if r.kind == "per_reader"]
        return [r for r in out if r.kind != "per_reader"]

    def initial(self, key: tuple[str, str], state: AuthorState) -> None:
        """``handleInitialState`` with a backfill's row (columns key, state, route)."""
        self.handle.key = key
        self.handle.calls.clear()
        initial = Row(key=key[1], state=bytearray(encode_state(state)), route=key[0])
        self.processor.handleInitialState(key, initial, None)


def routed(event: Event, event_time: int | None = None, offset: int = 0, *, key: str | None = None) -> Row:
    """A valid event as the routed row the JVM hands over (absent fields are null); a block needs
    ``key``, the one of its two keys this copy is routed to."""
    envelope = event_to_json(event)
    return RoutedRow(ROUTE_JOIN, key if key is not None else join_key(event),
                     *(envelope.get(name) for name in EVENT_NAMES), event_time, f"{TWEETS_TOPIC}/0/{offset}", None)


def rejected(offset: int, code: str, raw: str) -> Row:
    """A rejected record as routed: grouped under its source topic, its dead-letter record built."""
    dl_value = json.dumps({"reason_code": code, "reason": code, "source_topic": TWEETS_TOPIC,
                           "source_partition": 0, "source_offset": offset, "value": raw})
    # Some typed columns are set for a partly valid record: the processor must not care.
    return RoutedRow(ROUTE_DEAD_LETTER, TWEETS_TOPIC, "tweet", "upsert", "g1", "u1", *([None] * (len(EVENT_NAMES) - 4)),
                     None, f"{TWEETS_TOPIC}/0/{offset}", dl_value)


def follow(follower: str, followee: str, version: int = 1) -> FollowChange:
    """``follower`` follows ``followee`` (version 1 unless told)."""
    return FollowChange(follower, followee, version, "follow")


def unfollow(follower: str, followee: str, version: int = 2) -> FollowChange:
    """``follower`` unfollows ``followee`` (version 2 unless told: newer than :func:`follow`)."""
    return FollowChange(follower, followee, version, "unfollow")


def tweet(tid: str, created_at: int, text: str, version: int = 1, author: str = "bob", pv: int = 1) -> TweetUpsert:
    """A tweet (bob's, version 1, profile version 1 unless told), not a reply."""
    return TweetUpsert(tid, author, version, created_at, text, pv)


def timeline_row(op: str, e: Entry, followers: list[str], ts: int, source_ms: int | None = None) -> Row:
    """The output row of ``e``'s inbox change ``op`` for ``followers`` at ``ts``."""
    return OutputRow("timeline", op, e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.profile_version,
                     followers, None, None, None, None, ts, None, None, source_ms, *NO_EXTRA)


def author_row(op: str, e: Entry, ts: int, source_ms: int | None = None) -> Row:
    """The output row of ``e``'s author-timeline change ``op`` at ``ts``."""
    return OutputRow("author", op, e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.profile_version,
                     None, None, None, None, None, ts, None, None, source_ms, *NO_EXTRA)


def tweet_row(e: Entry, ts: int, source_ms: int | None = None) -> Row:
    """The output row of ``e``'s ``tweets``-table upsert at ``ts``."""
    return OutputRow("tweet", "upsert", e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.profile_version,
                     None, None, None, None, None, ts, None, None, source_ms, *NO_EXTRA)


def block_row(op: str, blocker: str, blocked: str, ts: int, source_ms: int | None = None) -> Row:
    """The output row of the ``blocks``-table change ``op`` of (``blocker``, ``blocked``) at ``ts``."""
    return OutputRow("block", op, None, blocker, None, None, None, None, None, blocked, None, None, None, ts,
                     None, None, source_ms, *NO_EXTRA)


def entry(t: TweetUpsert) -> Entry:
    """The timeline entry of the tweet ``t``."""
    return Entry(t.tweet_id, t.author_id, t.created_at, t.version, t.text, t.profile_version)


#: bob's grouping key; :data:`SEED` the events of :func:`seeded_state`, :data:`T1`, :data:`T2` its tweets.
BOB = (ROUTE_JOIN, "bob")
SEED: list[Event] = [follow("ann", "bob"), follow("cat", "bob"), tweet("t1", 10, "one"), tweet("t2", 20, "two")]
T1, T2 = entry(SEED[2]), entry(SEED[3])  # type: ignore[arg-type]


def seeded_state() -> AuthorState:
    """bob followed by ann and cat, tweets t1 (created 10) and t2 (created 20), clock 100."""
    return step(None, SEED, clock_start=99).state
