"""The stream on the cluster topology next to the single-node stack, back to back in one run.

Starts each stack itself (free ports, a temporary folder; docs/cluster.md), one at a time so that the
measured one has the machine: the single-node stack (one broker, one Cassandra node, Spark
``local[2]``), then the cluster (three brokers, three Cassandra nodes at RF 3 / LOCAL_QUORUM, Spark
standalone with two one-core workers, the code shipped as a zip). On each it prints the start-up times
and then runs ``bench_stream.py``'s raw Cassandra ceiling and its throughput phase (a follow graph
streamed first, then a backlog of ``--tweets`` tweets; tweets/s and timeline inserts/s until caught
up), with the load average. It asserts nothing.

    .venv/bin/python bench/bench_cluster.py [--tweets 4000] [--fanout 50] [--topologies single,cluster]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_stream  # noqa: E402 - the sibling benchmark's phases

from feed_service.ops.provision import provision  # noqa: E402
from feed_service.stack.config import CLUSTER, SINGLE, StackConfig  # noqa: E402
from feed_service.stack.local_stack import LocalStack  # noqa: E402
from feed_service.store.cassandra_writer import DEFAULT_BATCH_ROWS  # noqa: E402


def run_topology(topology: str, args: argparse.Namespace, root: Path) -> dict[str, float]:
    config = StackConfig.with_free_ports(root / topology, topology=topology)
    stack = LocalStack(config)
    started = time.monotonic()
    try:
        timings = stack.up()
        up = time.monotonic() - started
        print(f"[{topology}] stack up in {up:.1f}s: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()
                                                                  if not k.startswith("fetch")), flush=True)
        base = config.settings(keyspace="bench_cluster")
        began = time.monotonic()
        provision(base)
        print(f"[{topology}] provisioned in {time.monotonic() - began:.1f}s", flush=True)
        previous = os.environ.pop("FEED_SPARK_MASTER", None)
        if config.spark_master_url:
            os.environ["FEED_SPARK_MASTER"] = config.spark_master_url  # read by the stream's build_session
        try:
            raw_settings = bench_stream._pipeline(base, f"raw{uuid.uuid4().hex[:4]}")
            ceiling = bench_stream.raw_ceiling(raw_settings, args.tweets * args.fanout, 2, DEFAULT_BATCH_ROWS)
            print(f"[{topology}] raw Cassandra ceiling ({base.write_consistency}): {ceiling:,.0f} timeline inserts/s; "
                  f"load average {bench_stream._load()}", flush=True)
            r = bench_stream.throughput(base, args, root / f"work-{topology}")
        finally:
            os.environ.pop("FEED_SPARK_MASTER", None)
            if previous is not None:
                os.environ["FEED_SPARK_MASTER"] = previous
        print(f"[{topology}] stream: {r['tweets_per_s']:,.0f} tweets/s, "
              f"{r['inserts_per_s']:,.0f} timeline inserts/s ({r['rows']:,} rows in {r['seconds']:.1f}s, fan-out "
              f"{args.fanout}), {100 * r['inserts_per_s'] / ceiling:.0f}% of the raw ceiling; load average "
              f"{bench_stream._load()}", flush=True)
        return {"up_s": up, "raw": ceiling, **r}
    finally:
        stack.down()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tweets", type=int, default=4_000, help="backlog of the throughput run")
    parser.add_argument("--fanout", type=int, default=50)
    parser.add_argument("--authors", type=int, default=200)
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--topologies", default=f"{SINGLE},{CLUSTER}", help="comma list, run in this order")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    print(f"bench_cluster: stacks and logs in {root}; load average {bench_stream._load()}", flush=True)
    results = {}
    try:
        for topology in args.topologies.split(","):
            (root / f"work-{topology}").mkdir(parents=True, exist_ok=True)
            results[topology] = run_topology(topology, args, root)
    finally:
        if os.environ.get("FEED_KEEP_BENCH") != "1":
            shutil.rmtree(root, ignore_errors=True)
    if {SINGLE, CLUSTER} <= results.keys():
        s, c = results[SINGLE], results[CLUSTER]
        print(f"cluster / single: stream {c['inserts_per_s'] / s['inserts_per_s']:.2f}x timeline inserts/s, raw "
              f"ceiling {c['raw'] / s['raw']:.2f}x, start-up {c['up_s'] / s['up_s']:.2f}x the time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
