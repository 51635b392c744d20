"""State buckets (docs/state-buckets.md): the bucketed processor gives the rows and the per-key state
of the per-key processor, with one read and at most one write of the bucket's blob per batch.

Both processors run on in-memory state handles (no JVM), fed the same routed rows: the per-key one
one call per (route, key) as transformWithState groups it today, the bucketed one one call per
(route, bucket) holding several keys' rows.
"""

from __future__ import annotations

import random
import zlib
from collections import defaultdict
from typing import Any, Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Row

from feed_service.core.events import BlockChange, Event, FollowChange, TweetDelete, TweetUpsert, join_keys
from feed_service.core.join import step
from feed_service.core.state import encode_state
from feed_service.core.state_buckets import decode_bucket, encode_bucket, entry_sizes
from feed_service.core.stored_step import stored_parts
from spark_jobs.bucketed_join import (
    APART, CORES_STATE, EDGES_STATE, INLINE_CORE_LIMIT, LARGE_CORES_STATE, bucketed_processor,
)
from spark_jobs.envelope import ROUTE_DEAD_LETTER, ROUTE_JOIN
from spark_jobs.timeline_join import JoinConfig, transform_with_state_processor
from tests.support.join_runs import random_event
from tests.support.processor_harness import (
    EDGES_NAME, STATE_NAME, TWEETS_TOPIC, FakeHandle, Harness, rejected, routed,
)
from tests.support.sizes import examples

CONFIG = JoinConfig(inbox_cap=3, pull_threshold=2, clock_start=100)


class FakeMapState:
    """One MapState: a dict per grouping key (the handle's current key), every call logged."""

    def __init__(self, handle: "BucketHandle") -> None:
        self.handle = handle
        self.values: dict[Any, dict[tuple, tuple]] = defaultdict(dict)

    def _map(self, call: str) -> dict[tuple, tuple]:
        self.handle.calls.append((call, self.handle.key))
        return self.values[self.handle.key]

    def getValue(self, key: tuple) -> tuple | None:
        return self._map("map.get").get(key)

    def updateValue(self, key: tuple, value: tuple) -> None:
        self._map("map.update")[key] = value

    def removeKey(self, key: tuple) -> None:
        self._map("map.remove").pop(key, None)


class BucketHandle(FakeHandle):
    """The handle with MapState as well."""

    def __init__(self) -> None:
        super().__init__()
        self.map_states: dict[str, FakeMapState] = {}

    def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any,
                    ttlDurationMs: int | None = None) -> FakeMapState:
        self.schemas[stateName] = (userKeySchema, valueSchema)
        return self.map_states.setdefault(stateName, FakeMapState(self))


def bucket(key: str, buckets: int) -> int:
    """Any stable function of the key will do for the processor (Spark uses xxhash64)."""
    return zlib.crc32(key.encode()) % buckets


class BucketHarness:
    def __init__(self, config: JoinConfig = CONFIG, buckets: int = 3) -> None:
        self.buckets = buckets
        self.processor = bucketed_processor(config)
        self.handle = BucketHandle()
        self.processor.init(self.handle)

    def feed(self, rows: Iterable[Row]) -> tuple[list[Row], dict[tuple, list[tuple[str, Any]]]]:
        """One micro-batch: a call per (route, bucket); the output rows and each call's state calls."""
        groups: dict[tuple, list[Row]] = defaultdict(list)
        for r in rows:
            groups[(r.route, bucket(r.key, self.buckets))].append(r)
        out: list[Row] = []
        calls: dict[tuple, list[tuple[str, Any]]] = {}
        for group_key, group_rows in groups.items():
            self.handle.key = group_key
            self.handle.calls.clear()
            out += list(self.processor.handleInputRows(group_key, iter(group_rows), None))
            calls[group_key] = list(self.handle.calls)
        return out, calls

    def cores(self) -> dict[str, bytes]:
        """Every key's core part, inline or kept apart."""
        out: dict[str, bytes] = {}
        for group_key, value in self.handle.value_states[CORES_STATE].values.items():
            large = self.handle.map_states[LARGE_CORES_STATE].values[group_key]
            out.update({k: (core if core != APART else bytes(large[(k,)][0]))
                        for k, core in decode_bucket(bytes(value[0])).items()})
        return out

    def apart(self) -> set[str]:
        return {k[0] for entries in self.handle.map_states[LARGE_CORES_STATE].values.values() for k in entries}

    def edges(self) -> dict[str, bytes]:
        return {k[0]: bytes(v[0]) for entries in self.handle.map_states[EDGES_STATE].values.values()
                for k, v in entries.items()}


def keyed_harness(config: JoinConfig) -> Harness:
    """The per-key processor's harness with ``config`` (its own default has another pull threshold)."""
    harness = Harness(inbox_cap=config.inbox_cap, clock_start=config.clock_start)
    harness.processor = transform_with_state_processor(config)
    harness.handle = FakeHandle()
    harness.processor.init(harness.handle)
    return harness


