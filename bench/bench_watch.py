"""The view's change topic at the read service: pushed watches and the read cache, measured side by side.

    .venv/bin/python bench/bench_watch.py                     # all three parts (~7 min on 2 cores)
    .venv/bin/python bench/bench_watch.py --only latency      # one part (comma list: latency,idle,cache)
    .venv/bin/python bench/bench_watch.py --only cache --cache-seconds 30 --workers 2

Runs against the developer stack (``feedctl stack up``; settings from the environment), prints
figures with ``/proc/loadavg`` beside each, and asserts nothing (docs/api.md#watch, #read-cache).
Every server is the real ``python -m feed_service serve`` in its own process; every gRPC client
(the watchers, ``ghz``) runs in its own process too, so that no client CPU counts against a server.

1. **latency** — watch delivery vs Cassandra-visible freshness. An isolated pipeline (topic suffix
   + keyspace, ``provision``; pull threshold ``--pull-threshold``): ``--authors`` push authors with
   ``--fanout`` followers each, a pull author with ``--star-followers``, and a *probe* user who
   follows all of them. The stream (``StreamProcess``) and a server with the change feed run on it;
   the probe, the followers of author 0 and ``--star-watchers`` followers of the pull author hold
   WatchHomeTimeline streams. Tweets are published at ``--rate``/s with the project's producer (every
   ``--star-every``-th by the pull author), ``--warmup-seconds`` unsampled, then ``--seconds``. Per
   sampled tweet: its publish time (wall clock at the produce call: librdkafka stamps the record's
   Kafka CreateTime, the changes' ``source_ms``, at that call), the time the probe's watch received it
   (client side), and the time it became readable in Cassandra (a poller on its own thread and session
   reads, every ``--poll-ms``, the probe's ``home_timeline`` partition, or for the pull author its
   ``author_timeline`` partition, from the oldest pending tweet on: one query per table per round,
   whatever the number of tweets pending; a tweet's visible time is the start of the first query that
   returned it). Prints p50/p99 of publish->receipt and publish->visible, of their per-tweet difference,
   the same over every delivery to every watcher, and the server's ``feed_publish_to_visible_seconds``
   quantiles over the sampled window (from its ``/metrics``, interpolated within buckets).
2. **idle** — a server with ``FEED_CHANGE_FEED=0`` (watches poll every ``--poll-s``) and then one with
   the change feed, each with ``--idle-watchers`` idle WatchHomeTimeline streams (users of the ``cache``
   data set; a grpc.aio client process over ``--client-channels`` connections), nothing published; over
   ``--idle-seconds``: the server's CPU (``/proc/<pid>/stat``), the local Cassandra's CPU and the reads
   Cassandra coordinated on the keyspace (``system_views.coordinator_read_latency`` counts).
3. **cache** — GetHomeTimeline with and without the read cache: ``bench/bench_grpc.py``'s data set
   (its ``populate``, keyspace ``--keyspace``, reused when present), readers drawn from a Zipf law of
   exponent ``--zipf`` over its users (ranks shuffled onto user ids), ``ghz`` through bench_grpc's
   ``load`` (its ``run_ghz``) and ``measured`` against a server with ``FEED_READ_CACHE_KEYS=0`` and one with the
   default cache (both consume the change topic), the same warm-up and load: at ``--cache-rate``/s
   (0: skipped) and unthrottled, each run (and the warm-up, ``--cache-warmup``: long enough to fill the
   default cache, so that the hit ratio is the steady state's) with a Zipf draw of its own (ghz reads
   its data file from the start every run: one file for all would replay the reads that filled the
   cache). ``--zipf 0`` draws uniformly (nearly every read a miss: the cost of the miss path);
   ``--zipf 0 --readers 2000`` reads 2,000 users only (every read a hit once warm: the hit path).
   Prints QPS, p50, p99, server and Cassandra CPU µs per request, Cassandra reads per request and the
   cache hit ratio of the run (``feed_read_cache_total``; with ``--workers`` > 1 only the first
   worker serves ``/metrics``).

``--out FILE`` also writes every figure as JSON. Logs (stream, servers, clients) stay in a temporary
directory named at the start.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from feed_service.settings import Settings  # noqa: E402

PHASES = ("latency", "idle", "cache")
#: the read data set's topic suffix (parts 2 and 3): only the change topic is used, nothing publishes to it
READ_SUFFIX = ".bench.watch"


# -- small helpers ---------------------------------------------------------------------------
def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def quantiles(samples: list[float], scale: float = 1000.0) -> dict:
    """p50/p99/max (milliseconds by default) of ``samples`` (seconds)."""
    if not samples:
        return {"n": 0}
    s = sorted(samples)
    q = lambda p: s[min(len(s) - 1, int(p * len(s)))]  # noqa: E731
    return {"n": len(s), "p50": round(q(0.5) * scale, 1), "p99": round(q(0.99) * scale, 1),
            "max": round(s[-1] * scale, 1), "min": round(s[0] * scale, 1)}


def fmt(q: dict) -> str:
    if not q.get("n"):
        return "no samples"
    return f"p50 {q['p50']:>7.1f}  p99 {q['p99']:>7.1f}  max {q['max']:>7.1f} ms  (n={q['n']})"


def metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def metric_samples(text: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def metric(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def histogram_quantiles(before: dict, after: dict, name: str, qs=(0.5, 0.9, 0.99)) -> dict:
    """Quantiles of histogram ``name`` over the observations between two scrapes, interpolated
    linearly within buckets as Prometheus' ``histogram_quantile`` does."""
    buckets = []
    for (n, labels), value in after.items():
        if n == f"{name}_bucket":
            le = float(dict(labels)["le"])
            buckets.append((le, value - before.get((n, labels), 0.0)))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0
    out: dict = {"count": int(total)}
    if not total:
        return out
    for q in qs:
        rank, prev_le, prev_n = q * total, 0.0, 0.0
        for le, n in buckets:
            if n >= rank:
                if le == float("inf"):
                    out[f"p{round(q * 100)}_s"] = f">{prev_le}"
                else:
                    share = (rank - prev_n) / (n - prev_n) if n > prev_n else 1.0
                    out[f"p{round(q * 100)}_s"] = round(prev_le + (le - prev_le) * share, 3)
                break
            prev_le, prev_n = le, n
    s_after = after.get((f"{name}_sum", ()), 0.0) - before.get((f"{name}_sum", ()), 0.0)
    out["mean_s"] = round(s_after / total, 3)
    return out


