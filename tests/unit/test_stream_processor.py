"""The streaming job's ``StatefulProcessor`` on its own, without a query, a session or a JVM.

In the style of PySpark's own transformWithState tests (``TwsTester``): an in-memory state handle,
state seeded per key, routed rows fed one batch at a time as ``pyspark.sql.Row`` objects (the
columns :func:`spark_jobs.envelope.routed_changes` makes), and checks of the output rows, of the
state written back and of the state calls made (a ``get`` and at most one ``update`` per key and
batch: each is a round trip to the JVM in a real query).

PySpark's own ``TwsTester`` hands the processor a one-column grouping key; this job groups by
(route, key), so the harness is a small one of its own: :mod:`tests.support.processor_harness`.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from feed_service.core.events import BlockChange, FollowChange, MuteChange, ProfileVersion, TweetDelete, event_to_json
from feed_service.core.join import step
from feed_service.core.per_reader.messages import Relation
from feed_service.core.rows import BlockWrite, TimelineFanout, TimelineWrite
from feed_service.core.state import AuthorState, encode_state
from feed_service.core.stored_step import stored_parts
from spark_jobs.envelope import ROUTE_DEAD_LETTER, ROUTE_JOIN
from spark_jobs.output_rows import writes_of
from tests.support.processor_harness import (
    BOB,
    EDGES_NAME,
    NO_EXTRA,
    STATE_NAME,
    T1,
    T2,
    TWEETS_TOPIC,
    Harness,
    OutputRow,
    author_row,
    block_row,
    entry,
    follow,
    rejected,
    routed,
    seeded_state,
    timeline_row,
    tweet,
    tweet_row,
    unfollow,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


# --- tests -----------------------------------------------------------------------------------------


def test_init_declares_two_binary_value_states() -> None:
    harness = Harness()
    binary = StructType([StructField("state", BinaryType(), True)])
    assert harness.handle.schemas == {STATE_NAME: binary, EDGES_NAME: binary}
    assert harness.handle.calls == []


def test_a_pull_authors_tweet_never_touches_its_edges_part() -> None:
    harness = Harness()
    many = [follow(f"f{i}", "bob") for i in range(3000)]  # above the inline limit and the threshold of 2000
    harness.seed(BOB, step(None, many).state)
    edges = harness.handle.value_states[EDGES_NAME]
    assert BOB in edges.values
    out = harness.feed(BOB, [routed(tweet("t9", 500, "from a star"))])
    assert edges.calls == [] and harness.handle.calls == [("get", BOB), ("update", BOB)]
    assert [r.kind for r in out] == ["tweet", "author"]  # no inbox rows: readers merge it in
    assert harness.peek(BOB).pull and "t9" in harness.peek(BOB).tweets


def test_new_key_tweet_and_follow_in_one_batch() -> None:
    harness = Harness(clock_start=0)
    t1 = tweet("t1", 10, "hello")
    out = harness.feed(BOB, [routed(follow("ann", "bob")), routed(t1)])

    assert out == [timeline_row("insert", entry(t1), ["ann"], 1), tweet_row(entry(t1), 1),
                   author_row("insert", entry(t1), 1)]
    assert harness.handle.calls == [("get", BOB), ("update", BOB)]
    assert harness.peek(BOB) == AuthorState(key="bob", clock=1, followers={"ann": (1, True)}, active=("ann",),
                                            tweets={"t1": (1, 10, "hello", 1)}, cold={}, deleted=frozenset(),
                                            profiles={}, pull=False, side=({}, {}, {}, 1))
    # ann starts seeing bob: one relation to the per-reader stage
    assert [(m.op, m.user_id, pickle.loads(m.message)) for m in harness.messages] == [
        ("relation", "ann", Relation("ann", "bob", True, False, 1))]
    # What the sink makes of the compact rows: one timeline write to every follower, one tweet row.
    writes = writes_of(out)
    assert writes.timeline == [TimelineFanout("insert", ("ann",), entry(t1), 1)]
    assert [r for w in writes.timeline for r in w.rows()] == [TimelineWrite("insert", "ann", entry(t1), 1)]
    assert [(w.tweet_id, w.entry) for w in writes.tweets] == [("t1", entry(t1))]
    assert (writes.profiles, writes.dead_letters, writes.pull_follows) == ([], [], [])
    assert [(w.op, w.entry) for w in writes.author_timeline] == [("insert", entry(t1))]


def test_seeded_state_rows_fed_one_batch_at_a_time() -> None:
    harness = Harness()
    seed = seeded_state()
    assert seed.clock == 100 and seed.active == ("ann", "cat")
    harness.seed(BOB, seed)

    t3 = tweet("t3", 30, "three")
    assert harness.feed(BOB, [routed(t3)]) == [timeline_row("insert", entry(t3), ["ann", "cat"], 101),
                                               tweet_row(entry(t3), 101), author_row("insert", entry(t3), 101)]
    after_t3 = harness.peek(BOB)
    assert after_t3 == step(seed, [t3]).state and after_t3.clock == 101

    # cat leaves: every retained tweet leaves cat's timeline, newest first.
    assert harness.feed(BOB, [routed(unfollow("cat", "bob"))]) == [
        timeline_row("delete", entry(t3), ["cat"], 102), timeline_row("delete", T2, ["cat"], 102),
        timeline_row("delete", T1, ["cat"], 102)]
    after_unfollow = harness.peek(BOB)
    assert after_unfollow.active == ("ann",) and after_unfollow.followers["cat"] == (2, False)

    # An edit reaches the remaining follower only; a delete is a tombstone row.
    edit = tweet("t1", 10, "ONE", version=2)
    out = harness.feed(BOB, [routed(edit), routed(TweetDelete("t2", "bob", 1))])
    assert out == [
        timeline_row("update", entry(edit), ["ann"], 103),
        timeline_row("delete", T2, ["ann"], 103),
        tweet_row(entry(edit), 103),
        OutputRow("tweet", "delete", "t2", "bob", None, None, None, None, None, None, None, None, None, 103, None, None, None, *NO_EXTRA),
        author_row("update", entry(edit), 103),
        author_row("delete", T2, 103),
    ]
    final = harness.peek(BOB)
    assert final == step(after_unfollow, [edit, TweetDelete("t2", "bob", 1)]).state
    assert final.clock == 103 and set(final.deleted) == {"t2"} and final.tweets["t1"] == (2, 10, "ONE", 1)
    assert harness.handle.calls == [("get", BOB), ("update", BOB)]


def test_profile_version_is_a_profile_row_and_state() -> None:
    harness = Harness(clock_start=7)
    out = harness.feed(BOB, [routed(ProfileVersion("bob", 3, "Bob", None, "hi"))])
    assert out == [OutputRow("profile", "upsert", None, None, None, 3, None, None, None,
                             "bob", "Bob", None, "hi", 8, None, None, None, *NO_EXTRA)]
    state = harness.peek(BOB)
    assert state is not None and dict(state.profiles) == {3: ("Bob", None, "hi")} and state.clock == 8


def test_order_of_rows_within_a_batch_does_not_matter() -> None:
    batch = [routed(e) for e in (tweet("t3", 30, "three"), follow("dan", "bob"), unfollow("ann", "bob"),
                                 tweet("t1", 10, "ONE", version=2))]
    results = []
    for rows in (batch, batch[::-1]):
        harness = Harness()
        harness.seed(BOB, seeded_state())
        results.append((harness.feed(BOB, rows), harness.blob(BOB)))
    assert results[0] == results[1]


def test_a_change_beyond_the_horizon_becomes_a_dead_letter_with_its_source() -> None:
    harness = Harness(horizon_ms=1_000)
    harness.feed(BOB, [routed(follow("ann", "bob"), 50_000, offset=1)])
    out = harness.feed(BOB, [routed(tweet("t1", 10, "old"), 48_999, offset=7),
                             routed(tweet("t2", 20, "new"), 50_000, offset=8)])
    letters = writes_of(out).dead_letters
    assert [key for key, _ in letters] == [f"{TWEETS_TOPIC}/0/7"]
    value = json.loads(letters[0][1])
    assert value["reason_code"] == "beyond_horizon" and value["source_offset"] == 7
    assert json.loads(value["value"])["tweet_id"] == "t1" and "1001 ms behind" in value["reason"]
    assert [w.entry.tweet_id for w in writes_of(out).timeline] == ["t2"]
    assert harness.peek(BOB).watermark == 50_000


def test_a_block_copy_can_be_late_at_one_key_and_applied_at_the_other() -> None:
    # Each key judges lateness by its own watermark (docs/streaming.md, "Blocks and mutes").
    harness = Harness(horizon_ms=1_000)
    harness.feed(BOB, [routed(follow("ann", "bob"), 50_000, offset=1)])
    block = BlockChange("bob", "ann", 1, "block")
    out = harness.feed(BOB, [routed(block, 48_999, offset=7, key="bob")])
    (letter,) = writes_of(out).dead_letters
    value = json.loads(letter[1])
    assert letter[0] == f"{TWEETS_TOPIC}/0/7" and value["reason_code"] == "beyond_horizon"
    assert json.loads(value["value"]) == event_to_json(block) and writes_of(out).blocks == []
    ann = (ROUTE_JOIN, "ann")
    assert harness.feed(ann, [routed(block, 48_999, offset=7, key="ann")]) == []  # applied: no letter
    state = harness.peek(ann)
    assert state is not None and "bob" in state.hides and state.watermark == 48_999


def test_dead_letters_pass_through_without_touching_state() -> None:
    harness = Harness()
    harness.seed(BOB, seeded_state())
    letters = [rejected(4, "bad_json", "{"), rejected(9, "not_object", "[1]")]
    out = harness.feed((ROUTE_DEAD_LETTER, TWEETS_TOPIC), letters)
    assert out == [OutputRow("dead_letter", *([None] * 12), None, r.dl_key, r.dl_value, None, *NO_EXTRA) for r in letters]
    assert writes_of(out).dead_letters == [(f"{TWEETS_TOPIC}/0/4", letters[0].dl_value),
                                           (f"{TWEETS_TOPIC}/0/9", letters[1].dl_value)]
    assert harness.handle.calls == []  # no state round trip for dead letters
    assert harness.blob((ROUTE_DEAD_LETTER, TWEETS_TOPIC)) is None
    assert harness.peek(BOB) == seeded_state()


def test_a_batch_of_only_stale_changes_writes_no_state() -> None:
    harness = Harness()
    blob = harness.seed(BOB, seeded_state())
    stale = [tweet("t1", 10, "stale", version=0), FollowChange("ann", "bob", 0, "unfollow"),
             follow("cat", "bob"), tweet("t2", 20, "two")]  # older versions and exact duplicates
    assert harness.feed(BOB, [routed(e) for e in stale]) == []
    assert harness.handle.calls == [("get", BOB)]
    assert harness.blob(BOB) == blob


def test_a_stale_batch_after_a_written_one_writes_no_state() -> None:
    # The state as the processor itself wrote it (not as a test encoded it) must also round-trip.
    harness = Harness()
    harness.seed(BOB, seeded_state())
    harness.feed(BOB, [routed(tweet("t3", 30, "three")), routed(follow("dan", "bob"))])
    written = harness.blob(BOB)
    assert harness.feed(BOB, [routed(tweet("t3", 30, "three")), routed(follow("dan", "bob"))]) == []
    assert harness.handle.calls == [("get", BOB)]
    assert harness.blob(BOB) == written


def test_initial_state_seeds_the_key_and_the_next_batch_builds_on_it() -> None:
    harness = Harness()
    seed = seeded_state()
    harness.initial(BOB, seed)
    assert harness.handle.calls == [("update", BOB)]
    assert harness.blob(BOB) == stored_parts(encode_state(seed))[0]
    assert isinstance(harness.handle.value_states[STATE_NAME].values[BOB][0], bytes)

    t3 = tweet("t3", 30, "three")
    assert harness.feed(BOB, [routed(t3)]) == [timeline_row("insert", entry(t3), ["ann", "cat"], 101),
                                               tweet_row(entry(t3), 101), author_row("insert", entry(t3), 101)]


def test_keys_do_not_share_state() -> None:
    harness = Harness()
    harness.seed(BOB, seeded_state())
    cat = (ROUTE_JOIN, "cat")
    t9 = tweet("t9", 5, "cat's", author="cat")
    assert harness.feed(cat, [routed(t9)]) == [tweet_row(entry(t9), 1), author_row("insert", entry(t9), 1)]  # no followers yet
    assert harness.peek(cat) == step(None, [t9]).state
    assert harness.peek(BOB) == seeded_state()


def test_a_block_is_stepped_at_both_keys_and_the_blockers_key_writes_its_row() -> None:
    harness = Harness()
    harness.seed(BOB, seeded_state())  # ann and cat follow bob
    ann = (ROUTE_JOIN, "ann")
    block = BlockChange("bob", "ann", 1, "block")
    # The blocker's copy: bob's tweets leave ann's inbox, and the blocks row is written.
    out = harness.feed(BOB, [routed(block, key="bob")])
    assert out == [timeline_row("delete", T2, ["ann"], 101), timeline_row("delete", T1, ["ann"], 101),
                   block_row("insert", "bob", "ann", 101)]
    assert writes_of(out).blocks == [BlockWrite("insert", "bob", "ann", 101)]
    # The blocked user's copy, a new key: nothing to write yet, but its state keeps the block, so
    # bob's later follow of ann brings none of ann's tweets.
    assert harness.feed(ann, [routed(block, key="ann")]) == []
    assert harness.peek(ann) is not None and harness.peek(ann).key == "ann"
    t9 = tweet("t9", 5, "ann's", author="ann")
    out = harness.feed(ann, [routed(follow("bob", "ann")), routed(t9)])
    assert [r.kind for r in out] == ["tweet", "author"]
    # The unblock brings bob's tweets back and deletes the row.
    out = harness.feed(BOB, [routed(BlockChange("bob", "ann", 2, "unblock"), key="bob")])
    assert out == [timeline_row("insert", T2, ["ann"], 102), timeline_row("insert", T1, ["ann"], 102),
                   block_row("delete", "bob", "ann", 102)]


def test_a_mute_hides_the_muted_authors_tweets_from_the_muter_only() -> None:
    harness = Harness()
    harness.seed(BOB, seeded_state())
    out = harness.feed(BOB, [routed(MuteChange("cat", "bob", 1, "mute"))])
    assert out == [timeline_row("delete", T2, ["cat"], 101), timeline_row("delete", T1, ["cat"], 101)]
    assert writes_of(out).blocks == []


def test_block_rows_are_written_to_the_blocks_table(monkeypatch: pytest.MonkeyPatch) -> None:
    import cassandra.concurrent

    import spark_jobs.stream.sink as sink
    from feed_service.settings import Settings
    from feed_service.store.cassandra_writer import CassandraWriter

    class Prepared:
        def prepare(self, cql: str) -> str:
            return cql

    class Done:
        success, result_or_exc = True, None

    executed: list[tuple[str, tuple]] = []

    def execute(session: Any, statements: Iterable[tuple[str, tuple]], **_: Any) -> list[Done]:
        statements = list(statements)
        executed.extend(statements)
        return [Done() for _ in statements]

    monkeypatch.setattr(cassandra.concurrent, "execute_concurrent", execute)
    outputs = sink.SinkOutputs(writer_for=lambda settings: CassandraWriter(Prepared(), "ks", batch_rows=1))
    rows = [r.asDict() for r in (block_row("insert", "bob", "ann", 7), block_row("delete", "bob", "cat", 7))]
    sink.write_partition(Settings(view_changes=False), iter(rows), outputs=outputs)
    assert executed == [
        ("INSERT INTO ks.blocks (blocker_id, blocked_id) VALUES (?, ?) USING TIMESTAMP ?", ("bob", "ann", 7)),
        ("DELETE FROM ks.blocks USING TIMESTAMP ? WHERE blocker_id = ? AND blocked_id = ?", (7, "bob", "cat")),
    ]


BIG = 2**53 + 1  # the first integer a float64 cannot hold; the envelope accepts up to 2**63 - 1


def test_integers_beyond_float_precision_stay_exact() -> None:
    harness = Harness()
    harness.seed(BOB, seeded_state())
    big = tweet("t9", BIG, "big", version=BIG, pv=BIG)
    # The delete and the profile leave created_at/profile_version null in the same input frame.
    out = harness.feed(BOB, [routed(big), routed(TweetDelete("t1", "bob", 1)),
                             routed(ProfileVersion("bob", BIG, "Bob"))])
    assert timeline_row("insert", entry(big), ["ann", "cat"], 101) in out
    assert tweet_row(entry(big), 101) in out
    assert OutputRow("profile", "upsert", None, None, None, BIG, None, None, None,
                     "bob", "Bob", None, None, 101, None, None, None, *NO_EXTRA) in out
    assert harness.peek(BOB).tweets["t9"] == (BIG, BIG, "big", BIG)


def test_initial_state_handler() -> None:
    harness = Harness()
    harness.initial(BOB, seeded_state())
    assert harness.peek(BOB) == seeded_state()


def test_the_processor_needs_no_jvm() -> None:
    # In a fresh interpreter (an earlier test of the session may have started Spark in this one).
    code = (
        "from pyspark import SparkContext\n"
        "from tests.support.processor_harness import BOB, Harness, routed, tweet, follow\n"
        "h = Harness()\n"
        "out = h.feed(BOB, [routed(follow('ann', 'bob')), routed(tweet('t1', 1, 'x'))])\n"
        "assert len(out) == 3, out\n"
        "print(SparkContext._gateway is None, SparkContext._jvm is None, SparkContext._active_spark_context is None)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "True"]
