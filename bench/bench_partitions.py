"""State partitions benchmark: micro-batch cost and freshness of the stream at 2, 8 and 32 state
partitions, on the same workload, in one run.

Reuses bench_stream.py's machinery (isolated topics and keyspace, the follow graph, the stream as a
child process, the freshness sampler); the number of state partitions reaches each new checkpoint
through FEED_STATE_PARTITIONS (``Settings.state_partitions`` -> ``StreamProcess``'s environment).
Per partition count:

1. backlog: the graph streamed, then ``--events`` tweets published at once; the time to catch up
   gives tweets/s; the micro-batches of the backlog: how many (batch ids) and their mean (catch-up
   time / count: batches run back to back), and p50/p99/max of their ``triggerExecution`` from the
   stream's log. The stream logs the batch its status loop sees once a second, so on batches shorter
   than a second the quantiles come from a sample (every batch longer than a second is in it);
2. freshness (``--skip freshness`` to leave it out): bench_stream's run at ``--rate`` tweets/s for
   ``--seconds`` after ``--warmup-seconds``: publish-to-readable p50/p99, plus the micro-batches of
   the sampled window (the last ``--seconds`` of the stream's log).

Prints the machine's load average with every figure (2 cores: other jobs move everything). Asserts
nothing. Against the developer stack (``feedctl stack up``; settings from the environment):

    .venv/bin/python bench/bench_partitions.py [--partitions 2,8,32] [--events 10000] [--fanout 50]
    .venv/bin/python bench/bench_partitions.py --events 500 --seconds 10 --warmup-seconds 5   # a quick try
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import _graph_pipeline, _tweet, freshness  # noqa: E402 - the sibling benchmark's machinery

from feed_service.settings import Settings  # noqa: E402

#: The stream's per-batch log line (spark_jobs/stream/supervisor.py, supervise): time, batch id, input rows, durations.
BATCH_LINE = re.compile(r"^(\S+ \S+) INFO feed\.stream: batch (\d+): (\d+) input rows, .*triggerExecution=(\d+)ms")


def _load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def batches(log: Path, *, after_batch: int = -1, last_seconds: float | None = None) -> list[float]:
    """Durations (s) of the logged micro-batches with input in the stream's ``log``: those after
    ``after_batch``, or those of the last ``last_seconds`` of the log."""
    found: list[tuple[float, int, float]] = []
    for line in log.read_text(errors="replace").splitlines():
        m = BATCH_LINE.match(line)
        if m and int(m.group(3)) > 0:
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.append((at, int(m.group(2)), int(m.group(4)) / 1000))
    if last_seconds is not None and found:
        end = found[-1][0]
        return [d for at, _, d in found if at >= end - last_seconds]
    return [d for _, batch, d in found if batch > after_batch]


def _quantiles(durations: list[float]) -> str:
    if not durations:
        return "no batches logged"
    ordered = sorted(durations)
    q = lambda p: ordered[min(len(ordered) - 1, int(p * len(ordered)))]  # noqa: E731
    return (f"{len(ordered)} batches, p50 {q(0.5):.2f}s, p99 {q(0.99):.2f}s, max {ordered[-1]:.2f}s,"
            f" mean {sum(ordered) / len(ordered):.2f}s")


def backlog(base: Settings, partitions: int, args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    """The graph, then ``--events`` tweets at once: catch-up time and the backlog's batch durations."""
    from feed_service.kafka.producer import EventProducer

    settings, graph, stream = _graph_pipeline(replace(base, state_partitions=partitions), f"p{partitions}b", 7,
                                              args, workdir)
    try:
        graph_done = int(stream.wait_caught_up(timeout=1200)["timeline-join"]["batch_id"])
        rows_before = stream.progress()["timeline_rows_written"]
        authors = list(graph)
        now = int(time.time() * 1000)
        with EventProducer(settings) as producer:
            for n in range(args.events):
                producer.publish_event(_tweet(authors[n % len(authors)], n, now + n))
        started = time.perf_counter()
        progress = stream.wait_caught_up(timeout=3600)
        elapsed = time.perf_counter() - started
    finally:
        stream.stop()
    count = max(1, int(progress["timeline-join"]["batch_id"]) - graph_done)
    return {"seconds": elapsed, "tweets_per_s": args.events / elapsed, "count": count, "mean": elapsed / count,
            "inserts_per_s": (progress["timeline_rows_written"] - rows_before) / elapsed,
            "batches": batches(stream.log_file, after_batch=graph_done), "load": _load()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="2,8,32", help="comma list of state partition counts")
    parser.add_argument("--events", type=int, default=10_000, help="tweets of the backlog (a small number: a quick try)")
    parser.add_argument("--fanout", type=int, default=50)
    parser.add_argument("--authors", type=int, default=200)
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=100.0, help="tweets/s of the freshness run")
    parser.add_argument("--seconds", type=float, default=30.0, help="sampled seconds of the freshness run")
    parser.add_argument("--warmup-seconds", type=float, default=15.0)
    parser.add_argument("--skip", default="", help="comma list of phases to skip: backlog,freshness")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    counts = [int(p) for p in args.partitions.split(",")]
    base = Settings.from_env()
    workdir = Path(tempfile.mkdtemp(prefix="bench-partitions-"))
    print(f"bench_partitions: {counts} state partitions, {args.events:,} tweets backlog, fan-out {args.fanout}"
          f"; logs in {workdir}; {_load()}", flush=True)
    for run, partitions in enumerate(counts):
        if "backlog" not in skip:
            folder = workdir / f"{run}-p{partitions}-backlog"
            folder.mkdir()
            r = backlog(base, partitions, args, folder)
            print(f"{partitions:>3} partitions, backlog: {r['tweets_per_s']:,.0f} tweets/s, "
                  f"{r['inserts_per_s']:,.0f} timeline inserts/s ({r['seconds']:.1f}s); {r['count']} micro-batches,"
                  f" mean {r['mean']:.2f}s; logged: {_quantiles(r['batches'])}  ({r['load']})", flush=True)
        if "freshness" not in skip:
            folder = workdir / f"{run}-p{partitions}-freshness"
            folder.mkdir()
            f = freshness(replace(base, state_partitions=partitions), args, folder)
            logs = sorted(folder.glob("stream-*.log"))
            window = batches(logs[-1], last_seconds=args.seconds) if logs else []
            print(f"{partitions:>3} partitions, {args.rate:.0f} tweets/s: freshness p50 {f['p50_s']:.2f}s, "
                  f"p99 {f['p99_s']:.2f}s over {f['samples']} samples ({f['lost']} not seen); logged micro-batches: "
                  f"{_quantiles(window)}  ({_load()})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