def coordinator_reads(session, keyspace: str) -> int:
    """Reads Cassandra has coordinated on ``keyspace`` so far (all tables; cumulative timer counts)."""
    rows = session.execute("SELECT keyspace_name, count FROM system_views.coordinator_read_latency")
    return sum(r.count for r in rows if r.keyspace_name == keyspace)


# -- processes: the server and the watch client ------------------------------------------------
class Server:
    """``python -m feed_service serve`` on free ports, logging (INFO) to a file."""

    def __init__(self, settings: Settings, workdir: Path, name: str, env: dict[str, str], workers: int = 1,
                 client_tls: Any = None) -> None:
        """``client_tls``: the ``ClientTLS`` that reaches it when ``env`` makes it a TLS server."""
        from bench_grpc import BENCH_SECRET, free_port

        self.name = name
        self.client_tls = client_tls
        self.port, self.metrics_port = free_port(), free_port()
        self.log = workdir / f"server-{name.replace(' ', '_')}.log"
        full_env = {**os.environ, **settings.to_env(), "FEED_AUTH_SECRET": BENCH_SECRET,
                    "FEED_GRPC_HOST": "127.0.0.1", "FEED_GRPC_PORT": str(self.port),
                    "FEED_METRICS_HOST": "127.0.0.1", "FEED_METRICS_PORT": str(self.metrics_port),
                    "FEED_LOG_LEVEL": "INFO",
                    # a bench over the per-principal limit would measure refusals (docs/api.md#limits)
                    "FEED_RATE_LIMIT_PER_S": "0", **env}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "feed_service", "serve", "--workers", str(workers)],
                                         env=full_env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        self.change_feed = env.get("FEED_CHANGE_FEED", "1") not in ("0", "false", "no", "off")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ready(self, timeout: float = 90) -> "Server":
        """SERVING (Cassandra connected) and, with the change feed, consuming the change topic."""
        from bench_grpc import wait_serving

        wait_serving(self.port, timeout, self.client_tls)
        deadline = time.monotonic() + timeout
        while self.change_feed and "view changes consumed" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server {self.name}: change topic not consumed; log {self.log}")
            time.sleep(0.1)
        time.sleep(0.3)  # the hub and the cache are attached right after that line
        return self

    def scrape(self) -> dict:
        return metric_samples(metrics_text(self.metrics_port))

    def wait_watch_streams(self, n: int, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while (metric(self.scrape(), "feed_watch_streams") or 0) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"server {self.name}: fewer than {n} watch streams open; log {self.log}")
            time.sleep(0.25)

    def stop(self) -> None:
        from bench_grpc import stop_server

        stop_server(self.proc)


