"""Bounded home timelines on the real stack (docs/trimming.md).

The trimmer against Cassandra: a trim's tombstones carry each row's own write time, so they never
hide a later write of the row by its key, and hide a replay at the same timestamp. The stream, on the
session's streamed world: a user following prolific authors receives a thousand entries while its inbox
stays within cap + slack rows, across the restart of phase 2, and every home timeline read through gRPC keeps the rule of a
trimmed view; author timelines and pull follows stay bounded by the engine. Background trims keep a
stream of their own: they need a wide slack (40) and batches of a dozen records, settings the world
cannot have beside its small cap.
"""

from __future__ import annotations

from collections import Counter

from pathlib import Path
from typing import Any

import pytest

from feed_service.core.reference import reference_tables, reference_timelines, trim_rule_violations
from feed_service.core.rows import Entry, TimelineFanout, TimelineWrite
from feed_service.core.rules import reply_class
from feed_service.core.trim_tracker import default_margin
from feed_service.settings import Settings
from feed_service.workload.generator import WORKLOAD_EPOCH_MS

from tests.support.isolation import isolated
from tests.support.pipeline import StreamProcess, grpc_server, publish, read_all_home_timelines, read_table, running
from tests.support.world import (INBOX_CAP, PREFIX, PROLIFIC_READER, PROLIFIC_TWEETS, PULL_THRESHOLD, REFILLED_READER,
                                 TRIM_SLACK, World)

CAP, SLACK, THRESHOLD = INBOX_CAP, TRIM_SLACK, PULL_THRESHOLD


def _isolated(settings: Settings, unique: str, *, trim_slack: int = SLACK, pull_threshold: int = THRESHOLD) -> Settings:
    return isolated(settings, unique, inbox_cap=CAP, trim_slack=trim_slack, pull_threshold=pull_threshold)


def _rows(pipeline: Settings, timeline_id: str) -> list[tuple[str, int]]:
    return sorted(r for r in read_table(pipeline, f"SELECT tweet_id, writetime(version) FROM home_timeline"
                                                  f" WHERE timeline_id = '{timeline_id}'") if r[0] is not None)


@pytest.mark.parametrize("form", ["row", "fanout"])
def test_trim_tombstones_carry_each_rows_own_write_time(settings: Settings, unique: str, form: str) -> None:
    """Both write forms: one INSERT per row, and the stream's one UPDATE/DELETE over a list of
    timelines (the same row in "u", "v" and others), which must leave rows a trim treats the same way."""
    from feed_service.store.cassandra_trimmer import CassandraTrimmer
    from feed_service.store.cassandra_writer import MIN_FANOUT_PARTITIONS, CassandraWriter
    from feed_service.store.session import connect

    pipeline = _isolated(settings, unique)
    others = tuple(f"w{i}" for i in range(MIN_FANOUT_PARTITIONS))  # wide enough for the IN form
    cluster, session = connect(pipeline)
    try:
        writer = CassandraWriter(session, pipeline.keyspace)
        trimmer = CassandraTrimmer(session, pipeline.keyspace, inbox_cap=3, trim_slack=1)

        def write(op: str, n: int, ts: int, text: str = "x") -> None:
            author = "fast" if n % 2 else "slow"  # two author keys whose clocks are far apart
            entry = Entry(f"t{n}", author, n, 1, text, 1)
            if form == "row":
                writer.write(timeline=[TimelineWrite(op, "u", entry, ts)])
            else:
                writer.write(timeline_fanout=[TimelineFanout(op, ("u", "v", *others), entry, ts)])

        clock = {"fast": 1_000_000, "slow": 10}
        for n in range(6):
            write("insert", n, clock["fast" if n % 2 else "slow"] + n)
        assert trimmer.trim(["u", "nobody"]).kept == {"u": 3, "nobody": 0}  # 6 > 3 + 1
        assert [t for t, _ in _rows(pipeline, "u")] == ["t3", "t4", "t5"]
        assert trimmer.trim(["u"]).trimmed_rows == 0  # at the cap: nothing to do

        # A replay of a trimmed row's write at its own timestamp stays trimmed (a tombstone wins a tie)...
        write("insert", 1, 1_000_001)
        write("update", 2, 12, "replayed")
        assert [t for t, _ in _rows(pipeline, "u")] == ["t3", "t4", "t5"]
        # ...and a later write by the row's key, even one whose clock is far below another key's, shows.
        write("insert", 2, 13, "again")
        write("update", 1, 1_000_002, "edited")
        assert _rows(pipeline, "u") == [("t1", 1_000_002), ("t2", 13), ("t3", 1_000_003), ("t4", 14),
                                        ("t5", 1_000_005)]
        write("insert", 6, 16)  # 6 rows: trim again, the re-created rows go
        result = trimmer.trim(["u"])
        assert (result.kept, result.trimmed_timelines, result.trimmed_rows) == ({"u": 3}, 1, 3)
        assert [t for t, _ in _rows(pipeline, "u")] == ["t4", "t5", "t6"]
        if form == "fanout":  # "v" got every write "u" got, and was never trimmed
            assert [t for t, _ in _rows(pipeline, "v")] == ["t0", "t1", "t2", "t3", "t4", "t5", "t6"]
            write("delete", 6, 17)
            assert [t for t, _ in _rows(pipeline, "v")] == ["t0", "t1", "t2", "t3", "t4", "t5"]
    finally:
        cluster.shutdown()


def _over_the_bound(pipeline: Settings) -> dict[str, int]:
    counts = read_table(pipeline, "SELECT timeline_id, COUNT(created_at) FROM home_timeline GROUP BY timeline_id")
    return {tid: n for tid, n in counts if n > CAP + SLACK}


