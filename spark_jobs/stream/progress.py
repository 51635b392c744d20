"""The stream's progress record (docs/streaming.md) and the file it is rewritten to every second."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from spark_jobs.state_stats import PeriodicStats, live_state
from spark_jobs.stream.query import RunningStream


def progress_record(stream: RunningStream, stats: PeriodicStats | None = None) -> dict[str, Any]:
    """What the stream has done: the last batch id and the source end offsets; the state size the
    last batch reported (``state``, cheap) and the latest periodic ``state_stats`` (docs/streaming.md)."""
    record: dict[str, Any] = {"time": time.time(), "timeline_rows_written": stream.timeline_rows.value,
                              "state_buckets": stream.state_buckets}
    for query in (stream.join,):
        progress = query.lastProgress
        record[query.name] = {
            "active": query.isActive,
            "batch_id": progress["batchId"] if progress else None,
            "end_offsets": {k: v for s in (progress or {}).get("sources", []) for k, v in _offsets(s).items()},
            "input_rows": progress.get("numInputRows") if progress else None,
            "duration_ms": progress.get("durationMs", {}).get("triggerExecution") if progress else None,
            "state": live_state(progress),
        }
    record["sink"] = stream.times.record()
    if stream.trimming is not None:
        record["trimming"] = stream.trimming.record()
    refill = getattr(stream, "refill", None)
    if refill is not None:
        record["refill"] = refill.record()
    activity = getattr(stream, "activity", None)
    if activity is not None:
        record["activity"] = activity.record()
    if stats is not None:
        record["state_stats"] = stats.latest()
    return record


def _offsets(source: dict[str, Any]) -> dict[str, dict[str, int]]:
    end = source.get("endOffset")
    if isinstance(end, str):
        end = json.loads(end)
    return end or {}


def write_status(path: Path, record: dict[str, Any]) -> None:
    """Replace the progress file atomically: a reader never sees half a record."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)