class WatchClient:
    """This file run with ``--watch-client SPEC``: WatchHomeTimeline streams of ``users`` on a grpc.aio
    loop in its own process; on SIGTERM it writes what it received (and how streams ended) to ``out``."""

    def __init__(self, port: int, users: list[str], workdir: Path, name: str, channels: int) -> None:
        from bench_grpc import BENCH_SECRET

        from feed_service.server import auth

        self.out = workdir / f"watch-{name}.json"
        spec = workdir / f"watch-{name}.spec.json"
        token = auth.mint(BENCH_SECRET.encode(), subject="bench-watch", role="service", ttl_s=3600)
        spec.write_text(json.dumps({"port": port, "users": users, "token": token, "out": str(self.out),
                                    "channels": channels}))
        self.log = workdir / f"watch-{name}.log"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, __file__, "--watch-client", str(spec)], cwd=REPO,
                                         stdout=log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def finish(self, timeout: float = 60) -> dict:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError):
            raise RuntimeError(f"watch client wrote no results; log {self.log}") from None


def run_watch_client(spec_path: str) -> int:
    import grpc

    from feed_service.api import timeline_pb2 as pb
    from feed_service.api import timeline_pb2_grpc as pb_grpc

    spec = json.loads(Path(spec_path).read_text())
    receipts: list[tuple[str, str, float, str]] = []
    ended: dict[str, int] = {}

    async def main() -> None:
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{spec['port']}",
                                              options=[("grpc.use_local_subchannel_pool", 1)])
                    for _ in range(max(1, spec["channels"]))]
        stubs = [pb_grpc.TimelineServiceStub(c) for c in channels]
        md = (("authorization", f"Bearer {spec['token']}"),)

        async def watch(i: int, user: str) -> None:
            try:
                async for m in stubs[i % len(stubs)].WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user),
                                                                       metadata=md):
                    now = time.time()
                    for e in m.entries:
                        receipts.append((user, e.tweet_id, now, "entry"))
                    for e in m.changed:
                        receipts.append((user, e.tweet_id, now, "changed"))
                ended["OK"] = ended.get("OK", 0) + 1
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.CANCELLED:
                    ended[exc.code().name] = ended.get(exc.code().name, 0) + 1
                    print(f"watch {user}: {exc.code().name} {exc.details()}", file=sys.stderr, flush=True)

        tasks = [asyncio.create_task(watch(i, u)) for i, u in enumerate(spec["users"])]
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for channel in channels:
            await channel.close()

    asyncio.run(main())
    Path(spec["out"]).write_text(json.dumps({"receipts": receipts, "ended": ended}))
    return 0


def cpu_now(pids: list[int]) -> float:
    from bench_grpc import _cpu_seconds

    return _cpu_seconds(pids)


def cassandra_pid() -> int | None:
    from bench_grpc import cassandra_pid as pid

    return pid()


# -- 1. watch latency vs Cassandra-visible ------------------------------------------------------
def _follows(author: str, followers: list[str]) -> list[dict]:
    return [{"type": "follow", "op": "follow", "follower_id": f, "followee_id": author, "version": 1}
            for f in followers]


def _tweet(author: str, tid: str, now_ms: int) -> dict:
    return {"type": "tweet", "op": "upsert", "tweet_id": tid, "author_id": author, "version": 1,
            "created_at": now_ms, "text": f"{tid} by {author}", "profile_version": 1}


