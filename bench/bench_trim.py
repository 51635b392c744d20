"""Trimming benchmark: what a trim costs per trimmed row and per timeline, full scan against bounded
read, and what trimming costs a batch's critical path, synchronous against background (docs/trimming.md).

Against the developer stack (``feedctl stack up``; settings from the environment), in a keyspace of
its own (``feed_benchtrim<run>``, provisioned like the other benches, dropped at the end unless
``--keep``). Prints figures and the load average; asserts nothing.

1. **Per trim** (``--timelines`` per group): every timeline gets a history of ``--history`` earlier
   trims (``--rows-per-trim`` rows written, then a full trim: the per-row tombstones a long-lived
   timeline carries until gc_grace_seconds), then ``cap + slack + k`` live rows. Measured on
   identical groups: reads only (a limit no timeline reaches) and real trims, each with a full
   scan (the bound unknown), a read bounded by the exact live count (the tracker's bound after a
   trim plus inserts) and one bounded by an overestimate (``--overestimate`` rows: updates and
   deletes since the last trim); the write of the same rows for comparison.
2. **Per batch** (``--batch-timelines`` timelines, ``--batches`` batches): each batch writes
   0..2×``--rows-per-batch`` rows to each timeline (plus, with probability ``--burst-p``, a burst of
   ``--burst`` rows: a follow of a busy author) from a separate process (the executors), then runs
   :meth:`StreamTrimming.after_batch` with a real :class:`CassandraTrimmer`: the time after the
   writes is the batch's critical-path trim. The rest of a batch's job (reading Kafka, the join) is
   a wait of ``--job-factor`` times the writes' time in that process (default 1: in the long run of
   docs/trimming.md a 28-36 s batch spent 9-13 s trimming, about its write time, so the job's
   19-23 s were about half writes). Once with every trim synchronous (as before
   background trims), once with background trims, on their own timelines.

    flock /tmp/team/bench.lock .venv/bin/python bench/bench_trim.py
    .venv/bin/python bench/bench_trim.py --timelines 10 --history 3 --batches 5   # a quick try
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from feed_service.core.rows import Entry, TimelineWrite  # noqa: E402
from feed_service.settings import Settings  # noqa: E402
from feed_service.store.schema import apply_schema  # noqa: E402


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


# -- writing rows (in this process for the setup, in a child process for the batches) ------------

_writer: Any = None


def _init_writer(settings: Settings) -> None:
    global _writer
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.session import connect

    _, session = connect(settings)
    _writer = CassandraWriter(session, settings.keyspace, concurrency=64)


def _rows(spec: list[tuple[str, int, int]]) -> list[TimelineWrite]:
    """(timeline, first key, count) -> insert rows with created_at = write time = the key (the
    timeline's clock: new rows go to the head, trims' tombstones stay at the old end)."""
    return [TimelineWrite("insert", tid, Entry(f"{tid}-{k}", f"author{k % 37}", k, 1, "x" * 40, 1), k)
            for tid, first, n in spec for k in range(first, first + n)]


def write_spec(spec: list[tuple[str, int, int]], job_factor: float = 0.0) -> tuple[int, float]:
    """Write the rows of ``spec`` through the project's writer, then stand for the rest of a batch's
    job (reading Kafka, the join) by waiting ``job_factor`` times the write's time; (rows, write seconds)."""
    rows = _rows(spec)
    started = time.perf_counter()
    _writer.write(timeline=rows)
    elapsed = time.perf_counter() - started
    time.sleep(elapsed * job_factor)
    return len(rows), elapsed


# -- part 1: one trim ----------------------------------------------------------------------------


