"""Hybrid fan-out benchmark: a popular author next to ordinary traffic, with and without the hybrid.

Runs against the developer stack (``feedctl stack up``; settings from the environment) on isolated
topics and keyspaces, one variant after the other in the same run, and prints figures; it asserts
nothing (docs/fan-out.md has the results).

Freshness, three variants on the same load: ordinary authors (``--authors`` x ``--fanout``
followers) tweet ``--rate`` tweets/s, and one popular author with ``--star-followers`` followers
tweets every ``--star-every`` seconds:

- ``hybrid``: the default pull threshold, the popular author is a pull author;
- ``push``: the threshold above the popular author's followers, every tweet fanned out;
- ``no-star``: the same ordinary load without the popular author.

Ordinary tweets: publish ack -> row readable in a follower's inbox partition (Cassandra). Popular
author's tweets: publish ack -> on the first page a sampled follower reads through ``GetHomeTimeline``
(the read service in this process, its pull cache at the default TTL).

Reads, on the hybrid pipeline: ``GetHomeTimeline`` QPS and latency for users following 10 pull
authors against users following 10 push authors (the same page size, full pages), with the load
generator of ``bench/bench_grpc.py`` (ghz when installed) against ``feedctl serve``.

    .venv/bin/python bench/bench_hybrid.py [--star-followers 50000] [--rate 50] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from feed_service.core.join import DEFAULT_PULL_THRESHOLD
from feed_service.ops.provision import provision
from feed_service.settings import Settings
from feed_service.stack.stream_process import StreamProcess

BENCH_SECRET = "bench-hybrid-secret-0123456789"


def _follows(author: str, followers: list[str]) -> list[dict]:
    return [{"type": "follow", "op": "follow", "follower_id": f, "followee_id": author, "version": 1} for f in followers]


def _tweet(author: str, tid: str, now_ms: int) -> dict:
    return {"type": "tweet", "op": "upsert", "tweet_id": tid, "author_id": author, "version": 1,
            "created_at": now_ms, "text": f"{tid} by {author}", "profile_version": 1}


def _quantiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"samples": 0}
    samples = sorted(samples)
    q = lambda p: samples[min(len(samples) - 1, int(p * len(samples)))]  # noqa: E731
    return {"samples": len(samples), "p50_s": round(q(0.5), 2), "p99_s": round(q(0.99), 2),
            "max_s": round(samples[-1], 2), "mean_s": round(statistics.mean(samples), 2)}


class Pipeline:
    """Isolated topics and keyspace, a follow graph, and the stream on them."""

    def __init__(self, base: Settings, name: str, threshold: int, workdir: Path) -> None:
        tag = f"{name.replace('-', '')}{uuid.uuid4().hex[:4]}"
        self.tag = tag
        self.settings = replace(base.with_topic_suffix(f".bench.{tag}"), keyspace=f"bench_{tag}",
                                pull_threshold=threshold)
        provision(self.settings)
        self.stream = StreamProcess(self.settings, workdir / f"ckpt-{tag}", log_file=workdir / f"stream-{tag}.log")

    def publish(self, events: list[dict]) -> None:
        from feed_service.kafka.producer import EventProducer

        with EventProducer(self.settings) as producer:
            for event in events:
                producer.publish_event(event)


def freshness_run(base: Settings, name: str, threshold: int, with_star: bool, args: argparse.Namespace,
                  workdir: Path) -> dict:
    """One variant: graph, caught up, then the load; freshness of ordinary and popular tweets."""
    import grpc

    from feed_service.api import timeline_pb2 as pb
    from feed_service.server.config import ServerConfig
    from feed_service.server.testing import ServerThread
    from feed_service.store.session import connect

    rng = random.Random(11)
    pipe = Pipeline(base, name, threshold, workdir)
    users = [f"{pipe.tag}-u{i}" for i in range(args.users)]
    graph = {f"{pipe.tag}-a{a}": rng.sample(users, args.fanout) for a in range(args.authors)}
    star = f"{pipe.tag}-star"
    star_followers = [f"{pipe.tag}-f{i}" for i in range(args.star_followers)]
    events = [e for author, followers in graph.items() for e in _follows(author, followers)]
    if with_star:
        events += _follows(star, star_followers)
    started = time.perf_counter()
    pipe.publish(events)
    pipe.stream.start()
    cluster, session = connect(pipe.settings, keyspace=pipe.settings.keyspace)
    lookup = session.prepare("SELECT tweet_id FROM home_timeline WHERE timeline_id = ? AND created_at = ? "
                             "AND tweet_id = ?")
    ordinary: dict[str, tuple[float, tuple]] = {}
    popular: dict[str, tuple[float, str]] = {}
    got_ordinary: list[float] = []
    got_popular: list[float] = []
    lock = threading.Lock()
    done = threading.Event()
    config = ServerConfig(auth_secret=BENCH_SECRET.encode(), metrics_port=None, settings=pipe.settings,
                          rate_limit_per_s=0.0)  # a bench over the limit would measure refusals
    try:
        pipe.stream.wait_caught_up(timeout=1800)
        graph_s = time.perf_counter() - started
        with ServerThread(config) as server:
            stub = server.stub()
            token = server.auth("bench", "service")

            def poll_ordinary() -> None:
                while not (done.is_set() and not ordinary):
                    with lock:
                        items = list(ordinary.items())
                    for tid, (sent, key) in items:
                        if session.execute(lookup, key).one() is not None:
                            with lock:
                                got_ordinary.append(time.perf_counter() - sent)
                                del ordinary[tid]
                    time.sleep(0.02)
                    if done.is_set() and time.perf_counter() - done_at[0] > 60:
                        return

            def poll_popular() -> None:
                while not (done.is_set() and not popular):
                    with lock:
                        items = list(popular.items())
                    for tid, (sent, reader) in items:
                        try:
                            page = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=reader, page_size=5),
                                                        metadata=token, timeout=5)
                        except grpc.RpcError:
                            continue
                        if any(e.tweet_id == tid for e in page.entries):
                            with lock:
                                got_popular.append(time.perf_counter() - sent)
                                del popular[tid]
                    time.sleep(0.05)
                    if done.is_set() and time.perf_counter() - done_at[0] > 120:
                        return

            done_at = [0.0]
            pollers = [threading.Thread(target=poll_ordinary, daemon=True)]
            if with_star:
                pollers.append(threading.Thread(target=poll_popular, daemon=True))
            for t in pollers:
                t.start()
            from feed_service.kafka.producer import EventProducer

            authors = list(graph)
            warmup = int(args.rate * args.warmup_seconds)
            total = warmup + int(args.rate * args.seconds)
            star_every = max(1, int(args.rate * args.star_every))
            with EventProducer(pipe.settings) as producer:
                t0 = time.perf_counter()
                for n in range(total):
                    while (delay := t0 + n / args.rate - time.perf_counter()) > 0:
                        time.sleep(min(delay, 0.01))
                    author = authors[n % len(authors)]
                    now_ms = int(time.time() * 1000)
                    event = _tweet(author, f"{pipe.tag}-t{n}", now_ms)
                    producer.publish_event(event)
                    sampled = n >= warmup and n % 5 == 0
                    star_event = _tweet(star, f"{pipe.tag}-s{n}", now_ms) if with_star and n % star_every == 0 else None
                    if star_event:
                        producer.publish_event(star_event)
                    if sampled or (star_event and n >= warmup):
                        producer.flush()  # a sample's clock starts when the broker has the record
                        with lock:
                            if sampled:
                                ordinary[event["tweet_id"]] = (time.perf_counter(),
                                                               (graph[author][0], now_ms, event["tweet_id"]))
                            if star_event and n >= warmup:
                                popular[star_event["tweet_id"]] = (time.perf_counter(), rng.choice(star_followers))
            done_at[0] = time.perf_counter()
            done.set()
            for t in pollers:
                t.join(180)
    finally:
        pipe.stream.stop()
        cluster.shutdown()
    return {"threshold": threshold, "graph_seconds": round(graph_s, 1), "ordinary": _quantiles(got_ordinary),
            "ordinary_lost": len(ordinary), "popular": _quantiles(got_popular), "popular_lost": len(popular)}


def read_run(base: Settings, args: argparse.Namespace, workdir: Path) -> dict:
    """GetHomeTimeline for users following 10 pull authors against users following 10 push authors."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_grpc import free_port, load, measured, wait_serving

    from feed_service.server import auth

    threshold = args.read_pull_followers
    pipe = Pipeline(base, "reads", threshold, workdir)
    readers = args.readers
    pull_authors = [f"{pipe.tag}-pull{a}" for a in range(10)]
    push_authors = [f"{pipe.tag}-push{a}" for a in range(10)]
    pull_readers = [f"{pipe.tag}-rp{i}" for i in range(readers)]
    push_readers = [f"{pipe.tag}-rq{i}" for i in range(readers)]
    fillers = [f"{pipe.tag}-x{i}" for i in range(threshold)]  # make the pull authors pull
    events = [e for a in pull_authors for e in _follows(a, pull_readers + fillers)]
    events += [e for a in push_authors for e in _follows(a, push_readers)]
    now = int(time.time() * 1000)
    events += [_tweet(a, f"{a}-t{n}", now - n * 1000) for a in pull_authors + push_authors for n in range(30)]
    # Every author has its profile, as in production: a read hydrates display names from the cache.
    events += [{"type": "profile", "user_id": a, "version": 1, "display_name": f"Author {a}"}
               for a in pull_authors + push_authors]
    pipe.publish(events)
    pipe.stream.start()
    try:
        pipe.stream.wait_caught_up(timeout=1800)
    finally:
        pipe.stream.stop()
    port = free_port()
    env = {**os.environ, **pipe.settings.to_env(), "FEED_AUTH_SECRET": BENCH_SECRET, "FEED_GRPC_HOST": "127.0.0.1",
           "FEED_GRPC_PORT": str(port), "FEED_METRICS_PORT": "0", "FEED_LOG_LEVEL": "WARNING",
           "FEED_RATE_LIMIT_PER_S": "0"}
    server = subprocess.Popen([sys.executable, "-m", "feed_service", "serve", "--workers", str(args.workers)], env=env)
    token = auth.mint(BENCH_SECRET.encode(), subject="bench", role="service", ttl_s=3600)
    results = {}
    try:
        wait_serving(port)
        for name, users in (("push_readers", push_readers), ("pull_readers", pull_readers)):
            load(port, users, token, concurrency=args.concurrency, duration=3)  # warm-up
            results[name] = measured(lambda: load(port, users, token, concurrency=args.concurrency,
                                                  duration=args.read_seconds), server.pid)
            print(f"  {name}: {results[name]}", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--star-followers", type=int, default=50_000)
    parser.add_argument("--star-every", type=float, default=3.0, help="seconds between the popular author's tweets")
    parser.add_argument("--rate", type=float, default=50.0, help="ordinary tweets per second")
    parser.add_argument("--fanout", type=int, default=50)
    parser.add_argument("--authors", type=int, default=200)
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=30.0, help="sampled seconds per variant")
    parser.add_argument("--warmup-seconds", type=float, default=15.0)
    parser.add_argument("--threshold", type=int, default=DEFAULT_PULL_THRESHOLD, help="the hybrid variant's")
    parser.add_argument("--readers", type=int, default=500)
    parser.add_argument("--read-pull-followers", type=int, default=DEFAULT_PULL_THRESHOLD,
                        help="pull threshold of the read run (its pull authors get that many extra followers)")
    parser.add_argument("--read-seconds", type=float, default=15.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip", default="", help="comma list: hybrid,push,no-star,reads")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    base = Settings.from_env()
    workdir = Path(tempfile.mkdtemp(prefix="bench-hybrid-"))
    print(f"bench_hybrid: logs in {workdir}; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    results: dict[str, dict] = {}
    variants = (("hybrid", args.threshold, True), ("push", 10**9, True), ("no-star", args.threshold, False))
    for name, threshold, with_star in variants:
        if name in skip:
            continue
        results[name] = freshness_run(base, name, threshold, with_star, args, workdir)
        print(f"{name}: {results[name]}  (load average {os.getloadavg()[0]:.1f})", flush=True)
    if "reads" not in skip:
        results["reads"] = read_run(base, args, workdir)

    print(f"\nfreshness, publish -> readable; {args.rate:g} ordinary tweets/s x {args.fanout} followers, a popular"
          f" author with {args.star_followers:,} followers every {args.star_every:g} s; load average"
          f" {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'variant':<10} {'ordinary p50':>13} {'p99':>7} {'popular p50':>12} {'p99':>7}")
    for name in ("hybrid", "push", "no-star"):
        r = results.get(name)
        if r:
            o, p = r["ordinary"], r["popular"]
            print(f"{name:<10} {o.get('p50_s', '-'):>13} {o.get('p99_s', '-'):>7} {p.get('p50_s', '-'):>12}"
                  f" {p.get('p99_s', '-'):>7}")
    if "hybrid" in results and "no-star" in results:
        ratio = results["hybrid"]["ordinary"]["p99_s"] / results["no-star"]["ordinary"]["p99_s"]
        print(f"ordinary p99, hybrid / without the popular author: {ratio:.2f}x (target <= 1.5x)")
    if "reads" in results:
        r = results["reads"]
        push, pull = r["push_readers"], r["pull_readers"]
        print(f"GetHomeTimeline: following 10 push authors {push['qps']} QPS (p50 {push['p50_ms']} ms, p99"
              f" {push['p99_ms']} ms); following 10 pull authors {pull['qps']} QPS (p50 {pull['p50_ms']} ms, p99"
              f" {pull['p99_ms']} ms): {pull['qps'] / push['qps']:.0%} (target >= 50%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