def latency_part(base: Settings, args: argparse.Namespace, workdir: Path) -> dict:
    from feed_service.kafka.producer import EventProducer
    from feed_service.ops.provision import provision
    from feed_service.stack.stream_process import StreamProcess
    from feed_service.store.session import connect

    tag = f"watch{uuid.uuid4().hex[:4]}"
    settings = replace(base.with_topic_suffix(f".bench.{tag}"), keyspace=f"bench_{tag}",
                       pull_threshold=args.pull_threshold)
    provision(settings)
    rng = random.Random(5)
    users = [f"{tag}-u{i}" for i in range(args.users)]
    authors = [f"{tag}-a{a}" for a in range(args.authors)]
    graph = {a: rng.sample(users, args.fanout) for a in authors}
    star = f"{tag}-star"
    star_followers = [f"{tag}-s{i}" for i in range(args.star_followers)]
    probe = f"{tag}-probe"
    events = [e for a, followers in graph.items() for e in _follows(a, followers + [probe])]
    events += _follows(star, star_followers + [probe])
    events += [{"type": "profile", "user_id": a, "version": 1, "display_name": f"Author {a}"} for a in authors + [star]]
    watchers = [probe, *graph[authors[0]], *star_followers[:args.star_watchers]]
    print(f"[latency] pipeline {tag}: {len(authors)} push authors x {args.fanout} followers, pull author with"
          f" {len(star_followers) + 1} followers (threshold {args.pull_threshold}), {len(watchers)} watchers;"
          f" publishing the graph ({len(events)} events)", flush=True)
    with EventProducer(settings) as producer:
        for event in events:
            producer.publish_event(event)
    stream = StreamProcess(settings, workdir / f"ckpt-{tag}", log_file=workdir / f"stream-{tag}.log").start()
    server = client = None
    cluster, session = connect(settings, keyspace=settings.keyspace)
    result: dict = {"pipeline": tag, "watchers": len(watchers), "rate": args.rate, "seconds": args.seconds}
    try:
        started = time.monotonic()
        stream.wait_caught_up(timeout=900)
        print(f"[latency] stream caught up with the graph in {time.monotonic() - started:.0f}s", flush=True)
        pulled = [r.author_id for r in session.execute("SELECT author_id FROM pull_follows WHERE follower_id = %s",
                                                       (probe,))]
        if star not in pulled:
            print(f"[latency] WARNING: {star} is not a pull author of the probe ({pulled})", flush=True)
        server = Server(settings, workdir, "latency", {"FEED_CHANGE_FEED": "1"}).ready()
        client = WatchClient(server.port, watchers, workdir, "latency", channels=2)
        server.wait_watch_streams(len(watchers))
        time.sleep(1.0)

        q_home = session.prepare("SELECT tweet_id FROM home_timeline WHERE timeline_id = ? AND created_at >= ?")
        q_author = session.prepare("SELECT tweet_id FROM author_timeline WHERE author_id = ? AND created_at >= ?")
        pending: dict[str, dict[str, int]] = {"push": {}, "pull": {}}
        visible: dict[str, float] = {}
        lock = threading.Lock()
        stop_polling = threading.Event()
        polls = [0]

        def poll() -> None:
            interval = args.poll_ms / 1000
            while not stop_polling.is_set():
                t0 = time.time()
                for kind, query, key in (("push", q_home, probe), ("pull", q_author, star)):
                    with lock:
                        oldest = min(pending[kind].values(), default=None)
                    if oldest is None:
                        continue
                    at = time.time()
                    rows = session.execute(query, (key, oldest), timeout=10)
                    polls[0] += 1
                    with lock:
                        for r in rows:
                            if pending[kind].pop(r.tweet_id, None) is not None:
                                visible[r.tweet_id] = at
                time.sleep(max(0.0, interval - (time.time() - t0)))

        poller = threading.Thread(target=poll, name="visible-poller", daemon=True)
        poller.start()
        published: dict[str, tuple[float, str]] = {}
        warmup = int(args.rate * args.warmup_seconds)
        total = warmup + int(args.rate * args.seconds)
        before = None
        push_authors = itertools.cycle(authors)
        print(f"[latency] publishing {args.rate:g} tweets/s: {args.warmup_seconds:g}s warm-up, then {args.seconds:g}s"
              f" sampled (load {loadavg()})", flush=True)
        with EventProducer(settings) as producer:
            t_start = time.perf_counter()
            for n in range(total):
                while (delay := t_start + n / args.rate - time.perf_counter()) > 0:
                    time.sleep(min(delay, 0.01))
                if n == warmup:
                    before = server.scrape()
                    load_start = loadavg()
                kind = "pull" if n % args.star_every == args.star_every - 1 else "push"
                author = star if kind == "pull" else next(push_authors)
                tid = f"{tag}-t{n}"
                now = time.time()
                now_ms = int(now * 1000)
                if n >= warmup:
                    with lock:
                        pending[kind][tid] = now_ms
                    published[tid] = (now, kind)
                producer.publish_event(_tweet(author, tid, now_ms))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if not pending["push"] and not pending["pull"]:
                    break
            time.sleep(0.1)
        time.sleep(2.0)  # the last deliveries
        stop_polling.set()
        poller.join(10)
        after = server.scrape()
        load_end = loadavg()
        received = client.finish()
        client = None
        with lock:
            not_visible = len(pending["push"]) + len(pending["pull"])
    finally:
        if client is not None:
            client.finish()
        if server is not None:
            server.stop()
        stream.stop()
        cluster.shutdown()

    first: dict[tuple[str, str], float] = {}
    for user, tid, t, _part in received["receipts"]:
        key = (user, tid)
        if key not in first or t < first[key]:
            first[key] = t
    out: dict = {}
    for kind in ("push", "pull"):
        tids = [t for t, (_, k) in published.items() if k == kind]
        receipt = [first[(probe, t)] - published[t][0] for t in tids if (probe, t) in first]
        vis = [visible[t] - published[t][0] for t in tids if t in visible]
        diff = [first[(probe, t)] - visible[t] for t in tids if (probe, t) in first and t in visible]
        out[kind] = {"tweets": len(tids), "not_received": sum(1 for t in tids if (probe, t) not in first),
                     "not_visible": sum(1 for t in tids if t not in visible),
                     "publish_to_receipt_ms": quantiles(receipt), "publish_to_visible_ms": quantiles(vis),
                     "receipt_minus_visible_ms": quantiles(diff)}
    deliveries = [t - published[tid][0] for (user, tid), t in first.items() if tid in published]
    out["all_deliveries_ms"] = quantiles(deliveries)
    out["per_tweet"] = [{"tweet": t, "kind": k, "published": round(p, 4),
                         "received": round(first[(probe, t)], 4) if (probe, t) in first else None,
                         "visible": round(visible[t], 4) if t in visible else None}
                        for t, (p, k) in published.items()]
    out["server_publish_to_visible"] = histogram_quantiles(before or {}, after, "feed_publish_to_visible_seconds")
    out["watch_messages"] = (metric(after, "feed_watch_messages_total") or 0) - (
        metric(before or {}, "feed_watch_messages_total") or 0)
    out["streams_ended"] = received["ended"]
    out["visible_polls"] = polls[0]
    out["not_visible"] = not_visible
    out["loadavg"] = {"start": load_start, "end": load_end}
    result.update(out)
    return result