def per_key(harness: Harness, rows: Iterable[Row]) -> list[Row]:
    """One micro-batch through the per-key processor: a call per (route, key)."""
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r.route, r.key)].append(r)
    out: list[Row] = []
    for group_key, group_rows in groups.items():
        out += harness.feed(group_key, group_rows)
        out += harness.messages  # the per-reader messages too: the bucketed processor emits them as well
    return out


def routed_rows(events: Iterable[Event]) -> list[Row]:
    return [routed(e, 1_000 + i, i, key=k) for i, e in enumerate(events) for k in join_keys(e)]


def same_rows(a: list[Row], b: list[Row]) -> bool:
    return sorted(map(repr, a)) == sorted(map(repr, b))


def per_key_states(harness: Harness) -> tuple[dict[str, bytes], dict[str, bytes]]:
    cores = {k[1]: bytes(v[0]) for k, v in harness.handle.value_states[STATE_NAME].values.items()}
    edges = {k[1]: bytes(v[0]) for k, v in harness.handle.value_states[EDGES_NAME].values.items()}
    return cores, edges


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), buckets=st.integers(1, 4), batches=st.integers(1, 6))
def test_bucketed_processor_gives_the_rows_and_states_of_the_per_key_one(rnd: random.Random, buckets: int,
                                                                          batches: int) -> None:
    keyed, bucketed = keyed_harness(CONFIG), BucketHarness(buckets=buckets)
    events = [random_event(rnd, fixed_created_at=False, deletes=True) for _ in range(rnd.randint(0, 60))]
    events += rnd.sample(events, len(events) // 4)  # duplicates
    rnd.shuffle(events)
    cuts = sorted(rnd.sample(range(len(events) + 1), min(batches, len(events) + 1)))
    for start, end in zip([0, *cuts], [*cuts, len(events)]):
        rows = routed_rows(events[start:end])
        expected = per_key(keyed, rows)
        got, calls = bucketed.feed(rows)
        assert same_rows(got, expected)
        for group_calls in calls.values():  # the bucket blob: one read, at most one write
            cores_calls = [c for c, _ in group_calls if not c.startswith("map.")]
            assert cores_calls in (["get"], ["get", "update"])
    cores, edges = per_key_states(keyed)
    assert bucketed.cores() == cores
    assert bucketed.edges() == edges


def test_a_key_with_many_edges_keeps_them_in_the_map_state_and_reads_them_only_when_needed() -> None:
    config = JoinConfig(inbox_cap=3, pull_threshold=1000, clock_start=100)  # bob becomes a pull author
    harness = BucketHarness(config, buckets=1)
    follows = [FollowChange(f"f{i}", "bob", 1, "follow") for i in range(1100)]  # beyond the inline limit
    harness.feed(routed_rows(follows))
    assert set(harness.edges()) == {"bob"}
    out, calls = harness.feed(routed_rows([TweetUpsert("t1", "bob", 1, 10, "hi", 1)]))
    assert [c for c, _ in calls[(ROUTE_JOIN, 0)]] == ["get", "update"]  # a pull author's tweet needs no edges
    assert out
    out, calls = harness.feed(routed_rows([FollowChange("f0", "bob", 2, "unfollow")]))
    assert [c for c, _ in calls[(ROUTE_JOIN, 0)]] == ["get", "map.get", "map.update", "update"]


def test_stale_changes_write_nothing() -> None:
    harness = BucketHarness(buckets=1)
    rows = routed_rows([FollowChange("ann", "bob", 1, "follow"), TweetUpsert("t1", "bob", 1, 10, "hi", 1)])
    harness.feed(rows)
    out, calls = harness.feed(rows)  # a replay of the same changes
    assert out == []
    assert [c for c, _ in calls[(ROUTE_JOIN, 0)]] == ["get"]


def test_a_block_is_stepped_in_the_buckets_of_both_its_keys() -> None:
    keyed, bucketed = keyed_harness(CONFIG), BucketHarness(buckets=7)
    events = [FollowChange("ann", "bob", 1, "follow"), TweetUpsert("t1", "bob", 1, 10, "hi", 1),
              BlockChange("ann", "bob", 1, "block")]
    rows = routed_rows(events)
    assert {r.key for r in rows if r.type == "block"} == {"ann", "bob"}
    expected = per_key(keyed, rows)
    got, _ = bucketed.feed(rows)
    assert same_rows(got, expected)


def test_dead_letters_pass_through_without_state() -> None:
    harness = BucketHarness()
    letters = [rejected(1, "bad_json", "{"), rejected(2, "bad_json", "[")]
    harness.handle.key = (ROUTE_DEAD_LETTER, 0)
    out = list(harness.processor.handleInputRows((ROUTE_DEAD_LETTER, 0), iter(letters), None))
    assert [r.dl_key for r in out] == [f"{TWEETS_TOPIC}/0/1", f"{TWEETS_TOPIC}/0/2"]
    assert harness.handle.calls == []


def test_initial_state_writes_each_bucket_once_and_the_next_batch_builds_on_it() -> None:
    seeds = {author: step(None, [FollowChange("ann", author, 1, "follow"),
                                 TweetUpsert(f"{author}-t1", author, 1, 10, "hi", 1)], clock_start=99).state
             for author in ("bob", "cat")}
    harness = BucketHarness(buckets=1)
    harness.handle.key = (ROUTE_JOIN, 0)
    # PySpark 4.2 hands the array's structs over as dicts (a Row would do as well)
    initial = Row(route=ROUTE_JOIN, bucket=0, states=[{"key": a, "state": bytearray(encode_state(s))}
                                                      for a, s in seeds.items()])
    harness.processor.handleInitialState((ROUTE_JOIN, 0), initial, None)
    assert [c for c, _ in harness.handle.calls] == ["get", "update"]
    assert harness.cores() == {a: stored_parts(encode_state(s))[0] for a, s in seeds.items()}
    out, _ = harness.feed(routed_rows([TweetUpsert("bob-t2", "bob", 1, 20, "two", 1)]))
    assert any(r.op == "insert" and r.timeline_ids == ["ann"] for r in out)


def test_init_declares_a_value_state_and_a_map_state() -> None:
    harness = BucketHarness()
    assert set(harness.handle.schemas) == {CORES_STATE, EDGES_STATE, LARGE_CORES_STATE}


def test_a_large_core_is_kept_apart_and_its_tweets_leave_the_blob_alone() -> None:
    config = JoinConfig(inbox_cap=50, pull_threshold=1000, clock_start=100)
    keyed, bucketed = keyed_harness(config), BucketHarness(config, buckets=1)
    rnd = random.Random(5)

    def text() -> str:  # a different text each: nothing for the codec to compress away
        return "".join(rnd.choice("abcdefghij klmnopqrstuvwxyz") for _ in range(400))

    small = routed_rows([FollowChange("ann", "cat", 1, "follow"), TweetUpsert("c1", "cat", 1, 1, "hi", 1)])
    big = routed_rows([FollowChange("ann", "bob", 1, "follow")]
                      + [TweetUpsert(f"b{i}", "bob", 1, i, text(), 1) for i in range(30)])  # ~12 KB of tweets
    for rows in (small, big):
        assert same_rows(bucketed.feed(rows)[0], per_key(keyed, rows))
    assert bucketed.apart() == {"bob"} and len(bucketed.cores()["bob"]) > INLINE_CORE_LIMIT
    blob = bucketed.handle.value_states[CORES_STATE].values[(ROUTE_JOIN, 0)]
    rows = routed_rows([TweetUpsert("b99", "bob", 1, 99, text(), 1)])
    out, calls = bucketed.feed(rows)
    assert same_rows(out, per_key(keyed, rows))
    assert [c for c, _ in calls[(ROUTE_JOIN, 0)]] == ["get", "map.get", "map.update"]  # the blob is not rewritten
    assert bucketed.handle.value_states[CORES_STATE].values[(ROUTE_JOIN, 0)] is blob
    rows = routed_rows([TweetDelete(f"b{i}", "bob", 2) for i in range(31)] + [TweetDelete("b99", "bob", 2)])
    assert same_rows(bucketed.feed(rows)[0], per_key(keyed, rows))
    assert bucketed.apart() == set()  # small again: back in the blob
    assert bucketed.cores() == per_key_states(keyed)[0]


# --- the blob ----------------------------------------------------------------------------------------


def test_the_blob_round_trips_and_does_not_depend_on_insertion_order() -> None:
    cores = {"bob": b"\x00" * 5, "ann": b"", "é": b"\xff\x01"}
    blob = encode_bucket(cores)
    assert decode_bucket(blob) == cores
    assert encode_bucket(dict(reversed(list(cores.items())))) == blob
    assert entry_sizes(blob) == [("ann", 0), ("bob", 5), ("é", 2)]


@pytest.mark.parametrize("damage", [
    pytest.param(lambda b: b[:3], id="short header"),
    pytest.param(lambda b: b[:-1], id="cut entry"),
    pytest.param(lambda b: b + b"x", id="trailing bytes"),
    pytest.param(lambda b: b"\x09" + b[1:], id="unknown format"),
])
def test_a_damaged_blob_is_a_clear_error(damage: Any) -> None:
    with pytest.raises(ValueError, match="bucket blob"):
        decode_bucket(damage(encode_bucket({"bob": b"abc"})))
