"""The cut line of trimmed inboxes and the refill check on the real Cassandra (docs/trimming.md#refill).

A trim records the oldest row it kept as the partition's cut line and only ever raises it; the check
reports the trimmed inboxes that removals left with fewer than the cap at or above their line, with
the line, the shortfall and the push authors a refill asks (the reader's visible users less its pull
authors). The line is compared as the clustering key (created_at, tweet_id), ties on created_at too.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, Iterator

import pytest

from feed_service.core.rows import Entry, PullFollowWrite, TimelineWrite
from feed_service.settings import Settings

CAP, SLACK = 3, 1


@pytest.fixture(scope="module")
def store(settings: Settings) -> Iterator[tuple[Settings, Any]]:
    """One keyspace of its own for the module (provisioned once) and a session on it."""
    from feed_service.ops.provision import provision
    from feed_service.store.session import connect

    unique = uuid.uuid4().hex[:10]
    isolated = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}", inbox_cap=CAP,
                       trim_slack=SLACK)
    provision(isolated)
    cluster, session = connect(isolated)
    try:
        yield isolated, session
    finally:
        cluster.shutdown()


def _write(session: Any, keyspace: str, timeline: str, rows: list[tuple[str, int]], *, op: str = "insert",
           ts: int = 10) -> None:
    from feed_service.store.cassandra_writer import CassandraWriter

    CassandraWriter(session, keyspace).write(
        timeline=[TimelineWrite(op, timeline, Entry(tweet_id, "a1", created_at, 1, "x", 1), ts)
                  for tweet_id, created_at in rows])


def _line(session: Any, keyspace: str, timeline: str) -> tuple[Any, Any, Any]:
    """The partition's cut line and the write time of its cells."""
    row = session.execute(f"SELECT cut_created_at, cut_tweet_id, WRITETIME(cut_created_at)"
                          f" FROM {keyspace}.home_timeline WHERE timeline_id = %s LIMIT 1", (timeline,)).one()
    return (None, None, None) if row is None else (row[0], row[1], row[2])


def _keys(session: Any, keyspace: str, timeline: str) -> list[str]:
    return [r[0] for r in session.execute(f"SELECT tweet_id, created_at FROM {keyspace}.home_timeline"
                                          " WHERE timeline_id = %s", (timeline,)) if r[1] is not None]


def test_a_trim_raises_the_cut_line_and_never_lowers_it(store: tuple[Settings, Any]) -> None:
    from feed_service.store.cassandra_trimmer import CassandraTrimmer
    from feed_service.store.cassandra_writer import CassandraWriter

    pipeline, session = store
    ks = pipeline.keyspace
    trimmer = CassandraTrimmer(session, ks, inbox_cap=CAP, trim_slack=SLACK)
    _write(session, ks, "u", [(f"t{n}", n) for n in range(6)])
    _write(session, ks, "small", [("s0", 1), ("s1", 2)])
    CassandraWriter(session, ks).write(pull_follows=[PullFollowWrite("insert", "statics", "star", 5)])

    result = trimmer.trim(["u", "small", "statics", "nobody"])
    assert result.kept == {"u": 3, "small": 2, "statics": 0, "nobody": 0} and result.trimmed_timelines == 1
    assert _keys(session, ks, "u") == ["t5", "t4", "t3"]
    created_at, tweet_id, first_written = _line(session, ks, "u")
    assert (created_at, tweet_id) == (3, "t3")  # the oldest row kept
    # a timeline within its limit, or holding only statics, is not cut and gets no line
    assert _line(session, ks, "small")[:2] == (None, None) and _line(session, ks, "statics")[:2] == (None, None)

    # newer rows push the oldest kept up: the line follows, a tie on created_at ordered by tweet_id
    _write(session, ks, "u", [("t6", 6), ("t7a", 7), ("t7", 7), ("t8", 8)])
    assert trimmer.trim(["u"]).trimmed_rows == 4
    assert _keys(session, ks, "u") == ["t8", "t7a", "t7"]
    created_at, tweet_id, raised_at = _line(session, ks, "u")
    assert (created_at, tweet_id) == (7, "t7") and raised_at > first_written

    # removals at the top, then old rows written again (a follow of an author with old tweets, at
    # its key's later clock): the trim keeps an older oldest row, and the line stays where it was
    _write(session, ks, "u", [("t8", 8), ("t7a", 7)], op="delete", ts=20)
    _write(session, ks, "u", [(f"t{n}", n) for n in range(4)], ts=30)
    result = trimmer.trim(["u"])
    assert (result.kept, result.trimmed_rows) == ({"u": 3}, 2)
    assert _keys(session, ks, "u") == ["t7", "t3", "t2"]
    assert _line(session, ks, "u") == (7, "t7", raised_at)  # not rewritten