def per_trim(settings: Settings, args: argparse.Namespace) -> None:
    from feed_service.store.cassandra_trimmer import CassandraTrimmer

    cap, slack = settings.inbox_cap, settings.trim_slack
    live = cap + slack + args.k
    groups = {name: [f"{name}{i:04d}" for i in range(args.timelines)] for name in ("full", "exact", "over")}
    ids = [t for g in groups.values() for t in g]
    trimmer = CassandraTrimmer.connect(settings)
    clock = dict.fromkeys(ids, 1)

    def write(n: int) -> tuple[int, float]:
        spec = [(t, clock[t], n) for t in ids]
        for t in ids:
            clock[t] += n
        return write_spec(spec)

    began = time.perf_counter()
    write(cap)
    for _ in range(args.history):
        write(args.rows_per_trim)
        trimmer.trim(ids, limit=cap)  # everything beyond the cap goes: rows_per_trim tombstones per trim
    rows, write_s = write(live - cap)
    tombstones = args.history * args.rows_per_trim
    print(f"\n== per trim: {args.timelines} timelines per group, {live} live rows each (cap {cap} + slack {slack}"
          f" + {args.k}), {tombstones} row tombstones each from {args.history} earlier trims"
          f" (built in {time.perf_counter() - began:.0f}s); {_load()}", flush=True)
    print(f"write of the last {live - cap} rows per timeline: {rows} rows in {write_s * 1000:.0f} ms ="
          f" {write_s * 1e6 / rows:.1f} us per row written", flush=True)

    bounds = {"full": None, "exact": live, "over": live + args.overestimate}

    def bound_map(name: str) -> dict[str, int | None] | None:
        b = bounds[name]
        return None if b is None else dict.fromkeys(groups[name], b)

    reads: dict[str, float] = {}
    for _ in range(args.repeat):  # reads only: the same partitions each time, no mutation
        for name in groups:
            started = time.perf_counter()
            result = trimmer.trim(groups[name], bounds=bound_map(name), limit=10**9)
            elapsed = time.perf_counter() - started
            assert result.trimmed_rows == 0
            reads[name] = min(reads.get(name, elapsed), elapsed)
    print(f"reads only (best of {args.repeat}), per timeline:", flush=True)
    for name in groups:
        label = {"full": "full scan (bound unknown)", "exact": f"LIMIT {live} (exact bound)",
                 "over": f"LIMIT {live + args.overestimate} (bound {args.overestimate} over)"}[name]
        print(f"  {label:34s} {reads[name] * 1000 / args.timelines:7.2f} ms", flush=True)
    print("trims (read + per-row deletes of the rows beyond the cap):", flush=True)
    for name in groups:
        started = time.perf_counter()
        result = trimmer.trim(groups[name], bounds=bound_map(name))
        elapsed = time.perf_counter() - started
        print(f"  {name:5s}: {result.trimmed_timelines} timelines, {result.trimmed_rows} rows in {elapsed * 1000:.0f} ms:"
              f" {elapsed * 1000 / max(1, result.trimmed_timelines):.2f} ms per timeline,"
              f" {elapsed * 1e6 / max(1, result.trimmed_rows):.1f} us per trimmed row", flush=True)
    trimmer.close()


# -- part 2: batches -----------------------------------------------------------------------------