def print_latency(r: dict, args: argparse.Namespace) -> None:
    print(f"\n== 1. watch delivery vs Cassandra-visible: {args.rate:g} tweets/s for {args.seconds:g}s"
          f" (after {args.warmup_seconds:g}s warm-up), {r['watchers']} watchers, visibility polled every"
          f" {args.poll_ms:g} ms\n   loadavg at start: {r['loadavg']['start']}"
          f"\n   loadavg at end:   {r['loadavg']['end']}")
    for kind, what in (("push", "push tweets: probe's watch vs probe's home_timeline row"),
                       ("pull", "pull author's tweets: probe's watch vs the author_timeline row")):
        k = r[kind]
        print(f"  {what} ({k['tweets']} tweets, {k['not_received']} not received, {k['not_visible']} not seen"
              f" visible)")
        print(f"    publish -> watch receipt      {fmt(k['publish_to_receipt_ms'])}")
        print(f"    publish -> Cassandra-visible  {fmt(k['publish_to_visible_ms'])}")
        print(f"    receipt - visible (per tweet) {fmt(k['receipt_minus_visible_ms'])}")
        a, b = k["publish_to_receipt_ms"], k["publish_to_visible_ms"]
        if a.get("n") and b.get("n"):
            print(f"    p99(receipt) - p99(visible) = {a['p99'] - b['p99']:+.1f} ms; p50 difference"
                  f" {a['p50'] - b['p50']:+.1f} ms (target: receipt within 100 ms of visible at p99)")
    print(f"  every delivery to every watcher: publish -> receipt {fmt(r['all_deliveries_ms'])}")
    h = r["server_publish_to_visible"]
    print("  server feed_publish_to_visible_seconds over the sampled window: "
          + ", ".join(f"{k} {v}" for k, v in h.items()))
    print(f"  watch messages pushed {r['watch_messages']:.0f}; streams ended early: {r['streams_ended'] or 'none'};"
          f" visibility queries {r['visible_polls']}")


# -- the read data set (parts 2 and 3) ----------------------------------------------------------
def read_dataset(base: Settings, args: argparse.Namespace) -> tuple[Settings, dict]:
    """bench_grpc's data set in ``--keyspace`` (populated by its ``populate`` when missing), and the
    change topic of :data:`READ_SUFFIX` for the servers to consume."""
    import bench_grpc

    from feed_service.kafka.topics import ensure_topics

    settings = replace(base, keyspace=args.keyspace).with_topic_suffix(READ_SUFFIX)
    meta = bench_grpc.read_meta(settings)
    if meta is None:
        print(f"populating {args.keyspace} with bench_grpc.py's defaults (bench_grpc.py --populate-only)", flush=True)
        bench_grpc.main(["--keyspace", args.keyspace, "--populate-only"])
        meta = bench_grpc.read_meta(settings)
        if meta is None:
            raise RuntimeError(f"bench_grpc.py did not populate {args.keyspace}")
    ensure_topics(settings, [settings.topics["timeline_changes"]])
    return settings, meta


