"""Backfill throughput on a 200k-event power-law history, against the raw Cassandra write ceiling.

Run on the developer stack (``feedctl stack up``; Kafka 127.0.0.1:9092, Cassandra 127.0.0.1:9042, left
running): ``.venv/bin/python bench/bench_backfill.py`` (``--help`` for sizes).

1. Generate ``--events`` envelopes with :func:`feed_service.workload.generator.generate` (power-law follow graph,
   setup included in the count) and publish them to topics and a keyspace of their own.
2. Run the backfill job in-process (``local[2]``) and take its stage timings: events/s read
   (records / read stage), timeline rows/s written (rows / timeline write), end to end.
3. Raw ceiling, same run, same node, Spark stopped: the same timeline rows (recomputed in Python from
   the batch reference with the per-author retention of the engine), ``USING TIMESTAMP`` prepared
   inserts with :class:`~feed_service.store.cassandra_writer.CassandraWriter` from ``--ceiling-processes``
   processes into a fresh keyspace, on the first ``--ceiling-rows`` rows (a rate, not a total).

Prints one JSON document of figures at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from dataclasses import replace
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from feed_service.core.rows import Entry, TimelineWrite  # noqa: E402
from feed_service.core.reference import reference_tables  # noqa: E402
from feed_service.ops.provision import provision  # noqa: E402
from feed_service.settings import Settings  # noqa: E402
from feed_service.workload.generator import generate  # noqa: E402


def publish(settings: Settings, events: list[dict]) -> float:
    from feed_service.kafka.producer import EventProducer

    t0 = time.perf_counter()
    with EventProducer(settings) as producer:
        for event in events:
            producer.publish_event(event)
    return time.perf_counter() - t0


def timeline_rows(events: list[dict], inbox_cap: int, ts: int) -> list[TimelineWrite]:
    """The rows the backfill writes: each author's newest ``inbox_cap`` live tweets x active followers."""
    tables = reference_tables(events)
    by_author: dict[str, list[tuple]] = {}
    for (author, tid), c in tables.tweets.items():
        by_author.setdefault(author, []).append((c[1], tid, c))
    for tweets in by_author.values():
        tweets.sort(reverse=True)
        del tweets[inbox_cap:]
    rows = []
    for (follower, followee), edge in tables.follows.items():
        if edge[1]:
            for created_at, tid, c in by_author.get(followee, ()):
                rows.append(TimelineWrite("insert", follower, Entry(tid, followee, created_at, c[0], c[2], c[3]), ts))
    return rows


def _write_share(settings: Settings, rows: list[tuple], chunk: int, start, done) -> None:
    from feed_service.store.session import connect
    from feed_service.store.cassandra_writer import CassandraWriter

    cluster, session = connect(settings)
    writer = CassandraWriter(session, settings.keyspace)
    start.wait()
    t0 = time.perf_counter()
    for i in range(0, len(rows), chunk):
        writer.write(timeline=rows[i:i + chunk])
    done.put(time.perf_counter() - t0)
    cluster.shutdown()


def raw_ceiling(settings: Settings, rows: list[tuple], processes: int, chunk: int) -> tuple[float, float]:
    """(rows/s, seconds) of ``processes`` writers, each with its share of ``rows``, started together."""
    ctx = mp.get_context("fork")
    start, done = ctx.Event(), ctx.Queue()
    shares = [rows[i::processes] for i in range(processes)]
    procs = [ctx.Process(target=_write_share, args=(settings, share, chunk, start, done)) for share in shares]
    for p in procs:
        p.start()
    time.sleep(3.0)  # connections and prepared statements before the clock starts
    t0 = time.perf_counter()
    start.set()
    for _ in procs:
        done.get(timeout=3600)
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join()
    return len(rows) / elapsed, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="envelopes, setup included")
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--mean-following", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--inbox-cap", type=int, default=None, help="default: FEED_INBOX_CAP, else 800")
    parser.add_argument("--ceiling-processes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--ceiling-rows", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=5000, help="rows per write call in the ceiling")
    args = parser.parse_args()

    run_id = time.strftime("%m%d%H%M%S")
    base = Settings.from_env()
    if args.inbox_cap is not None:
        base = base.replace(inbox_cap=args.inbox_cap)
    settings = replace(base.with_topic_suffix(f".bench{run_id}"), keyspace=f"feed_bench{run_id}")
    provision(settings)
    events = list(islice(generate(users=args.users, events=None, seed=args.seed,
                                  mean_following=args.mean_following), args.events))
    publish_s = publish(settings, events)
    print(f"published {len(events)} events to *.bench{run_id} in {publish_s:.1f}s", file=sys.stderr)

    from spark_jobs.runtime.session import build_session
    from spark_jobs.backfill import SESSION_CONF, BackfillOptions, run_backfill

    spark = build_session("bench-backfill", shuffle_partitions=4, extra_conf=SESSION_CONF)
    out = Path(tempfile.mkdtemp(prefix="bench-backfill-")) / "out"
    t0 = time.perf_counter()
    result = run_backfill(spark, settings, BackfillOptions(out=out))
    wall = time.perf_counter() - t0
    spark.stop()
    s = result.summary
    stages = s["stage_seconds"]
    rows_written = s["rows"]["timeline"]

    rows = timeline_rows(events, settings.inbox_cap, s["backfill_ts"])
    assert len(rows) == rows_written, (len(rows), rows_written)
    sample = rows[: args.ceiling_rows]
    ceilings = {}
    for n in args.ceiling_processes:
        target = replace(settings, keyspace=f"feed_ceiling{run_id}_{n}")
        provision(target)
        rate, secs = raw_ceiling(target, sample, n, args.chunk)
        ceilings[n] = round(rate)
        print(f"raw ceiling, {n} processes: {len(sample)} rows in {secs:.1f}s = {rate:,.0f} rows/s", file=sys.stderr)
    ceiling = max(ceilings.values())
    timeline_rate = rows_written / s["write_seconds"]["timeline"]
    figures = {
        "events": len(events),
        "records_read": s["records_read"],
        "entities": s["entities"],
        "author_keys": s["keys"],
        "timelines": s["timelines"],
        "timeline_rows": rows_written,
        "stage_seconds": stages,
        "backfill_seconds": round(wall, 1),
        "events_per_s_read_stage": round(s["records_read"] / stages["read"]),
        "events_per_s_end_to_end": round(s["records_read"] / wall),
        "timeline_rows_per_s_written": round(timeline_rate),
        "raw_ceiling_rows_per_s": ceilings,
        "fraction_of_ceiling": round(timeline_rate / ceiling, 3),
    }
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
