"""Where a micro-batch's job spends its time, from a Spark event log: per stage, wall time, task time
summed over the stage's tasks, and the executors' JVM CPU time, medians over the last jobs.

Task time minus JVM CPU is what the JVM waited for: Python workers (the stateful operator, the
sink), sockets to Kafka and Cassandra, scheduling. Make the log with a freshness run of
bench/bench_stream.py (uncompressed, so no extra package is needed to read it):

    .venv/bin/python bench/bench_stream.py --skip raw,throughput --state-buckets 16 \\
        --variants 'elog:spark.eventLog.enabled=true,spark.eventLog.compress=false,spark.eventLog.dir=file:///tmp/elog'
    .venv/bin/python bench/event_log_stages.py /tmp/elog [--jobs 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator


@dataclass(slots=True)
class Stage:
    name: str
    tasks: int
    wall_ms: float
    task_ms: float = 0.0
    cpu_ms: float = 0.0


@dataclass(slots=True)
class Job:
    started: int
    ended: int | None = None
    stages: list[int] = field(default_factory=list)


def events(root: Path) -> Iterator[dict[str, Any]]:
    """Every event of the logs under ``root`` (a file, or a folder of rolling or plain logs)."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    for path in files:
        if path.suffix in (".zstd", ".lz4", ".snappy", ".lzf"):
            raise SystemExit(f"{path} is compressed: run with spark.eventLog.compress=false")
        with path.open() as lines:
            for line in lines:
                if line.strip():
                    yield json.loads(line)


def read(root: Path) -> tuple[dict[int, Job], dict[int, Stage]]:
    jobs: dict[int, Job] = {}
    stages: dict[int, Stage] = {}
    task_ms: dict[int, float] = defaultdict(float)
    cpu_ms: dict[int, float] = defaultdict(float)
    for e in events(root):
        kind = e["Event"]
        if kind == "SparkListenerJobStart":
            jobs[e["Job ID"]] = Job(e["Submission Time"], stages=list(e["Stage IDs"]))
        elif kind == "SparkListenerJobEnd" and e["Job ID"] in jobs:
            jobs[e["Job ID"]].ended = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            start, end = info.get("Submission Time"), info.get("Completion Time")
            stages[info["Stage ID"]] = Stage(info["Stage Name"].split(" at ")[0], info["Number of Tasks"],
                                             (end - start) if start and end else float("nan"))
        elif kind == "SparkListenerTaskEnd":
            task, metrics = e["Task Info"], e.get("Task Metrics") or {}
            task_ms[e["Stage ID"]] += task["Finish Time"] - task["Launch Time"]
            cpu_ms[e["Stage ID"]] += metrics.get("Executor CPU Time", 0) / 1e6
    for sid, stage in stages.items():
        stage.task_ms, stage.cpu_ms = task_ms[sid], cpu_ms[sid]
    return jobs, stages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path, help="an event log file or the folder spark.eventLog.dir names")
    parser.add_argument("--jobs", type=int, default=20, help="the last N finished jobs (steady micro-batches)")
    args = parser.parse_args()
    jobs, stages = read(args.log)
    last = [j for j in sorted(jobs) if jobs[j].ended is not None][-args.jobs:]
    if not last:
        raise SystemExit("no finished job in the log")
    print(f"{len(last)} jobs: wall p50 {statistics.median(jobs[j].ended - jobs[j].started for j in last):,.0f} ms")  # type: ignore[operator]
    by_position: dict[int, list[Stage]] = defaultdict(list)
    for j in last:
        for position, sid in enumerate(s for s in sorted(jobs[j].stages) if s in stages):
            by_position[position].append(stages[sid])
    for position, runs in sorted(by_position.items()):
        def p50(value: Any) -> float:
            return statistics.median(value(s) for s in runs)
        print(f"  stage {position} ({runs[0].name}, {runs[0].tasks} tasks, {len(runs)} runs): wall p50 "
              f"{p50(lambda s: s.wall_ms):,.0f} ms, task time summed p50 {p50(lambda s: s.task_ms):,.0f} ms, "
              f"JVM CPU p50 {p50(lambda s: s.cpu_ms):,.0f} ms, waiting (task time - JVM CPU) p50 "
              f"{p50(lambda s: s.task_ms - s.cpu_ms):,.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