# -- 2. idle watchers: polling vs push ------------------------------------------------------------
def idle_part(settings: Settings, meta: dict, args: argparse.Namespace, workdir: Path) -> list[dict]:
    from feed_service.store.session import connect

    rng = random.Random(3)
    users = [f"u{i}" for i in rng.sample(range(meta["users"]), args.idle_watchers)]
    cass = cassandra_pid()
    cluster, session = connect(settings)
    results = []
    try:
        for name, env in (("polling", {"FEED_CHANGE_FEED": "0", "FEED_WATCH_POLL_S": str(args.poll_s)}),
                          ("push", {"FEED_CHANGE_FEED": "1"})):
            server = Server(settings, workdir, f"idle-{name}", env).ready()
            client = None
            try:
                client = WatchClient(server.port, users, workdir, f"idle-{name}", channels=args.client_channels)
                opened = time.monotonic()
                server.wait_watch_streams(len(users))
                open_s = time.monotonic() - opened
                time.sleep(args.idle_settle)
                srv, cli = [server.pid], [client.pid]
                load_start = loadavg()
                t0 = time.monotonic()
                c0 = (cpu_now(srv), cpu_now([cass]) if cass else 0.0, cpu_now(cli),
                      coordinator_reads(session, settings.keyspace))
                time.sleep(args.idle_seconds)
                c1 = (cpu_now(srv), cpu_now([cass]) if cass else 0.0, cpu_now(cli),
                      coordinator_reads(session, settings.keyspace))
                elapsed = time.monotonic() - t0
                streams = metric(server.scrape(), "feed_watch_streams")
                load_end = loadavg()
                ended = client.finish()["ended"]
                client = None
            finally:
                if client is not None:
                    client.finish()
                server.stop()
            r = {"server": name, "watchers": len(users), "open_s": round(open_s, 1), "seconds": round(elapsed, 1),
                 "server_cpu_pct": round(100 * (c1[0] - c0[0]) / elapsed, 1),
                 "cassandra_cpu_pct": round(100 * (c1[1] - c0[1]) / elapsed, 1) if cass else None,
                 "client_cpu_pct": round(100 * (c1[2] - c0[2]) / elapsed, 1),
                 "cassandra_reads_per_s": round((c1[3] - c0[3]) / elapsed, 1),
                 "streams_open_at_end": streams, "streams_ended_early": ended,
                 "loadavg": {"start": load_start, "end": load_end}}
            results.append(r)
            print(f"[idle] {name}: {r}", flush=True)
    finally:
        cluster.shutdown()
    return results


def print_idle(rows: list[dict], args: argparse.Namespace) -> None:
    print(f"\n== 2. {args.idle_watchers} idle WatchHomeTimeline streams, nothing published, {args.idle_seconds:g}s"
          f" each (CPU % of one core)")
    print(f"  {'server':<28} {'server CPU':>10} {'Cassandra CPU':>14} {'Cassandra reads/s':>18} {'client CPU':>10}"
          f"  loadavg start | end")
    for r in rows:
        label = f"polling every {args.poll_s:g}s" if r["server"] == "polling" else "push (change feed)"
        cass = "-" if r["cassandra_cpu_pct"] is None else f"{r['cassandra_cpu_pct']:.1f}%"
        print(f"  {label:<28} {r['server_cpu_pct']:>9.1f}% {cass:>14} {r['cassandra_reads_per_s']:>18.1f}"
              f" {r['client_cpu_pct']:>9.1f}%  {r['loadavg']['start']} | {r['loadavg']['end']}")
        if r["streams_ended_early"] or r["streams_open_at_end"] != r["watchers"]:
            print(f"    streams open at the end: {r['streams_open_at_end']}, ended early: {r['streams_ended_early']}")


# -- 3. GetHomeTimeline with and without the read cache --------------------------------------------
def zipf_users(n_users: int, exponent: float, k: int, rng: random.Random, order: list[int]) -> list[str]:
    """``k`` readers: rank r drawn with weight r^-exponent, rank r read as user ``order[r - 1]``."""
    cum, total = [], 0.0
    for r in range(1, n_users + 1):
        total += r ** -exponent
        cum.append(total)
    return [f"u{order[bisect.bisect_left(cum, rng.random() * total)]}" for _ in range(k)]


