"""The first read of an inactive reader (docs/activity.md, "Exact reads without an inbox"): p50 / p99
of a GetHomeTimeline first page of a reader whose inbox is dropped, against the same page of a kept
reader whose inbox holds the same entries, for readers seeing 100, 200 and 1,000 push authors.

Starts a single-node stack of its own (``StackConfig.with_free_ports`` in ``.stack/bench/<run>``,
as the integration tests' stacks; stopped and removed at the end) and holds
``/tmp/feed-integration.lock`` while it runs. Writes with the project's ``CassandraWriter`` into a
fresh keyspace:

- ``--authors`` authors (the largest of ``--sizes``), each with ``--tweets`` rows in
  ``author_timeline`` (plain tweets, at times drawn uniformly over 30 days) and two profile versions;
- for each size n of ``--sizes``, ``--readers`` pairs of readers, each pair seeing the same n authors
  drawn at random from all of them: the dropped reader ``d<n>-<i>`` has a ``reader_visible`` row per
  author, ``home_timeline.inbox_dropped = true`` and no inbox row; the kept reader ``k<n>-<i>`` has in
  its inbox the newest ``--inbox-rows`` (800, the cap) entries of those authors' timelines merged,
  and no flag: the rows the stream would keep for it.

Then a ``ServerThread`` on that keyspace (``FEED_INACTIVE_AFTER_S=0``: no read reports) reads, one
call at a time, the first page (``--page-size`` 20) of every reader once, kept and dropped readers of
a size interleaved (k, d, k, d...: a drift in load hits both), each call timed at the client
(token minted before the clock starts). Variants (``--variants``):

- ``cold``: no cache at all: ``FEED_CHANGE_FEED=0`` (no change topic, so no read cache) and
  ``FEED_PULL_CACHE_TTL_S=0`` (no TTL'd author heads): every read of a dropped reader reads the
  inbox slice, the extras slice, the visible set and one slice per push author from Cassandra: the
  first read on a process that holds nothing;
- ``warm``: ``FEED_CHANGE_FEED=0``, ``FEED_PULL_CACHE_TTL_S=3600``: the authors' heads (201 rows)
  kept by the process; every dropped reader is read once unmeasured first (filling the heads), then
  the measured pass: a dropped reader's first read on a process where other readers' reads have
  brought its authors' heads (its own inbox, extras and visible set still read from Cassandra).

The first page of each dropped reader is checked equal to its kept twin's. Printed per variant and
size: p50 / p99 / mean of both, the ratios, the CPU of this process (the server's loop and the
client) and of Cassandra per read, over the measured pass of each kind, and the load average.
``--request-timeout`` (default 10 s) is the server's budget per call; the count of calls slower than
the service's default 2 s is printed.

    flock /tmp/team/bench.lock .venv/bin/python bench/bench_inactive_first_read.py
    flock /tmp/team/bench.lock .venv/bin/python bench/bench_inactive_first_read.py --sizes 200 --readers 50

Asserts nothing but the pages' equality (a dropped reader's page that differs is printed and counted).
"""

from __future__ import annotations

import argparse
import fcntl
import heapq
import os
import random
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

