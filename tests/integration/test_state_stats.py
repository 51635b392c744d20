"""State size and rows per timeline on the real stack: the stream's progress record and
``feedctl state-stats`` run beside it on the same checkpoint (docs/streaming.md)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from feed_service.distribution import summarize
from feed_service.settings import Settings
from feed_service.store.timeline_rows import TimelineRows
from spark_jobs.state_stats import last_committed_batch

from tests.support.pipeline import StreamProcess, read_table
from tests.support.world import World


def _wait_for_stats(stream: StreamProcess, batch_id: int, timeout: float = 90) -> dict[str, Any]:
    """The progress record once its periodic figures are of batch ``batch_id`` or a later one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = stream.progress() or {}
        stats = p.get("state_stats") or {}
        done = (stats.get("state") or {}).get("batch_id")
        if done is not None and done >= batch_id:
            return p
        time.sleep(0.5)
    raise AssertionError(f"no state stats of batch {batch_id} within {timeout}s; progress {stream.progress()}")


def _rows_per_key(settings: Settings, table: str, key: str) -> tuple[list[int], int]:
    """Rows per partition holding rows, and the number of partitions: one holding only its statics (a
    reader of pull authors alone) has no row."""
    rows = read_table(settings, f"SELECT {key}, created_at FROM {table}")
    return list(Counter(r[0] for r in rows if r[1] is not None).values()), len({r[0] for r in rows})


def test_progress_and_command_report_state_size_and_rows_per_timeline(world: World) -> None:
    """On the streamed world's phase 1 (tests/support/world.py), caught up and idle."""
    pipeline, stream, checkpoint, events = world.settings, world.stream, world.checkpoint, world.events
    caught_up = stream.wait_caught_up()
    # (the progress of an idle trigger already names the next batch: the commit log says which one ran)
    batch = last_committed_batch(checkpoint / "join")
    assert batch is not None
    # Live figures every second, from the last batch's progress.
    live = caught_up["timeline-join"]["state"]
    assert live["numRowsTotal"] > 0 and live["memoryUsedBytes"] > 0

    # The command, in its own process and Spark session, while the stream runs on the checkpoint.
    proc = subprocess.run([sys.executable, "-m", "feed_service", "state-stats", "--checkpoint", str(checkpoint),
                           "--json"], env={**os.environ, **pipeline.to_env()}, capture_output=True, text=True,
                          timeout=600)  # its own Spark session: minutes on a loaded machine
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout)
    periodic = _wait_for_stats(stream, report["state"]["batch_id"])["state_stats"]
    # Nothing came in meanwhile: a later batch, if any, had no input and left the state as it was.
    assert stream.progress()["timeline-join"]["end_offsets"] == caught_up["timeline-join"]["end_offsets"]

    state = report["state"]
    sizes = state["bytes_per_key"]
    ids = {value for e in events for name, value in e.items() if name.endswith("_id")}  # every key is one
    assert state["batch_id"] >= batch and 0 < state["keys"] <= len(ids)
    assert 0 < sizes["p50"] <= sizes["p99"] <= sizes["max"] <= state["total_bytes"] == sizes["total"]
    # Per join key, though the state is kept in buckets of keys (docs/state-buckets.md).
    assert state["variables"]["bucket_cores"]["count"] == state["keys"]
    # The stream's own computation of the same state gives the same figures.
    assert {**periodic["state"], "batch_id": None} == {**state, "batch_id": None}

    # Rows per timeline equal what CQL counts, timeline by timeline.
    home_rows, home_partitions = _rows_per_key(pipeline, "home_timeline", "timeline_id")
    home = summarize(home_rows).to_dict()
    own = summarize(_rows_per_key(pipeline, "author_timeline", "author_id")[0]).to_dict()
    timelines = report["timelines"]
    assert home["count"] > 0 and own["count"] > 0
    assert home_partitions > home["count"]  # readers of pull authors alone: partitions holding statics only
    assert timelines["home_timeline"] == {"table": "home_timeline", "partitions": home["count"], "exact": True,
                                          "sampled": home_partitions, "rows": home}
    assert timelines["author_timeline"]["rows"] == own
    assert periodic["timelines"] == timelines  # its sample (1000) covers every timeline here: exact too
    # Readers by state (docs/activity.md): every reader written counts as read then (kept for a
    # window), nobody is inactive yet, no write was skipped.
    readers = report["readers"]
    assert readers["active"] >= home["count"] and (readers["inactive"], readers["rebuilding"]) == (0, 0)
    assert readers["skipped_rows"] == 0

    # A sample smaller than the table: sizes of real timelines, the number of timelines estimated.
    with TimelineRows.connect(pipeline) as counter:
        sampled = counter.count("home_timeline", "timeline_id", sample=10, rng=random.Random(1))
    real = Counter(r[0] for r in read_table(pipeline, "SELECT timeline_id, created_at FROM home_timeline")
                   if r[1] is not None)  # not a partition holding only its static pull_authors
    assert (sampled.sampled, sampled.exact) == (10, False) and 0 < sampled.rows.count <= 10
    assert sampled.rows.max in real.values() and sampled.rows.p50 in real.values()
    assert sampled.partitions >= sampled.rows.count