def cache_part(settings: Settings, meta: dict, args: argparse.Namespace, workdir: Path) -> list[dict]:
    from bench_grpc import BENCH_SECRET, ghz_path, load, measured

    from feed_service.server import auth
    from feed_service.store.session import connect

    if not ghz_path():
        print("[cache] ghz not found: bench_grpc's Python load generator is used instead", flush=True)
    order = list(range(meta["users"]))
    random.Random(17).shuffle(order)
    n = min(args.readers or meta["users"], meta["users"])
    rng = random.Random(23)
    # one draw for the warm-up and one per measured run (the same for both servers): ghz reads its data
    # file from the start in every run, so a run reusing the warm-up's or an earlier run's file would
    # replay exactly the reads that filled the cache
    runs = [("@ %d/s" % args.cache_rate, args.cache_rate)] if args.cache_rate else []
    runs.append(("max", 0))
    warm = zipf_users(n, args.zipf, args.zipf_requests, rng, order)
    samples = [zipf_users(n, args.zipf, args.zipf_requests, rng, order) for _ in runs]
    sample = samples[-1]
    counts = Counter(sample)
    hot = sum(c for _, c in counts.most_common(10_000))
    print(f"[cache] Zipf({args.zipf}) readers over {n:,} of the {meta['users']:,} users:"
          f" {args.zipf_requests:,} requests per data file,"
          f" {len(counts):,} distinct users; the 10,000 most read users make {hot / len(sample):.0%} of the requests",
          flush=True)
    token = auth.mint(BENCH_SECRET.encode(), subject="bench-watch", role="service", ttl_s=3600)
    cluster, session = connect(settings)
    results = []
    variants = [("no read cache", {"FEED_READ_CACHE_KEYS": "0"}), ("read cache", {})]
    if args.cache_keys:
        variants[1] = (f"read cache ({args.cache_keys} keys)", {"FEED_READ_CACHE_KEYS": str(args.cache_keys)})
    try:
        for name, env in variants:
            server = Server(settings, workdir, f"cache-{len(results)}", {"FEED_CHANGE_FEED": "1", **env},
                            workers=args.workers).ready()
            try:
                load(server.port, warm, token, concurrency=args.concurrency, duration=args.cache_warmup)
                for (label, rate), sample in zip(runs, samples):
                    m0, r0, l0 = server.scrape(), coordinator_reads(session, settings.keyspace), loadavg()
                    r = measured(lambda: load(server.port, sample, token, concurrency=max(args.concurrency, 64)
                                              if rate else args.concurrency, duration=args.cache_seconds, rate=rate),
                                 server.pid)
                    m1, r1, l1 = server.scrape(), coordinator_reads(session, settings.keyspace), loadavg()
                    hits = (metric(m1, "feed_read_cache_total", result="hit") or 0) - (
                        metric(m0, "feed_read_cache_total", result="hit") or 0)
                    misses = (metric(m1, "feed_read_cache_total", result="miss") or 0) - (
                        metric(m0, "feed_read_cache_total", result="miss") or 0)
                    ok = (r.get("codes") or {}).get("OK", r.get("count", 0))
                    row = {"server": name, "run": label, **r,
                           "cache_hit_ratio": round(hits / (hits + misses), 3) if hits + misses else None,
                           "cache_lookups": int(hits + misses),
                           "cache_timelines": metric(m1, "feed_read_cache_timelines"),
                           "cassandra_reads_per_request": round((r1 - r0) / ok, 2) if ok else None,
                           "loadavg": {"start": l0, "end": l1}}
                    results.append(row)
                    print(f"[cache] {name} {label}: QPS {row['qps']}, p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms,"
                          f" CPU us/request {row.get('cpu_us_per_request')}, hit ratio {row['cache_hit_ratio']},"
                          f" codes {row.get('codes')}"
                          f"{'; ghz errors ' + str(row['errors_seen']) if row.get('errors_seen') else ''};"
                          f" loadavg {l1}", flush=True)
            finally:
                server.stop()
    finally:
        cluster.shutdown()
    return results


def print_cache(rows: list[dict], meta: dict, args: argparse.Namespace) -> None:
    readers = min(args.readers or meta["users"], meta["users"])
    print(f"\n== 3. GetHomeTimeline, 20-entry pages, Zipf({args.zipf}) readers over {readers:,} of"
          f" {meta['users']:,} timelines,"
          f" ghz concurrency {args.concurrency} (64 at a fixed rate), {args.cache_seconds:g}s per run,"
          f" {args.workers} server worker(s)")
    print(f"  {'server':<22} {'run':<10} {'QPS':>8} {'p50 ms':>8} {'p99 ms':>8} {'srv us/req':>10}"
          f" {'cass us/req':>11} {'cass reads/req':>14} {'hit ratio':>9}  loadavg start | end")
    for r in rows:
        cpu = r.get("cpu_us_per_request") or {}
        hit = "-" if r["cache_hit_ratio"] is None else f"{r['cache_hit_ratio']:.1%}"
        print(f"  {r['server']:<22} {r['run']:<10} {r['qps']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8}"
              f" {cpu.get('server', '-'):>10} {str(cpu.get('cassandra', '-')):>11}"
              f" {str(r['cassandra_reads_per_request']):>14} {hit:>9}  {r['loadavg']['start']} | {r['loadavg']['end']}")
    by = {(r["server"].split(" (")[0], r["run"]): r for r in rows}
    a, b = by.get(("no read cache", "max")), by.get(("read cache", "max"))
    if a and b and a["qps"]:
        print(f"  unthrottled QPS with the cache / without: {b['qps'] / a['qps']:.2f}x (target >= 2x)")


