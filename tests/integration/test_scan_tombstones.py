"""Scans of many partitions over a table full of tombstones, on the real stack's Cassandra
(docs/operations.md#failure-modes-reads-and-scans).

A keyspace of its own holds what a long run leaves in ``home_timeline``: trimmed inboxes (a few live
rows, the deleted older ones behind them), dropped readers' inboxes (every row deleted, the statics
kept) and partitions whose every row was deleted (no statics). Together they hold more tombstones
than the stack's ``tombstone_failure_threshold`` (200,000: feed_service/stack/cassandra_node.py), so
one query across them fails, as the scans did before: a scan of the rows, and ``SELECT DISTINCT``
of the partition keys. The product's scans (rows per timeline, every partition and a sample; the
token-range scan itself, made to split from one range; the reader-activity load) complete and count
exactly what was written.

And one inbox whose tombstones alone exceed the threshold: a whole read of it fails, so the trimmer
reads its newest rows only and still cuts it to the cap, and rows per timeline names it in its error.
"""

from __future__ import annotations

import random
import uuid

import pytest

from feed_service.settings import Settings
from feed_service.store.cassandra_activity import CassandraActivity
from feed_service.store.cassandra_trimmer import CassandraTrimmer
from feed_service.store.schema import apply_schema
from feed_service.store.session import connect
from feed_service.store.timeline_rows import TimelineRows
from feed_service.store.token_scan import TooManyTombstones, scan_by_token, too_many_tombstones

TRIMMED, TRIMMED_LIVE, TRIMMED_GONE = 100, 3, 100  # inboxes: live rows, trimmed rows behind them
DROPPED, DROPPED_GONE = 20, 500  # dropped readers: every row deleted, inbox_dropped kept
EMPTIED, EMPTIED_GONE = 420, 500  # every row deleted, no statics: only tombstones
THRESHOLD = 200_000  # the stack's tombstone_failure_threshold
DELETES_PER_BATCH = 100
READERS = 50


def _write(session, keyspace: str) -> None:
    """The partitions of the module docstring: about 230,000 row tombstones."""
    from cassandra.concurrent import execute_concurrent
    from cassandra.query import BatchStatement, BatchType

    insert = session.prepare(f"INSERT INTO {keyspace}.home_timeline (timeline_id, created_at, tweet_id, author_id,"
                             " version, text, profile_version) VALUES (?, ?, ?, 'a', 1, 'x', 1)")
    delete = session.prepare(f"DELETE FROM {keyspace}.home_timeline WHERE timeline_id = ? AND created_at = ?"
                             " AND tweet_id = ?")
    dropped = session.prepare(f"UPDATE {keyspace}.home_timeline SET inbox_dropped = true WHERE timeline_id = ?")
    statements: list = []

    def deletes(timeline: str, n: int) -> None:  # the oldest rows, single-partition batches
        for start in range(0, n, DELETES_PER_BATCH):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for i in range(start, min(n, start + DELETES_PER_BATCH)):
                batch.add(delete, (timeline, 1_000 + i, f"gone-{i}"))
            statements.append((batch, None))

    for p in range(TRIMMED):
        for i in range(TRIMMED_LIVE):
            statements.append((insert, (f"trimmed-{p}", 1_000_000 + i, f"live-{i}")))
        deletes(f"trimmed-{p}", TRIMMED_GONE)
    for p in range(DROPPED):
        statements.append((dropped, (f"dropped-{p}",)))
        deletes(f"dropped-{p}", DROPPED_GONE)
    for p in range(EMPTIED):
        deletes(f"emptied-{p}", EMPTIED_GONE)
    assert TRIMMED * TRIMMED_GONE + DROPPED * DROPPED_GONE + EMPTIED * EMPTIED_GONE > THRESHOLD
    assert EMPTIED * EMPTIED_GONE > THRESHOLD  # even SELECT DISTINCT crosses more than the threshold
    execute_concurrent(session, statements, concurrency=64, raise_on_first_error=True)


@pytest.fixture(scope="module")
def tombstoned(settings: Settings):
    keyspace = f"scan_{uuid.uuid4().hex[:8]}"
    cluster, session = connect(settings)
    try:
        apply_schema(session, keyspace)
        _write(session, keyspace)
        yield session, keyspace
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
    finally:
        cluster.shutdown()


def test_a_query_across_the_partitions_fails_on_the_tombstones(tombstoned) -> None:
    """What every full scan met before: both kinds of multi-partition query are refused."""
    from cassandra.query import SimpleStatement

    session, keyspace = tombstoned
    for query in (f"SELECT timeline_id, created_at FROM {keyspace}.home_timeline",
                  f"SELECT DISTINCT timeline_id FROM {keyspace}.home_timeline"):
        with pytest.raises(Exception) as raised:
            list(session.execute(SimpleStatement(query, fetch_size=5000)))
        assert too_many_tombstones(raised.value), raised.value