def per_batch(settings: Settings, args: argparse.Namespace, pool: ProcessPoolExecutor, background: bool) -> None:
    from spark_jobs.stream.trimming import StreamTrimming

    cap = settings.inbox_cap
    mode = "background" if background else "synchronous"
    rnd = random.Random(args.seed)
    ids = [f"{mode[:2]}{i:05d}" for i in range(args.batch_timelines)]
    clock = dict.fromkeys(ids, 1)
    pool.submit(write_spec, [(t, 1, cap) for t in ids]).result()  # every timeline starts at the cap
    for t in ids:
        clock[t] += cap
    trimming = StreamTrimming(settings, background=background)
    trimming.tracker.trimmed(dict.fromkeys(ids, cap))  # known bounds, as in a stream's steady state
    writes, crit, totals = [], [], []
    for _ in range(args.batches):
        spec = []
        for t in ids:
            n = rnd.randint(0, 2 * args.rows_per_batch)
            if rnd.random() < args.burst_p:
                n += args.burst
            if n:
                spec.append((t, clock[t], n))
                clock[t] += n
        started = time.perf_counter()
        _, write_s = pool.submit(write_spec, spec, args.job_factor).result()
        written = time.perf_counter()
        trimming.after_batch({t: n for t, _, n in spec})
        ended = time.perf_counter()
        writes.append(write_s * 1000)
        crit.append((ended - written) * 1000)
        totals.append((ended - started) * 1000)
    trimming._wait_background()  # the last batch's background trims, for the counters
    r = trimming.record()
    trimming.close()
    rows = sum(clock[t] - 1 - cap for t in ids)
    total_ms = sum(totals)
    print(f"\n== batches, {mode}: {args.batch_timelines} timelines, {args.batches} batches, {rows} rows written"
          f" ({rows // args.batches} per batch); {_load()}", flush=True)
    q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    print(f"  batch (job + critical trim; job = write + {args.job_factor:g} x write) p50 {q(totals, .5):.0f} ms, mean {statistics.mean(totals):.0f} ms;"
          f" write p50 {q(writes, .5):.0f} ms, mean {statistics.mean(writes):.0f} ms", flush=True)
    print(f"  critical-path trim p50 {q(crit, .5):.0f} ms, p90 {q(crit, .9):.0f} ms, mean {statistics.mean(crit):.0f} ms"
          f" = {sum(crit) * 100 / total_ms:.1f} % of batch time ({sum(crit):.0f} of {total_ms:.0f} ms;"
          f" of which waiting for the background {r['trim_wait_ms']} ms)", flush=True)
    print(f"  critical trims: {r['trim_critical_timelines']} timelines, {r['trim_critical_rows']} rows,"
          f" {r['trim_critical_ms']} ms; background trims: {r['trim_background_timelines']} timelines,"
          f" {r['trim_background_rows']} rows, {r['trim_background_ms']} ms, failures {r['trim_background_failures']}",
          flush=True)
    trimmed = r["trimmed_rows"]
    trim_ms = r["trim_critical_ms"] + r["trim_background_ms"]
    print(f"  all trims: {trimmed} rows in {trim_ms} ms = {trim_ms * 1000 / max(1, trimmed):.1f} us per trimmed row"
          f" (write: {sum(writes) * 1000 / max(1, rows):.1f} us per row written)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inbox-cap", type=int, default=None, help="default: FEED_INBOX_CAP, else 800")
    parser.add_argument("--trim-slack", type=int, default=None, help="default: FEED_TRIM_SLACK, else 200")
    parser.add_argument("--timelines", type=int, default=50, help="per trim: timelines per group")
    parser.add_argument("--history", type=int, default=20, help="per trim: earlier trims per timeline")
    parser.add_argument("--rows-per-trim", type=int, default=250, help="per trim: rows each earlier trim deleted")
    parser.add_argument("--k", type=int, default=50, help="per trim: live rows above cap + slack")
    parser.add_argument("--overestimate", type=int, default=20, help="per trim: rows the inexact bound is over")
    parser.add_argument("--repeat", type=int, default=3, help="per trim: read-only passes")
    parser.add_argument("--batch-timelines", type=int, default=400)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rows-per-batch", type=int, default=15, help="mean rows per timeline per batch")
    parser.add_argument("--burst", type=int, default=300, help="rows of a burst (a follow of a busy author)")
    parser.add_argument("--burst-p", type=float, default=0.005, help="chance of a burst per timeline and batch")
    parser.add_argument("--job-factor", type=float, default=1.0,
                        help="the rest of a batch's job, as a multiple of its writes' time (docs/trimming.md)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip", choices=("trim", "batches"), action="append", default=[])
    parser.add_argument("--keep", action="store_true", help="keep the keyspace")
    args = parser.parse_args()

    import logging

    logging.basicConfig(level=logging.WARNING)
    base = Settings.from_env()
    run_id = time.strftime("%m%d%H%M%S")
    settings = replace(base, keyspace=f"feed_benchtrim{run_id}",
                       inbox_cap=args.inbox_cap if args.inbox_cap is not None else base.inbox_cap,
                       trim_slack=args.trim_slack if args.trim_slack is not None else base.trim_slack)
    from feed_service.store.session import connect

    cluster, session = connect(settings)
    apply_schema(session, settings.keyspace, gc_grace_seconds=864000)  # tombstones stay, as in production
    print(f"keyspace {settings.keyspace}, cap {settings.inbox_cap}, slack {settings.trim_slack}; {_load()}", flush=True)
    try:
        _init_writer(settings)
        if "trim" not in args.skip:
            per_trim(settings, args)
        if "batches" not in args.skip:
            with ProcessPoolExecutor(max_workers=1, initializer=_init_writer, initargs=(settings,)) as pool:
                for background in (False, True):
                    per_batch(settings, args, pool, background)
    finally:
        if not args.keep:
            session.execute(f"DROP KEYSPACE IF EXISTS {settings.keyspace}", timeout=120)
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