# -- main -------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--only", default=",".join(PHASES), help="comma list of parts to run: latency,idle,cache")
    parser.add_argument("--out", help="also write the figures as JSON to this file")
    g = parser.add_argument_group("1. latency")
    g.add_argument("--rate", type=float, default=20.0, help="tweets published per second")
    g.add_argument("--seconds", type=float, default=40.0, help="sampled seconds of publishing")
    g.add_argument("--warmup-seconds", type=float, default=15.0, help="unsampled seconds at the same rate first")
    g.add_argument("--authors", type=int, default=20, help="push authors")
    g.add_argument("--fanout", type=int, default=50, help="followers per push author")
    g.add_argument("--users", type=int, default=1000, help="users the push authors' followers are drawn from")
    g.add_argument("--pull-threshold", type=int, default=100, help="the pipeline's FEED_PULL_THRESHOLD")
    g.add_argument("--star-followers", type=int, default=150, help="followers of the pull author")
    g.add_argument("--star-watchers", type=int, default=20, help="of which hold a watch")
    g.add_argument("--star-every", type=int, default=5, help="every N-th tweet is the pull author's")
    g.add_argument("--poll-ms", type=float, default=10.0, help="Cassandra visibility poll interval")
    g = parser.add_argument_group("2. idle")
    g.add_argument("--idle-watchers", type=int, default=1000)
    g.add_argument("--idle-seconds", type=float, default=20.0, help="measured window per server")
    g.add_argument("--idle-settle", type=float, default=3.0, help="seconds after the streams are open")
    g.add_argument("--poll-s", type=float, default=1.0, help="FEED_WATCH_POLL_S of the polling server")
    g.add_argument("--client-channels", type=int, default=10, help="connections of the watch client")
    g = parser.add_argument_group("3. cache (and the data set of 2.)")
    g.add_argument("--keyspace", default="feed_bench", help="bench_grpc.py's data set (populated when missing)")
    g.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the readers (0: uniform)")
    g.add_argument("--readers", type=int, default=0,
                   help="draw the readers among this many users (0: all of the data set; e.g. --zipf 0"
                        " --readers 2000: every read a hit once warm; --zipf 0 alone: nearly every read a miss)")
    g.add_argument("--zipf-requests", type=int, default=200_000, help="requests in each ghz data file (cycled)")
    g.add_argument("--cache-seconds", type=float, default=20.0, help="seconds per measured ghz run")
    g.add_argument("--cache-warmup", type=float, default=60.0,
               help="warm-up seconds per server, a draw of its own (the default cache is full, 20,000 keys, after"
                    " about a minute of Zipf(1.1) reads: the hit ratio is then the steady state's)")
    g.add_argument("--cache-rate", type=int, default=500,
               help="also a fixed-rate run at this rate, below the uncached server's capacity (0: skip)")
    g.add_argument("--cache-keys", type=int, default=0, help="FEED_READ_CACHE_KEYS of the cached server (0: default)")
    g.add_argument("--concurrency", type=int, default=32, help="ghz concurrency of the unthrottled runs")
    g.add_argument("--workers", type=int, default=1, help="feedctl serve --workers (metrics: first worker only)")
    parser.add_argument("--watch-client", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.watch_client:
        return run_watch_client(args.watch_client)
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(only) - set(PHASES)
    if unknown:
        parser.error(f"--only: unknown part(s) {sorted(unknown)}; choose from {', '.join(PHASES)}")

    base = Settings.from_env()
    workdir = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    print(f"bench_watch: {', '.join(only)}; logs in {workdir}; cpus {os.cpu_count()}; loadavg {loadavg()}", flush=True)
    started = time.monotonic()
    results: dict = {"cpus": os.cpu_count(), "args": vars(args)}
    if "latency" in only:
        results["latency"] = latency_part(base, args, workdir)
        print_latency(results["latency"], args)
    if "idle" in only or "cache" in only:
        settings, meta = read_dataset(base, args)
        results["data"] = meta
        if "idle" in only:
            results["idle"] = idle_part(settings, meta, args, workdir)
            print_idle(results["idle"], args)
        if "cache" in only:
            results["cache"] = cache_part(settings, meta, args, workdir)
            print_cache(results["cache"], meta, args)
    # the summary again, together at the end
    print(f"\n==== summary ({time.monotonic() - started:.0f}s; loadavg now {loadavg()})")
    if "latency" in results:
        print_latency(results["latency"], args)
    if "idle" in results:
        print_idle(results["idle"], args)
    if "cache" in results:
        print_cache(results["cache"], results["data"], args)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2, default=str))
        print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