BASE_MS = 1_790_000_000_000
SPAN_MS = 30 * 86_400_000
SECRET = b"bench-inactive-first-read-secret-0123456789"
KEYSPACE = "bench_inactive"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def populate(settings, args: argparse.Namespace) -> dict:  # type: ignore[no-untyped-def]
    from bench_grpc import write_retrying

    from feed_service.core.per_reader.messages import VisibleDelta
    from feed_service.core.rows import AuthorTimelineWrite, Entry, ProfileRow, ProfileWrite, TimelineWrite
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.schema import apply_schema
    from feed_service.store.session import connect

    rng = random.Random(args.seed)
    started = time.monotonic()
    sizes = [int(s) for s in args.sizes.split(",")]
    n_authors = max(sizes)
    text = "x" * 80
    authors = [f"a{a}" for a in range(n_authors)]
    timelines: dict[str, list] = {}
    for a in authors:  # newest first, as a timeline reads
        times = sorted((BASE_MS + rng.randrange(SPAN_MS) for _ in range(args.tweets)), reverse=True)
        timelines[a] = [Entry(f"{a}-t{i}", a, at, 1, f"tweet {i} of {a}: {text}", 1 + i % 2)
                        for i, at in enumerate(times)]
    cluster, session = connect(settings)
    written = 0
    try:
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.keyspace}", timeout=180)
        apply_schema(session, settings.keyspace)
        writer = CassandraWriter(session, settings.keyspace, concurrency=64)
        write_retrying(writer, profiles=[ProfileWrite(ProfileRow(a, v, f"Author {a} v{v}",
                                                                 f"https://img/{a}/{v}.png", None), 1)
                                         for a in authors for v in (1, 2)])
        chunk: list = []
        for a in authors:
            chunk += [AuthorTimelineWrite("insert", e, 1) for e in timelines[a]]
            if len(chunk) >= 20_000:
                write_retrying(writer, author_timeline=chunk)
                written += len(chunk)
                chunk = []
        write_retrying(writer, author_timeline=chunk)
        written += len(chunk)
        print(f"  {written:,} author_timeline rows of {n_authors:,} authors written"
              f" ({time.monotonic() - started:.0f}s; load {_load()})", flush=True)
        pairs: dict[int, list[tuple[str, str]]] = {}
        inbox_rows = visible_rows = 0
        for n in sizes:
            pairs[n] = []
            timeline, visible = [], []
            for i in range(args.readers):
                seen = rng.sample(authors, n)
                kept, dropped = f"k{n}-{i}", f"d{n}-{i}"
                pairs[n].append((kept, dropped))
                newest = list(heapq.merge(*(timelines[a] for a in seen), key=lambda e: (e.at, e.tweet_id),
                                          reverse=True))[:args.inbox_rows]
                timeline += [TimelineWrite("insert", kept, e, 1) for e in newest]
                visible += [VisibleDelta("insert", dropped, a, 1) for a in seen]
                if len(timeline) + len(visible) >= 20_000 or i == args.readers - 1:
                    write_retrying(writer, timeline=timeline, visible=visible)
                    inbox_rows += len(timeline)
                    visible_rows += len(visible)
                    timeline, visible = [], []
            flag = session.prepare(f"UPDATE {settings.keyspace}.home_timeline SET inbox_dropped = true"
                                   " WHERE timeline_id = ?")
            for _, dropped in pairs[n]:
                session.execute(flag, (dropped,))
        print(f"  {inbox_rows:,} inbox rows of kept readers, {visible_rows:,} reader_visible rows of dropped"
              f" readers written; populated in {time.monotonic() - started:.0f}s (load {_load()})", flush=True)
    finally:
        cluster.shutdown()
    return pairs


