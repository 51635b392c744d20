"""The backfill and inactive readers (docs/activity.md#backfill): by default it lays out only the
inboxes of readers not recorded inactive by the stream, flags the others dropped (their reads merge
from the author timelines, exactly); ``--all-inboxes`` lays out every inbox and keeps them."""

from __future__ import annotations

import time
from pathlib import Path

from feed_service.core.reference import reference_timelines
from feed_service.settings import Settings
from feed_service.store.cassandra_activity import CassandraActivity
from spark_jobs.backfill import BackfillOptions, run_backfill

from tests.support.pipeline import grpc_server, publish, read_all_home_timelines, read_table
from tests.support.history import history
from tests.support.isolation import isolated


def _inbox(pipeline: Settings, reader: str) -> tuple[bool | None, int]:
    rows = read_table(pipeline, f"SELECT tweet_id, inbox_dropped FROM home_timeline WHERE timeline_id = '{reader}'")
    return (rows[0][1] if rows else None), sum(1 for r in rows if r[0] is not None)


def test_backfill_leaves_inactive_readers_inboxes_out_unless_asked(settings: Settings, spark, unique: str,
                                                                   tmp_path: Path) -> None:
    pipeline = isolated(settings, unique, inactive_after_s=3600, read_report_interval_s=60)
    events = history(21, "b21-", events=240)
    publish(pipeline, events)
    reference = reference_timelines(events, inbox_cap=pipeline.inbox_cap)
    readers = sorted(u for u in reference if reference[u])
    stale, recent = readers[0], readers[1]
    now_ms = int(time.time() * 1000)
    store = CassandraActivity.connect(pipeline)
    try:
        store.save({stale: (now_ms - 7200_000, "active"), recent: (now_ms, "active")})
    finally:
        store.close()

    result = run_backfill(spark, pipeline, BackfillOptions(out=tmp_path / "b1"))
    assert result.summary["inactive_readers"] == 1
    assert _inbox(pipeline, stale) == (True, 0)
    assert _inbox(pipeline, recent)[1] > 0 and _inbox(pipeline, readers[2])[1] > 0  # no record: laid out
    with grpc_server(pipeline) as server:
        read = read_all_home_timelines(server, readers[:3])
    assert read == {u: reference[u] for u in readers[:3]}  # the stale reader's read is merged, exact

    run_backfill(spark, pipeline, BackfillOptions(out=tmp_path / "b2", all_inboxes=True))
    flag, rows = _inbox(pipeline, stale)
    assert flag is False and rows > 0
