"""The stateful stage alone: what a micro-batch costs per author key, one state per key against state
buckets (docs/state-buckets.md), side by side in one run.

No Kafka, no Cassandra: routed rows (the columns :func:`spark_jobs.envelope.routed_changes` makes)
are written as one Parquet file per micro-batch, a file-source stream reads them one file per
trigger, :func:`spark_jobs.stateful_join.join_timelines` joins them and a ``noop`` sink consumes the
output. Per layout, a first batch follows every author (``--fanout`` followers each; not measured),
then for each ``K`` of ``--keys`` ``--rounds`` batches of K tweets, one per author, so that a batch
steps exactly K author keys. The per-key cost is the slope of the batch time over K (the fixed cost of
a batch cancels out); the same for the CPU of this process tree (Spark's JVM and Python workers,
from /proc: ``bench/process_cpu.py``) and for the Python workers alone.

    .venv/bin/python bench/bench_state_layout.py [--keys 100,400,1600] [--rounds 6] [--buckets 0,16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from process_cpu import tree_cpu

from spark_jobs.envelope import EVENT_COLUMNS, ROUTE_JOIN

ROUTED = (("route", "string"), ("key", "string"), *EVENT_COLUMNS, ("event_time", "bigint"), ("dl_key", "string"),
          ("dl_value", "string"))


def _row(key: str, **fields: object) -> dict:
    row = {name: None for name, _ in ROUTED}
    row.update(route=ROUTE_JOIN, key=key, dl_key="bench/0/0", **fields)
    return row


def write_batch(folder: Path, n: int, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"string": pa.string(), "bigint": pa.int64()}
    table = pa.Table.from_pylist(rows, schema=pa.schema([(name, types[t]) for name, t in ROUTED]))
    tmp = folder / f".batch-{n:05d}.tmp"  # the file source skips names starting with '.'
    pq.write_table(table, tmp)
    tmp.rename(folder / f"batch-{n:05d}.parquet")


def run_layout(spark: object, buckets: int, keys: list[int], rounds: int, fanout: int, workdir: Path) -> dict:
    """Per K: median batch ms, and CPU seconds per batch (tree, Python workers), of ``rounds`` batches."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from spark_jobs.stateful_join import join_timelines
    from spark_jobs.timeline_join import JoinConfig

    source = workdir / f"in-{buckets}"
    source.mkdir()
    authors = [f"a{i}" for i in range(max(keys))]
    now = int(time.time() * 1000)
    n = 0
    write_batch(source, n, [_row(a, type="follow", op="follow", follower_id=f"{a}-f{j}", followee_id=a, version=1)
                            for a in authors for j in range(fanout)])
    plan: list[int] = []
    for k in keys:
        for _ in range(rounds):
            n += 1
            write_batch(source, n, [_row(a, type="tweet", op="upsert", tweet_id=f"{a}-t{n}", author_id=a, version=1,
                                         created_at=now + n, text=f"tweet {n}", profile_version=1, event_time=now)
                                    for a in authors[:k]])
            plan.append(k)
    types = {"string": StringType(), "bigint": LongType()}
    schema = StructType([StructField(name, types[t], True) for name, t in ROUTED])
    changes = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
    out = join_timelines(changes, config=JoinConfig(inbox_cap=800, pull_threshold=10**6, clock_start=1),
                         state_buckets=buckets)
    marks: dict[int, tuple[float, object]] = {}

    def sink(df: object, batch_id: int) -> None:
        df.write.format("noop").mode("overwrite").save()
        marks[batch_id] = (time.perf_counter(), tree_cpu(os.getpid()))

    query = (out.writeStream.option("checkpointLocation", str(workdir / f"ckpt-{buckets}"))
             .foreachBatch(sink).trigger(availableNow=True).start())
    query.awaitTermination()
    durations = {p["batchId"]: p["durationMs"]["triggerExecution"] for p in query.recentProgress}
    result: dict[int, dict[str, float]] = {}
    for k in keys:
        ids = [i + 1 for i, kk in enumerate(plan) if kk == k][1:]  # the first batch of each K warms up
        cpu = [marks[i][1] - marks[i - 1][1] for i in ids if i in marks and i - 1 in marks]
        result[k] = {"batch_ms": statistics.median(durations[i] for i in ids if i in durations),
                     "cpu_s": statistics.median(c.total for c in cpu),
                     "worker_cpu_s": statistics.median(c.python_workers for c in cpu)}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="100,400,1600", help="author keys per batch (comma list)")
    parser.add_argument("--rounds", type=int, default=6, help="batches per K (the first one not counted)")
    parser.add_argument("--fanout", type=int, default=5, help="followers per author")
    parser.add_argument("--buckets", default="0,16", help="state layouts (0: one state per key), comma list")
    parser.add_argument("--partitions", type=int, default=2, help="state partitions")
    args = parser.parse_args()
    keys = sorted(int(k) for k in args.keys.split(","))
    from spark_jobs.runtime.session import build_session

    spark = build_session("bench-state-layout", shuffle_partitions=args.partitions)
    workdir = Path(tempfile.mkdtemp(prefix="bench-state-layout-"))
    print(f"bench_state_layout: keys per batch {keys}, {args.rounds} batches each (first not counted), fan-out "
          f"{args.fanout}, {args.partitions} state partitions; load average {_load()}")
    for buckets in (int(b) for b in args.buckets.split(",")):
        r = run_layout(spark, buckets, keys, args.rounds, args.fanout, workdir)
        name = f"{buckets} state buckets" if buckets else "one state per key"
        for k in keys:
            print(f"  {name}: {k:>5} keys/batch: batch p50 {r[k]['batch_ms']:,.0f} ms, CPU {r[k]['cpu_s']:.2f} s"
                  f" (Python workers {r[k]['worker_cpu_s']:.2f} s)")
        lo, hi = keys[0], keys[-1]
        per = lambda f, scale: scale * (r[hi][f] - r[lo][f]) / (hi - lo)  # noqa: E731
        print(f"{name}: per author key (slope {lo}->{hi} keys): batch {per('batch_ms', 1):.3f} ms, CPU "
              f"{per('cpu_s', 1000):.3f} ms, Python workers {per('worker_cpu_s', 1000):.3f} ms; load average {_load()}",
              flush=True)
    spark.stop()
    return 0


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    raise SystemExit(main())