def test_rows_per_timeline_complete_with_the_right_counts(tombstoned) -> None:
    session, keyspace = tombstoned
    counter = TimelineRows(session, keyspace)
    every = counter.count("home_timeline", "timeline_id")
    assert every.exact and every.partitions == TRIMMED  # dropped and emptied inboxes hold no row
    assert (every.rows.count, every.rows.total, every.rows.max) == (TRIMMED, TRIMMED * TRIMMED_LIVE, TRIMMED_LIVE)
    sample = counter.count("home_timeline", "timeline_id", sample=30, rng=random.Random(7))
    assert sample.sampled == 30 and sample.rows.total <= 30 * TRIMMED_LIVE
    assert set(sample.rows.to_dict()) and sample.rows.max == TRIMMED_LIVE


def test_a_token_range_refused_for_its_tombstones_is_split(tombstoned) -> None:
    """One range for the whole ring is refused; its halves, and theirs, are read instead: every
    partition with a live row or static, once, in token order."""
    session, keyspace = tombstoned
    rows = list(scan_by_token(session, f"SELECT DISTINCT timeline_id, token(timeline_id) FROM {keyspace}.home_timeline",
                              "timeline_id", initial_ranges=1))
    keys = [r[0] for r in rows]
    assert sorted(keys) == sorted([f"trimmed-{p}" for p in range(TRIMMED)] + [f"dropped-{p}" for p in range(DROPPED)])
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)


def test_reader_activity_loads_every_reader(tombstoned) -> None:
    session, keyspace = tombstoned
    activity = CassandraActivity(session, keyspace)
    readers = {f"reader-{i}": (1_000 + i, "dropped" if i % 3 else "active") for i in range(READERS)}
    activity.save(readers)
    assert activity.load() == readers


HOT_LIVE, HOT_GONE = 10, 201_000  # one inbox: its newest rows, then more tombstones than the threshold
CAP, SLACK = 5, 2


@pytest.fixture(scope="module")
def hot(settings: Settings):
    """A keyspace holding one inbox whose trimmed rows alone exceed the threshold."""
    from cassandra.concurrent import execute_concurrent
    from cassandra.query import BatchStatement, BatchType

    keyspace = f"scan_{uuid.uuid4().hex[:8]}"
    cluster, session = connect(settings)
    try:
        apply_schema(session, keyspace)
        insert = session.prepare(f"INSERT INTO {keyspace}.home_timeline (timeline_id, created_at, tweet_id,"
                                 " author_id, version, text, profile_version) VALUES ('hot', ?, ?, 'a', 1, 'x', 1)")
        delete = session.prepare(f"DELETE FROM {keyspace}.home_timeline WHERE timeline_id = 'hot' AND created_at = ?"
                                 " AND tweet_id = ?")
        statements: list = [(insert, (10_000_000 + i, f"live-{i}")) for i in range(HOT_LIVE)]
        for start in range(0, HOT_GONE, DELETES_PER_BATCH):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for i in range(start, start + DELETES_PER_BATCH):
                batch.add(delete, (i, f"gone-{i}"))
            statements.append((batch, None))
        execute_concurrent(session, statements, concurrency=64, raise_on_first_error=True)
        yield session, keyspace
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
    finally:
        cluster.shutdown()


def test_one_partition_over_the_threshold(hot) -> None:
    """The trimmer still cuts such an inbox to the cap (from its newest rows), and rows per timeline
    names the partition instead of failing as if Cassandra were down."""
    session, keyspace = hot
    newest = f"SELECT tweet_id FROM {keyspace}.home_timeline WHERE timeline_id = 'hot'"
    with pytest.raises(Exception) as raised:  # a whole read of it is refused
        list(session.execute(newest))
    assert too_many_tombstones(raised.value)

    trimmer = CassandraTrimmer(session, keyspace, inbox_cap=CAP, trim_slack=SLACK)
    result = trimmer.trim(["hot"])
    # it read the newest cap + slack + 1 rows and cut those beyond the cap; older live rows it could
    # not reach may remain, so it reports no bound for the timeline
    assert (result.trimmed_timelines, result.trimmed_rows, result.kept) == (1, SLACK + 1, {})
    head = [r[0] for r in session.execute(newest + f" LIMIT {CAP}")]
    assert head == [f"live-{i}" for i in range(HOT_LIVE - 1, HOT_LIVE - 1 - CAP, -1)]
    line = session.execute(f"SELECT cut_created_at, cut_tweet_id FROM {keyspace}.home_timeline"
                           " WHERE timeline_id = 'hot' LIMIT 1").one()
    assert tuple(line) == (10_000_000 + HOT_LIVE - CAP, f"live-{HOT_LIVE - CAP}")  # the oldest row kept

    with pytest.raises(TooManyTombstones, match="'hot'"):
        TimelineRows(session, keyspace).count("home_timeline", "timeline_id")