def test_short_inboxes_reports_the_trimmed_timelines_removals_left_short(store: tuple[Settings, Any]) -> None:
    from feed_service.store.cassandra_refill import CassandraRefillCheck
    from feed_service.store.cassandra_trimmer import CassandraTrimmer
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.ports import ShortInbox

    pipeline, session = store
    ks = pipeline.keyspace
    trimmer = CassandraTrimmer(session, ks, inbox_cap=CAP, trim_slack=SLACK)
    rows = [(f"r{n}", n * 10) for n in range(6)]  # kept: r5, r4, r3; the line (30, "r3")
    for timeline in ("short", "line_row_gone", "full", "refilled_top"):
        _write(session, ks, timeline, rows)
    _write(session, ks, "never", rows[:2])  # never trimmed, however few rows
    assert trimmer.trim(["short", "line_row_gone", "full", "refilled_top", "never"]).trimmed_timelines == 4

    # short: one row above the line goes; a row at the line's created_at but below it in tweet_id
    # order, and one far below, do not count
    _write(session, ks, "short", [("r5", 50)], op="delete", ts=20)
    _write(session, ks, "short", [("r2z", 30), ("r0", 0)], ts=30)
    # line_row_gone: the row at the line goes (at or above: the line itself counts), and another
    _write(session, ks, "line_row_gone", [("r3", 30), ("r4", 40)], op="delete", ts=20)
    # full: deletes below the line only; refilled_top: a new row above the line replaces a deleted one
    _write(session, ks, "full", [("r0", 0), ("r1", 10)], op="delete", ts=20)
    _write(session, ks, "refilled_top", [("r4", 40)], op="delete", ts=20)
    _write(session, ks, "refilled_top", [("r3a", 30)], ts=30)  # (30, "r3a") is above (30, "r3")

    # the readers' visible users, and a pull author among them (a static of the inbox partition)
    for reader in ("short", "line_row_gone"):
        for user in ("a2", "a1", "p1", "p2"):
            session.execute(f"INSERT INTO {ks}.reader_visible (reader_id, user_id) VALUES (%s, %s)", (reader, user))
    CassandraWriter(session, ks).write(pull_follows=[PullFollowWrite("insert", "short", "p1", 5),
                                                     PullFollowWrite("insert", "short", "p2", 5),
                                                     PullFollowWrite("insert", "short", "gone", 5),
                                                     PullFollowWrite("insert", "line_row_gone", "p2", 5)])

    check = CassandraRefillCheck.connect(pipeline)
    try:
        assert check.inbox_cap == CAP
        short = check.short_inboxes(["never", "full", "line_row_gone", "nobody", "short", "refilled_top", "short"])
    finally:
        check.close()
    assert short == [
        ShortInbox("line_row_gone", (30, "r3"), 2, ("a1", "a2", "p1")),
        ShortInbox("short", (30, "r3"), 1, ("a1", "a2")),
    ]
    # no line, no read beyond the statics: a timeline the check does not know is never short
    with_session = CassandraRefillCheck(session, ks, inbox_cap=CAP)
    assert with_session.short_inboxes([]) == [] and with_session.short_inboxes(["never", "nobody"]) == []
    # a larger cap asks for more of the same timelines, and finds the full ones short too
    wider = CassandraRefillCheck(session, ks, inbox_cap=CAP + 2, concurrency=2)
    assert [(s.timeline_id, s.need) for s in wider.short_inboxes(["full", "short", "refilled_top"])] == [
        ("full", 2), ("short", 3), ("refilled_top", 2)]
