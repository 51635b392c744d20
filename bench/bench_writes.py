"""The write forms of home-timeline rows side by side: client CPU and wall time per row.

One process, the developer stack's Cassandra (``feedctl stack up``), an isolated keyspace dropped at
the end. Two shapes of the same kind of rows (docs/idempotent-writes.md, fan-out writes):

- *wide*: tweets each to ``--fanout`` timelines (a push author's tweet);
- *narrow*: ``--narrow-rows`` rows into each of 10 timelines (a follow's back-fill of the followee's
  tweets), one timeline per delta;

each written as one-row INSERTs in UNLOGGED batches (sorted by timeline, as the writer does) and
as one ``UPDATE ... WHERE timeline_id IN ?`` per delta, alternating, ``--rounds`` times; medians.

    .venv/bin/python bench/bench_writes.py [--fanout 50] [--tweets 200] [--narrow-rows 800] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from dataclasses import replace

from feed_service.core.rows import Entry, TimelineFanout
from feed_service.ops.provision import provision
from feed_service.settings import Settings
from feed_service.store.cassandra_writer import MIN_FANOUT_PARTITIONS, CassandraWriter
from feed_service.store.session import connect
from isolated import drop

CHUNK = 2000
"""Rows per write call, as the stream's sink (``spark_jobs/stream/sink.py``)."""


def _deltas(shape: str, tag: str, args: argparse.Namespace) -> list[TimelineFanout]:
    text = "a tweet of some sixty characters, as the workload's are....."
    if shape == "wide":
        return [TimelineFanout("insert", tuple(f"{tag}-u{(i * args.fanout + k) % 5000}" for k in range(args.fanout)),
                               Entry(f"{tag}-t{i}", f"a{i % 200}", 1_700_000_000_000 + i, 1, text, 1), 1)
                for i in range(args.tweets)]
    return [TimelineFanout("insert", (f"{tag}-n{u}",), Entry(f"{tag}-t{i}", "a", 1_700_000_000_000 + i, 1, text, 1), 1)
            for u in range(10) for i in range(args.narrow_rows)]


def _run(writers: dict[str, CassandraWriter], deltas: list[TimelineFanout], form: str) -> tuple[float, float]:
    """(client CPU µs per row, wall µs per row) of writing ``deltas`` in ``form`` (rows or in)."""
    writer = writers[form]
    rows = sum(len(d.timeline_ids) for d in deltas)
    cpu, wall = time.process_time(), time.perf_counter()
    batch: list[TimelineFanout] = []
    size = 0
    for d in deltas:
        batch.append(d)
        size += len(d.timeline_ids)
        if size >= CHUNK:
            writer.write(timeline_fanout=batch)
            batch, size = [], 0
    if batch:
        writer.write(timeline_fanout=batch)
    return 1e6 * (time.process_time() - cpu) / rows, 1e6 * (time.perf_counter() - wall) / rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fanout", type=int, default=50)
    parser.add_argument("--tweets", type=int, default=200)
    parser.add_argument("--narrow-rows", type=int, default=800)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = Settings.from_env()
    settings = replace(base, keyspace=f"bench_writes{uuid.uuid4().hex[:6]}")
    provision(settings)
    cluster, session = connect(settings)
    try:
        # the same writer but for the threshold: every delta as rows, or every one as a fan-out statement
        writers = {"rows": CassandraWriter(session, settings.keyspace, min_fanout_partitions=10**9),
                   "in": CassandraWriter(session, settings.keyspace, min_fanout_partitions=1)}
        _run(writers, _deltas("wide", "warm", args), "rows")
        print(f"bench_writes: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for shape in ("wide", "narrow"):
            figures: dict[str, list[tuple[float, float]]] = {"rows": [], "in": []}
            for r in range(args.rounds):
                for form in ("rows", "in"):
                    figures[form].append(_run(writers, _deltas(shape, f"{shape}{r}{form}", args), form))
            what = (f"{args.tweets} tweets x {args.fanout} timelines" if shape == "wide"
                    else f"10 timelines x {args.narrow_rows} rows, one timeline per delta")
            print(f"{shape} ({what}), medians of {args.rounds}:")
            for form, label in (("rows", "one-row INSERTs in batches of 16"), ("in", "one UPDATE ... IN per delta")):
                cpu = statistics.median(c for c, _ in figures[form])
                wall = statistics.median(w for _, w in figures[form])
                print(f"  {label:36s} client CPU {cpu:6.1f} us/row, wall {wall:6.1f} us/row")
        print(f"bench_writes: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; the writer sends "
              f"deltas to >= {MIN_FANOUT_PARTITIONS} timelines as UPDATE ... IN, narrower ones as rows")
    finally:
        cluster.shutdown()
        drop(settings, topics=False)  # the stack's own topics: provision only made sure they exist
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