def _count(pipeline: Settings, timeline_id: str) -> int:
    return read_table(pipeline, f"SELECT COUNT(created_at) FROM home_timeline WHERE timeline_id = '{timeline_id}'")[0][0]


def test_stream_keeps_every_inbox_within_cap_plus_slack(world_phase2: World) -> None:
    """On the streamed world (tests/support/world.py): its prolific reader received thousands of
    entries across the stream's restart (a new process knows no bounds: each timeline is trimmed at its
    first write, and stays bounded); the refilled reader lost its newest entries after trims, and the
    refill wrote the rows below its cut line again."""
    world = world_phase2
    pipeline, events = world.settings, world.events
    reader, other = PROLIFIC_READER, REFILLED_READER
    # refills of timelines removals left short after trims, in phase 1 (in phase 2 the readers nobody
    # read are dropped: their rows are skipped, their reads merged, exactly as well)
    refills = world.phase1_progress.get("refill") or {}
    assert refills.get("refill_short_timelines", 0) > 0 and refills.get("refill_requests", 0) > 0, refills
    assert len(reference_timelines(events, inbox_cap=None)[reader]) >= 10 * PROLIFIC_TWEETS  # entries received
    assert _count(pipeline, reader) <= CAP + SLACK and _count(pipeline, other) <= CAP + SLACK
    assert _over_the_bound(pipeline) == {}

    with world.server() as server:
        read = read_all_home_timelines(server, world.readers)
    # background trims cut above cap + slack - margin: the stream's exact set is that slack's
    assert trim_rule_violations(read, events, inbox_cap=CAP, trim_slack=SLACK - default_margin(SLACK)) == []
    expected = world.reference()
    # Every timeline is exact: other's lost 30 of its newest entries after trims, and its push
    # authors wrote the rows below its cut line again (docs/trimming.md#refill).
    assert read == {u: t for u, t in expected.items() if u in world.readers} and len(read[other]) == CAP

    # The engine bounds the other two tables: an author timeline holds its newest live tweets (at most
    # the cap), pull follows the active followers of pull authors who see them.
    tables = reference_tables(events)
    per_class = Counter((r[0], reply_class(r[0], r[1] or None)) for r in read_table(
        pipeline, "SELECT author_id, in_reply_to_author_id FROM author_timeline"))  # retention per class
    assert max(per_class.values()) <= CAP and per_class[(f"{PREFIX}prolific1", None)] == CAP
    followers: dict[str, set[str]] = {}
    for (follower, followee), edge in tables.follows.items():
        if edge[1]:
            followers.setdefault(followee, set()).add(follower)
    hidden = tables.hidden()  # the workload's blocks and mutes: a hidden pair merges nothing
    want = sorted((f, a) for a, fs in followers.items() if len(fs) >= THRESHOLD for f in fs if (f, a) not in hidden)
    assert want and sorted(read_table(pipeline, "SELECT follower_id, author_id FROM pull_follows")) == want


def test_background_trims_keep_every_inbox_within_cap_plus_slack(settings: Settings, unique: str,
                                                                 tmp_path: Path) -> None:
    """Readers receiving 8 to 12 entries a batch (a margin's worth) cross cap + slack - margin (50)
    and are trimmed in the background while the next batch runs; at the end no partition holds more
    than cap + slack (60) and every read keeps the rule. (A reader holds at most the cap per
    followed author, so they follow 4 to 6 authors to go past 60 rows untrimmed.)"""
    slack = 40
    pipeline = _isolated(settings, unique, trim_slack=slack, pull_threshold=1000)
    prefix = f"bg{unique[-6:]}-"
    authors = [f"{prefix}a{i}" for i in range(6)]
    readers = {f"{prefix}r{i}": authors[: 4 + i % 3] for i in range(6)}
    events: list[dict[str, Any]] = [{"type": "profile", "user_id": a, "version": 1, "display_name": a} for a in authors]
    events += [{"type": "follow", "op": "follow", "follower_id": r, "followee_id": a, "version": 1}
               for r, followed in readers.items() for a in followed]
    for n in range(CAP):  # each author's retained tweets: a reader of 4 holds 80 rows untrimmed
        for i, a in enumerate(authors):
            events.append({"type": "tweet", "op": "upsert", "tweet_id": f"{a}-{n}", "author_id": a, "version": 1,
                           "created_at": WORKLOAD_EPOCH_MS + n * 50 + i, "text": f"{a} #{n}", "profile_version": 1})
    publish(pipeline, events)
    args = ["--max-offsets-per-trigger", "12"]  # about 2 tweets per author a batch
    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "run.log", extra_args=args)) as stream:
        stream.wait_caught_up(timeout=900)  # a dozen small batches: minutes on a loaded machine
        trims = (stream.progress() or {}).get("trimming") or {}
    counts = dict(read_table(pipeline, "SELECT timeline_id, COUNT(created_at) FROM home_timeline GROUP BY timeline_id"))
    assert set(counts) == set(readers) and max(counts.values()) <= CAP + slack
    assert trims.get("trim_background_timelines", 0) > 0 and trims.get("trim_background_failures") == 0, trims

    with grpc_server(pipeline) as server:
        read = read_all_home_timelines(server, sorted(readers))
    assert trim_rule_violations(read, events, inbox_cap=CAP, trim_slack=slack - default_margin(slack)) == []
    assert read == reference_timelines(events, inbox_cap=CAP)  # no removals: every timeline exact