def measure(settings, args: argparse.Namespace, pairs: dict, variant: str, cassandra_pid: int | None) -> list[dict]:  # type: ignore[no-untyped-def]
    import grpc

    from feed_service.api import timeline_pb2 as pb
    from feed_service.server.config import ServerConfig
    from feed_service.server.testing import ServerThread
    from process_cpu import tree_cpu

    ttl = 0.0 if variant == "cold" else 3600.0
    config = ServerConfig(auth_secret=SECRET, metrics_port=None, settings=settings, rate_limit_per_s=0.0,
                          change_feed=False, pull_cache_ttl_s=ttl, request_timeout_s=args.request_timeout)
    rows = []
    with ServerThread(config) as server:
        stub = server.stub()

        def page(user: str) -> list[str]:
            reply = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=user, page_size=args.page_size),
                                         metadata=server.auth(user), timeout=args.request_timeout + 5)
            return [e.tweet_id for e in reply.entries]

        deadline = time.monotonic() + 120
        while True:  # the server connects to Cassandra in the background
            try:
                page(pairs[min(pairs)][0][0])
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        for n, readers in pairs.items():
            if variant == "warm":  # fill the heads of every author these readers see
                for _, dropped in readers:
                    page(dropped)
            else:  # a few unmeasured reads of each kind
                for kept, dropped in readers[:3]:
                    page(kept)
                    page(dropped)
            times: dict[str, list[float]] = {"kept": [], "dropped": []}
            cpu: dict[str, float] = {"kept": 0.0, "dropped": 0.0}
            cass: dict[str, float] = {"kept": 0.0, "dropped": 0.0}
            differ = 0
            load0 = os.getloadavg()[0]
            for i, (kept, dropped) in enumerate(readers):
                got = {}
                order = (("kept", kept), ("dropped", dropped)) if i % 2 == 0 else (("dropped", dropped), ("kept", kept))
                for kind, user in order:
                    metadata = server.auth(user)
                    request = pb.GetHomeTimelineRequest(user_id=user, page_size=args.page_size)
                    k0 = tree_cpu(cassandra_pid).total if cassandra_pid else 0.0
                    c0 = time.process_time()
                    t0 = time.perf_counter()
                    reply = stub.GetHomeTimeline(request, metadata=metadata, timeout=args.request_timeout + 5)
                    t1 = time.perf_counter()
                    cpu[kind] += time.process_time() - c0
                    if cassandra_pid:
                        cass[kind] += tree_cpu(cassandra_pid).total - k0
                    times[kind].append(t1 - t0)
                    got[kind] = [e.tweet_id for e in reply.entries]
                if got["kept"] != got["dropped"] or len(got["kept"]) != args.page_size:
                    differ += 1
                    if differ <= 3:
                        print(f"  PAGES DIFFER {kept} {got['kept'][:5]}... vs {dropped} {got['dropped'][:5]}...")
            load1 = os.getloadavg()[0]
            row = {"variant": variant, "authors": n, "reads": len(readers), "differ": differ,
                   "load": (load0, load1)}
            for kind in ("kept", "dropped"):
                t = times[kind]
                row[kind] = {"p50": _pct(t, 0.5) * 1e3, "p99": _pct(t, 0.99) * 1e3, "mean": statistics.fmean(t) * 1e3,
                             "max": max(t) * 1e3, "over2s": sum(1 for x in t if x > 2.0),
                             "cpu_ms": cpu[kind] / len(t) * 1e3, "cass_ms": cass[kind] / len(t) * 1e3}
            rows.append(row)
            d, k = row["dropped"], row["kept"]
            print(f"[{variant}, {n:>5} authors, {len(readers)} readers] dropped p50 {d['p50']:.1f} ms p99 {d['p99']:.1f}"
                  f" ms (mean {d['mean']:.1f}, max {d['max']:.1f}, over 2 s: {d['over2s']}); kept p50 {k['p50']:.1f} ms"
                  f" p99 {k['p99']:.1f} ms; ratio p50 {d['p50'] / k['p50']:.1f}x p99 {d['p99'] / k['p99']:.1f}x; CPU"
                  f" per read: this process {d['cpu_ms']:.1f} / {k['cpu_ms']:.1f} ms, cassandra {d['cass_ms']:.1f} /"
                  f" {k['cass_ms']:.1f} ms; pages differ: {differ}; load {load0:.2f} -> {load1:.2f}", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--sizes", default="100,200,1000", help="push authors a reader sees")
    parser.add_argument("--readers", type=int, default=100, help="dropped (and as many kept) readers per size")
    parser.add_argument("--tweets", type=int, default=800, help="author_timeline rows per author")
    parser.add_argument("--inbox-rows", type=int, default=800, help="rows in a kept reader's inbox")
    parser.add_argument("--page-size", type=int, default=20)
    parser.add_argument("--variants", default="cold,warm")
    parser.add_argument("--request-timeout", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the stack's folder (logs) at the end")
    args = parser.parse_args()

    from isolated import exit_on_sigterm

    from feed_service.stack.config import StackConfig
    from feed_service.stack.local_stack import LocalStack

    exit_on_sigterm()  # a killed run still stops its stack
    lock = open("/tmp/feed-integration.lock", "a")  # noqa: SIM115 - held until the process ends
    print(f"waiting for /tmp/feed-integration.lock (load {_load()})", flush=True)
    fcntl.flock(lock, fcntl.LOCK_EX)
    run_dir = REPO / ".stack" / "bench" / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}-inactive"
    run_dir.mkdir(parents=True)
    (run_dir / "owner.pid").write_text(str(os.getpid()))
    config = StackConfig.with_free_ports(run_dir)
    stack = LocalStack(config)
    rows: list[dict] = []
    try:
        timings = stack.up()
        print("stack up: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()) + f"; load {_load()}", flush=True)
        settings = config.settings(keyspace=KEYSPACE).replace(inactive_after_s=0)
        pairs = populate(settings, args)
        cassandra_pid = stack.cassandra.process.pid()
        print(f"reads: page size {args.page_size}, one call at a time, server request timeout"
              f" {args.request_timeout} s; load average {_load()}", flush=True)
        for variant in args.variants.split(","):
            rows += measure(settings, args, pairs, variant, cassandra_pid)
    finally:
        stack.down()
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    print(f"\n==== first page ({args.page_size}) of a dropped reader vs a kept reader with the same entries;"
          f" {args.tweets} rows per author; load average at the end {_load()}")
    print(f"{'variant':<6} {'authors':>7} {'reads':>5} | {'dropped p50':>11} {'p99':>8} | {'kept p50':>8} {'p99':>7} |"
          f" {'x p50':>6} {'x p99':>6} | {'CPU/read d':>10} {'k':>5} | {'cass/read d':>11} {'k':>5} | differ | load")
    for r in rows:
        d, k = r["dropped"], r["kept"]
        print(f"{r['variant']:<6} {r['authors']:>7,} {r['reads']:>5} | {d['p50']:>8.1f} ms {d['p99']:>5.0f} ms |"
              f" {k['p50']:>5.1f} ms {k['p99']:>4.0f} ms | {d['p50'] / k['p50']:>5.1f}x {d['p99'] / k['p99']:>5.1f}x |"
              f" {d['cpu_ms']:>7.1f} ms {k['cpu_ms']:>5.1f} | {d['cass_ms']:>8.1f} ms {k['cass_ms']:>5.1f} |"
              f" {r['differ']:>6} | {r['load'][0]:.2f} -> {r['load'][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
