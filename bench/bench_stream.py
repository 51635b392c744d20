"""Streaming job benchmark: throughput, freshness, and the raw Cassandra ceiling in the same run.

Runs against the developer stack (``feedctl stack up``; settings from the environment) on isolated
topics (suffix) and keyspaces, and prints figures; it asserts nothing.

1. raw ceiling: the same timeline rows written straight from the driver (CassandraWriter, prepared
   statements, bounded concurrency) in ``--writer-procs`` processes, no Spark: one statement per row,
   UNLOGGED batches of rows, and one fan-out statement per tweet and chunk of ``--fanout`` timelines
   (the stream's form, docs/idempotent-writes.md); shares are of the best of them;
2. throughput, per state layout: a graph where every author has ``--fanout`` followers is
   streamed first; then a backlog of ``--tweets`` tweets is published at once and the time until the
   stream has caught up gives tweets/s and timeline inserts/s; with ``--hide-share`` the stream
   runs once more with block and mute changes interleaved into the same backlog, that
   share of all its events (docs/blocks-and-mutes.md), for events/s side by side;
3. freshness: ``--rate`` tweets/s, ``--warmup-seconds`` unsampled, then ``--seconds``; for a sample
   of tweets, the time from the producer's delivery report to the row being readable in a
   follower's home_timeline partition; with ``--repost-share`` and ``--reply-share``, that share of
   the steady window's events are reposts and replies, each sampled apart in the ``home_extras`` of
   a reader it reaches only through the per-reader stage; with ``--control-changes``, mutes,
   unmutes, unfollows and follows one at a time over the same window, timed to ``GetHomeTimeline``
   and to a Watch on a read server (bench/control_changes.py).

    .venv/bin/python bench/bench_stream.py [--tweets 10000] [--fanout 50] [--rate 100] [--seconds 30]
        [--state-buckets 0,16] [--skip raw,throughput,freshness]

The stream's runs are made once per state layout of ``--state-buckets`` (0: one state per
key, the layout before buckets; N: N buckets of join keys, docs/state-buckets.md), side by side.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from typing import Any

from feed_service.core.rows import Entry, TimelineFanout, TimelineWrite
from feed_service.ops.provision import provision
from feed_service.settings import DEFAULT_STATE_BUCKETS, Settings
from spark_jobs.runtime.session import SPARK_CONF_ENV
from feed_service.stack.stream_process import StreamProcess

from control_changes import ControlSamples, run_control_changes
from isolated import drop, exit_on_sigterm
from process_cpu import TreeCpu, tree_cpu


def _graph(authors: int, users: int, fanout: int, rng: random.Random, prefix: str) -> dict[str, list[str]]:
    population = [f"{prefix}u{i}" for i in range(users)]
    return {f"{prefix}a{a}": rng.sample(population, fanout) for a in range(authors)}


def _follow_events(graph: dict[str, list[str]]) -> list[dict]:
    return [{"type": "follow", "op": "follow", "follower_id": f, "followee_id": a, "version": 1}
            for a, followers in graph.items() for f in followers]


def _tweet(author: str, n: int, now_ms: int) -> dict:
    return {"type": "tweet", "op": "upsert", "tweet_id": f"{author}-t{n}", "author_id": author, "version": 1,
            "created_at": now_ms, "text": f"tweet {n} of {author}", "profile_version": 1}


def _repost(reposter: str, author: str, n: int, at_n: int, now_ms: int) -> dict:
    """``reposter`` reposts ``author``'s n-th tweet of :func:`_tweet` (the at_n-th event) at ``now_ms``."""
    return {"type": "repost", "op": "repost", "reposter_id": reposter, "tweet_id": f"{author}-t{n}",
            "author_id": author, "version": 1, "created_at": now_ms, "profile_version": 1}


def _reply(author: str, n: int, parent_author: str, parent_n: int, now_ms: int) -> dict:
    """``author``'s n-th tweet, a reply to ``parent_author``'s ``parent_n``-th of :func:`_tweet`."""
    return {**_tweet(author, n, now_ms), "in_reply_to_tweet_id": f"{parent_author}-t{parent_n}",
            "in_reply_to_author_id": parent_author}


def _hides(graph: dict[str, list[str]], count: int, rng: random.Random) -> list[dict]:
    """``count`` block and mute changes between authors and their followers: 60 % mutes, 25 % a
    follower's block of the author, 15 % the author's block of a follower; every fifth undoes one."""
    versions: dict[tuple[str, str, str], int] = {}
    authors = list(graph)
    live: list[tuple[str, str, str]] = []
    out: list[dict] = []
    for n in range(count):
        if n % 5 == 4 and live:
            kind, a, b = live.pop(rng.randrange(len(live)))
            op = "unmute" if kind == "mute" else "unblock"
        else:
            author = rng.choice(authors)
            reader = rng.choice(graph[author])
            r = rng.random()
            kind, a, b = ("mute", reader, author) if r < 0.6 else ("block", reader, author) if r < 0.85 \
                else ("block", author, reader)
            op = kind
            live.append((kind, a, b))
        versions[(kind, a, b)] = version = versions.get((kind, a, b), 0) + 1
        fields = ("muter_id", "muted_id") if kind == "mute" else ("blocker_id", "blocked_id")
        out.append({"type": kind, "op": op, fields[0]: a, fields[1]: b, "version": version})
    return out


_CREATED: list[Settings] = []
"""Every isolated pipeline this run provisioned: dropped when it ends (bench/isolated.py)."""


def _pipeline(base: Settings, tag: str) -> Settings:
    settings = replace(base.with_topic_suffix(f".bench.{tag}"), keyspace=f"bench_{tag}")
    _CREATED.append(settings)
    provision(settings)
    return settings


def _graph_pipeline(base: Settings, name: str, seed: int, args: argparse.Namespace, workdir: Path,
                    buckets: int | None = None,
                    env: dict[str, str] | None = None) -> tuple[Settings, dict[str, list[str]], StreamProcess]:
    """Isolated topics and keyspace, the follow graph published, and the stream started on them
    (``buckets``: the new checkpoint's state buckets, docs/state-buckets.md; None: the default;
    ``env``: more environment for the stream, e.g. a private stack's ``StackConfig.environment()``)."""
    from feed_service.kafka.producer import EventProducer

    tag = f"{name}{uuid.uuid4().hex[:4]}"
    settings = _pipeline(base if buckets is None else replace(base, state_buckets=buckets), tag)
    graph = _graph(args.authors, args.users, args.fanout, random.Random(seed), prefix=f"{tag}-")
    with EventProducer(settings) as producer:
        for event in _follow_events(graph):
            producer.publish_event(event)
    stream = StreamProcess(settings, workdir / f"ckpt-{tag}", log_file=workdir / f"stream-{tag}.log",
                           env=env).start()
    return settings, graph, stream


# -- 1. raw ceiling ------------------------------------------------------------------------------
def _raw_writer(settings: Settings, rows: list[tuple], batch_rows: int, fanout: int,
                out: "multiprocessing.Queue[float]") -> None:
    from feed_service.store.session import connect
    from feed_service.store.cassandra_writer import CassandraWriter

    cluster, session = connect(settings)
    writer = CassandraWriter(session, settings.keyspace, concurrency=128, batch_rows=batch_rows)
    form = "timeline_fanout" if fanout else "timeline"
    step = 5000 // max(fanout, 1)  # 5,000 timeline rows a call either way
    writer.write(**{form: rows[:step // 25]})  # warm the connection pool
    started = time.perf_counter()
    for i in range(0, len(rows), step):
        writer.write(**{form: rows[i:i + step]})
    out.put(time.perf_counter() - started)
    cluster.shutdown()


def raw_ceiling(settings: Settings, rows: int, procs: int, batch_rows: int, fanout: int = 0) -> float:
    """Timeline rows/s written by ``procs`` processes: one row per write (``fanout`` 0, in batches
    of ``batch_rows``) or one :class:`TimelineFanout` per tweet to ``fanout`` timelines."""
    per_proc = rows // procs
    now = int(time.time() * 1000)
    queue: multiprocessing.Queue[float] = multiprocessing.Queue()
    workers = []
    for p in range(procs):
        if fanout:
            per_proc = per_proc // fanout * fanout
            batch: list[Any] = [TimelineFanout("insert", tuple(f"raw{p}-u{(i * fanout + k) % 2000}" for k in range(fanout)),
                                               Entry(f"raw{p}-f{i}", f"a{i % 200}", now + i, 1, f"tweet {i}", 1), 1)
                                for i in range(per_proc // fanout)]
        else:
            batch = [TimelineWrite("insert", f"raw{p}-u{i % 2000}", Entry(f"raw{p}-t{i}", f"a{i % 200}", now + i, 1, f"tweet {i}", 1), 1)
                     for i in range(per_proc)]
        workers.append(multiprocessing.Process(target=_raw_writer, args=(settings, batch, batch_rows, fanout, queue)))
    for w in workers:
        w.start()
    times = [queue.get(timeout=600) for _ in workers]
    for w in workers:
        w.join()
    return per_proc * procs / max(times)


# -- 2. throughput -------------------------------------------------------------------------------
def throughput(base: Settings, args: argparse.Namespace, workdir: Path,
               hide_share: float = 0.0, buckets: int | None = None, env: dict[str, str] | None = None,
               side_pids: dict[str, int] | None = None) -> dict[str, float]:
    """The backlog of ``args.tweets`` tweets (plus block and mute changes, ``hide_share`` of all
    events) through a caught-up stream: events/s, timeline rows written/s, and the CPU seconds of
    the stream's process tree (Spark driver, executors, Python workers; Kafka and Cassandra apart)
    per event, from /proc; ``side_pids`` (name -> pid, e.g. the broker's and Cassandra's): their CPU
    seconds over the same window too (``<name>_cpu_s``). ``env``: more environment for the stream."""
    from bench_grpc import _cpu_seconds

    from feed_service.kafka.producer import EventProducer

    side_pids = side_pids or {}
    settings, graph, stream = _graph_pipeline(base, f"tput{'h' if hide_share else ''}", 7, args, workdir, buckets, env)
    batches: dict[int, int] = {}
    try:
        stream.wait_caught_up(timeout=600)
        watcher = _BatchWatcher(stream, batches)
        cpu_before = tree_cpu(stream.proc.pid)
        side_before = {name: _cpu_seconds([pid]) for name, pid in side_pids.items()}
        rows_before = stream.progress()["timeline_rows_written"]
        authors = list(graph)
        now = int(time.time() * 1000)
        extra = round(args.tweets * hide_share / (1 - hide_share)) if hide_share else 0
        hides = _hides(graph, extra, random.Random(11))
        every = args.tweets / extra if extra else 0
        with EventProducer(settings) as producer:
            h = 0
            for n in range(args.tweets):
                while h < extra and h * every <= n:
                    producer.publish_event(hides[h])
                    h += 1
                producer.publish_event(_tweet(authors[n % len(authors)], n, now + n))
            for event in hides[h:]:
                producer.publish_event(event)
        started = time.perf_counter()
        progress = stream.wait_caught_up(timeout=1800)
        elapsed = time.perf_counter() - started
        cpu = tree_cpu(stream.proc.pid) - cpu_before
        side = {f"{name}_cpu_s": _cpu_seconds([pid]) - side_before[name] for name, pid in side_pids.items()}
        watcher.stop()
        rows = progress["timeline_rows_written"] - rows_before
    finally:
        stream.stop()
    events = args.tweets + extra
    return {"tweets_per_s": args.tweets / elapsed, "events_per_s": events / elapsed,
            "inserts_per_s": rows / elapsed, "rows": rows, "seconds": elapsed, "events": events,
            "cpu_s": cpu.total, "worker_cpu_s": cpu.python_workers, "batches": len(batches),
            "mean_batch_rows": (sum(batches.values()) / len(batches)) if batches else float("nan"),
            "settings": settings, **side}


class _BatchWatcher:
    """Input rows of every batch the stream completes while it runs (polled from its progress file)."""

    def __init__(self, stream: StreamProcess, into: dict[int, int]) -> None:
        self.stream, self.into = stream, into
        self.first = (stream.progress() or {}).get("timeline-join", {}).get("batch_id")
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            self._poll()
            time.sleep(0.1)

    def _poll(self) -> None:
        join = (self.stream.progress() or {}).get("timeline-join") or {}
        batch, rows = join.get("batch_id"), join.get("input_rows")
        if batch is not None and batch != self.first and rows:
            self.into[batch] = rows

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._poll()


def engine_cpu_per_event(graph: dict[str, list[str]], tweets: int, batch_rows: float, inbox_cap: int) -> float:
    """CPU seconds per tweet of the engine's own steps (bench/bench_engine.py's ``run_steps``: states
    in memory, no codec, no Spark) on the throughput run's events, cut into batches of its size."""
    from bench_engine import batches_by_key, run_steps

    from feed_service.core.events import FollowChange, TweetUpsert

    follows = [FollowChange(f, a, 1, "follow") for a, fs in graph.items() for f in fs]
    authors = list(graph)
    now = int(time.time() * 1000)
    stream = [TweetUpsert(f"{authors[n % len(authors)]}-t{n}", authors[n % len(authors)], 1, now + n,
                          f"tweet {n}", 1) for n in range(tweets)]
    states: dict = {}
    run_steps(states, batches_by_key(follows, len(follows)), inbox_cap, None, 10**9)
    size = max(1, round(batch_rows)) if batch_rows == batch_rows else 1000
    seconds, events, *_ = run_steps(states, batches_by_key(stream, size), inbox_cap, None, 10**9)
    return seconds / events


# -- 3. freshness --------------------------------------------------------------------------------
def freshness(base: Settings, args: argparse.Namespace, workdir: Path, buckets: int | None = None) -> dict[str, Any]:
    """``args.rate`` tweets/s on a stream that was idle (caught up on the follow graph): for a sample
    of tweets, the time from the broker's ack to the row being readable in a follower's partition,
    over the first ``args.warmup_seconds`` (``cold``) and the ``args.seconds`` after (``steady``);
    and over the steady window the CPU of the stream's Python workers per author key stepped."""
    from feed_service.kafka.producer import EventProducer
    from feed_service.store.session import connect

    settings, graph, stream = _graph_pipeline(base, "fresh", 11, args, workdir, buckets)
    cluster, session = connect(settings, keyspace=settings.keyspace)
    lookup = session.prepare("SELECT tweet_id FROM home_timeline WHERE timeline_id = ? AND created_at = ? "
                             "AND tweet_id = ?")
    # a repost entry: in the home_extras of a follower of the reposter who does not follow the author
    repost_lookup = session.prepare("SELECT tweet_id FROM home_extras WHERE timeline_id = ? AND at = ? "
                                    "AND tweet_id = ?")
    pending: dict[str, tuple[float, tuple, bool]] = {}
    latencies: dict[bool, list[float]] = {True: [], False: []}  # cold? -> seconds
    repost_latencies: list[float] = []  # steady window only
    reply_latencies: list[float] = []  # steady window only
    lock = threading.Lock()
    done = threading.Event()

    def poll() -> None:
        while not done.is_set() or pending:
            with lock:
                items = list(pending.items())
            for sample, (sent_at, key, cold) in items:
                repost, reply = sample.startswith("repost|"), sample.startswith("reply|")
                if session.execute(repost_lookup if repost or reply else lookup, key).one() is not None:
                    with lock:
                        (repost_latencies if repost else reply_latencies if reply
                         else latencies[cold]).append(time.perf_counter() - sent_at)
                        del pending[sample]
            time.sleep(0.02)
            if done.is_set() and time.perf_counter() - done_at[0] > 60:
                break

    batch_ms: dict[int, float] = {}
    batch_rows: dict[int, int] = {}
    sampling = threading.Event()

    def batches() -> None:
        """Durations and input rows of the micro-batches of the steady window (from the progress file)."""
        while not done.is_set():
            join = (stream.progress() or {}).get("timeline-join") or {}
            if sampling.is_set() and join.get("batch_id") is not None and join.get("duration_ms") is not None:
                batch_ms[join["batch_id"]] = join["duration_ms"]
                batch_rows[join["batch_id"]] = join.get("input_rows") or 0
            time.sleep(0.1)

    done_at = [0.0]
    cpu_window = [TreeCpu(0.0, 0.0)] * 2
    control = ControlSamples()
    server = None
    try:
        stream.wait_caught_up(timeout=600)
        if args.control_changes:
            from bench_grpc import BENCH_SECRET
            from bench_watch import Server

            from feed_service.server import auth

            server = Server(settings, workdir, "control", {}).ready()
            token = auth.mint(BENCH_SECRET.encode(), subject="bench-control", role="service", ttl_s=3600)
            threading.Thread(target=run_control_changes, daemon=True,
                             args=(settings, server.port, token, graph, sampling, done, control)).start()
        authors = list(graph)
        if args.prime_seconds > 0:  # a stream that has run (warm workers, known timelines), then idles
            with EventProducer(settings) as producer:
                for n in range(int(args.rate * args.prime_seconds)):
                    producer.publish_event(_tweet(authors[n % len(authors)], -1 - n, int(time.time() * 1000)))
            stream.wait_caught_up(timeout=600)
        time.sleep(args.idle_seconds)  # an idle stream: empty triggers only
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        threading.Thread(target=batches, daemon=True).start()
        cold_tweets = int(args.rate * args.warmup_seconds)
        repost_rng = random.Random(5)
        tweeted: list[tuple[str, int]] = []  # (author, n) of the run's tweets, in order
        followers = {a: set(f) for a, f in graph.items()}
        total = cold_tweets + int(args.rate * args.seconds)
        with EventProducer(settings) as producer:
            started = time.perf_counter()
            for n in range(total):
                target = started + n / args.rate
                while (delay := target - time.perf_counter()) > 0:
                    time.sleep(min(delay, 0.01))
                author = authors[n % len(authors)]
                now_ms = int(time.time() * 1000)
                if n == cold_tweets:
                    sampling.set()
                    cpu_window[0] = tree_cpu(stream.proc.pid)
                old_enough = len(tweeted) - int(args.rate) - 1 - repost_rng.randrange(len(authors))
                repost = (n >= cold_tweets and args.repost_share > 0 and old_enough >= 0
                          and repost_rng.random() < args.repost_share and tweeted[old_enough][0] != author)
                if repost:  # the author reposts another author's tweet of a second or more ago
                    original, back = tweeted[old_enough]
                    reader = next((r for r in graph[author] if r not in followers[original]), None)
                    event = _repost(author, original, back, n, now_ms)
                    producer.publish_event(event)
                    if reader is not None:
                        producer.flush()
                        with lock:
                            pending[f"repost|{author}|{back}"] = (time.perf_counter(),
                                                                   (reader, now_ms, f"{original}-t{back}"), False)
                    continue
                if n >= cold_tweets and args.reply_share > 0 and tweeted and repost_rng.random() < args.reply_share:
                    # a reply to another author's recent tweet, sampled at a reader who follows both
                    parent, parent_n = tweeted[-1 - repost_rng.randrange(min(len(tweeted), len(authors)))]
                    both = sorted(followers[author] & followers[parent]) if parent != author else []
                    event = _reply(author, n, parent, parent_n, now_ms)
                    producer.publish_event(event)
                    if both:
                        producer.flush()
                        with lock:
                            pending[f"reply|{event['tweet_id']}"] = (time.perf_counter(),
                                                                     (both[0], now_ms, event["tweet_id"]), False)
                    continue
                event = _tweet(author, n, now_ms)
                producer.publish_event(event)
                tweeted.append((author, n))
                if n % 5 == 0:
                    producer.flush()  # the sample's clock starts when the broker has the record
                    with lock:
                        pending[event["tweet_id"]] = (time.perf_counter(),
                                                      (graph[author][0], now_ms, event["tweet_id"]), n < cold_tweets)
            cpu_window[1] = tree_cpu(stream.proc.pid)
        done_at[0] = time.perf_counter()
        done.set()
        poller.join(120)
    finally:
        stream.stop()
        if server is not None:
            server.stop()
        cluster.shutdown()
    out: dict[str, Any] = {"lost": len(pending), "control": control}
    values = sorted(repost_latencies) or [float("nan")]
    out.update({"repost_samples": len(repost_latencies), "repost_p50_s": values[len(values) // 2],
                "repost_p99_s": values[min(len(values) - 1, int(0.99 * len(values)))]})
    values = sorted(reply_latencies) or [float("nan")]
    out.update({"reply_samples": len(reply_latencies), "reply_p50_s": values[len(values) // 2],
                "reply_p99_s": values[min(len(values) - 1, int(0.99 * len(values)))]})
    for cold, name in ((True, "cold"), (False, "steady")):
        values = sorted(latencies[cold]) or [float("nan")]
        q = lambda p: values[min(len(values) - 1, int(p * len(values)))]  # noqa: E731
        out.update({f"{name}_samples": len(latencies[cold]), f"{name}_p50_s": q(0.50), f"{name}_p99_s": q(0.99),
                    f"{name}_max_s": values[-1]})
    durations = sorted(batch_ms.values()) or [float("nan")]
    # Tweets go round robin over the authors, so a batch of r tweets steps min(r, authors) author keys.
    key_steps = sum(min(rows, len(authors)) for rows in batch_rows.values())
    cpu = cpu_window[1] - cpu_window[0]
    out.update({"batch_p50_ms": durations[len(durations) // 2], "batches": len(batch_ms), "key_steps": key_steps,
                "worker_cpu_s": cpu.python_workers, "cpu_s": cpu.total,
                "worker_ms_per_key": 1000 * cpu.python_workers / key_steps if key_steps else float("nan"),
                "engine_ms_per_key": 1000 * engine_cpu_per_event(graph, 2000, len(authors) / 2, settings.inbox_cap)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tweets", type=int, default=10_000, help="backlog of the throughput runs")
    parser.add_argument("--fanout", type=int, default=50)
    parser.add_argument("--authors", type=int, default=200)
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=30.0, help="sampled seconds of the freshness run")
    parser.add_argument("--warmup-seconds", type=float, default=15.0,
                        help="the first seconds of the freshness run, reported apart (cold: right after an idle stream)")
    parser.add_argument("--prime-seconds", type=float, default=10.0,
                        help="seconds of tweets at --rate, not sampled, before the stream idles (0: none)")
    parser.add_argument("--idle-seconds", type=float, default=75.0,
                        help="seconds the caught-up stream idles before the freshness run starts (Spark stops "
                             "Python workers idle for a minute)")
    parser.add_argument("--state-buckets", default=f"0,{DEFAULT_STATE_BUCKETS}",
                        help="comma list of state layouts (0: one state per key) for the stream's runs, "
                             "side by side (docs/state-buckets.md)")
    parser.add_argument("--writer-procs", type=int, default=2)
    parser.add_argument("--variants", default="",
                        help="freshness runs back to back with different Spark settings: "
                             "'name:spark.k=v,spark.k2=v2|name2:...' (an empty conf = the defaults)")
    parser.add_argument("--hide-share", type=float, default=0.1,
                        help="share of block and mute changes in the extra throughput run (0: no such run)")
    parser.add_argument("--repost-share", type=float, default=0.0,
                        help="share of the freshness run's steady events that are reposts of a tweet a second or more"
                             " old, sampled apart (docs/reposts-and-replies.md)")
    parser.add_argument("--reply-share", type=float, default=0.0,
                        help="share of the freshness run's steady events that are replies to another author's recent"
                             " tweet, sampled apart at a reader who follows both (docs/reposts-and-replies.md)")
    parser.add_argument("--control-changes", action="store_true",
                        help="during the freshness run's steady window, mutes, unmutes, unfollows and follows one at a"
                             " time, timed to GetHomeTimeline and to a Watch on a read server (bench/control_changes.py)")
    parser.add_argument("--skip", default="", help="comma list of phases to skip: raw,throughput,freshness")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    base = Settings.from_env()
    workdir = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    print(f"bench_stream: kafka {base.kafka_bootstrap}, cassandra {base.cassandra_hosts}:{base.cassandra_port}, "
          f"logs in {workdir}")
    results: dict[str, Any] = {}  # "raw": the ceiling; per state layout, its throughput run
    if "raw" not in skip:
        raw_settings = _pipeline(base, f"raw{uuid.uuid4().hex[:4]}")
        rows = args.tweets * args.fanout
        from feed_service.store.cassandra_writer import DEFAULT_BATCH_ROWS

        single = raw_ceiling(raw_settings, rows, args.writer_procs, batch_rows=1)
        print(f"raw Cassandra, one statement per request: {single:,.0f} timeline inserts/s "
              f"({rows:,} rows, {args.writer_procs} procs)")
        batched = raw_ceiling(raw_settings, rows, args.writer_procs, batch_rows=DEFAULT_BATCH_ROWS)
        print(f"raw Cassandra, UNLOGGED batches of {DEFAULT_BATCH_ROWS}: {batched:,.0f} timeline inserts/s "
              f"({rows:,} rows, {args.writer_procs} procs)")
        fanned = raw_ceiling(raw_settings, rows, args.writer_procs, batch_rows=DEFAULT_BATCH_ROWS, fanout=args.fanout)
        print(f"raw Cassandra, one fan-out statement per tweet to {args.fanout} timelines: {fanned:,.0f} timeline "
              f"inserts/s ({rows:,} rows, {args.writer_procs} procs)")
        results["raw"] = ceiling = max(single, batched, fanned)
        print(f"raw Cassandra ceiling (the best of the three): {ceiling:,.0f} timeline inserts/s")
    layouts = [int(b) for b in args.state_buckets.split(",") if b.strip()]

    def layout_name(buckets: int) -> str:
        return f"stream, {f'{buckets} state buckets' if buckets else 'one state per key'}"

    if "throughput" not in skip:
        for buckets in layouts:
            r = throughput(base, args, workdir, buckets=buckets)
            results[f"layout {buckets}"] = r
            engine = engine_cpu_per_event(_graph(args.authors, args.users, args.fanout, random.Random(7), "e-"),
                                          args.tweets, r["mean_batch_rows"], base.inbox_cap)
            share = f", {100 * r['inserts_per_s'] / results['raw']:.0f}% of raw" if "raw" in results else ""
            print(f"{layout_name(buckets)}: {r['tweets_per_s']:,.0f} tweets/s, "
                  f"{r['inserts_per_s']:,.0f} timeline inserts/s ({r['rows']:,} rows in {r['seconds']:.1f}s, "
                  f"fan-out {args.fanout}{share}); {r['batches']} batches of {r['mean_batch_rows']:,.0f} rows; "
                  f"stream CPU {1e6 * r['cpu_s'] / r['events']:,.0f} us/event (Python workers "
                  f"{1e6 * r['worker_cpu_s'] / r['events']:,.0f}), engine alone {1e6 * engine:,.0f} us/event: "
                  f"{r['cpu_s'] / r['events'] / engine:.1f}x; load average {_load()}", flush=True)
        if args.hide_share > 0:
            last = layouts[-1] if layouts else 0
            plain = results.get(f"layout {last}") or throughput(base, args, workdir, buckets=last)
            r = throughput(base, args, workdir, hide_share=args.hide_share, buckets=last)
            print(f"{layout_name(last)} with {args.hide_share:.0%} blocks and mutes: {r['events_per_s']:,.0f} events/s "
                  f"({r['events']:,} events, {r['rows']:,} timeline rows in {r['seconds']:.1f}s) against "
                  f"{plain['events_per_s']:,.0f} events/s without them: {r['events_per_s'] / plain['events_per_s']:.2f}x, "
                  f"the same tweets in {r['seconds'] / plain['seconds']:.2f}x the time; load average {_load()}", flush=True)
    if "freshness" not in skip:
        for name, conf in _variants(args.variants):
            os.environ[SPARK_CONF_ENV] = conf  # read by the stream process's build_session
            for buckets in layouts:
                f = freshness(base, args, workdir, buckets=buckets)
                print(f"freshness [{name}: {conf or 'defaults'}] at {args.rate:.0f} tweets/s, fan-out {args.fanout} "
                      f"({layout_name(buckets)}): first {args.warmup_seconds:.0f}s after "
                      f"{args.idle_seconds:.0f}s idle (after {args.prime_seconds:.0f}s of tweets) p50 {f['cold_p50_s']:.2f}s, p99 {f['cold_p99_s']:.2f}s, "
                      f"max {f['cold_max_s']:.2f}s ({f['cold_samples']} samples); the {args.seconds:.0f}s after "
                      f"p50 {f['steady_p50_s']:.2f}s, p99 {f['steady_p99_s']:.2f}s, max {f['steady_max_s']:.2f}s "
                      f"({f['steady_samples']} samples, {f['lost']} not seen), batch p50 {f['batch_p50_ms']:.0f} ms; "
                      f"steady window: {f['key_steps']:,} author-key steps in {f['batches']} batches, Python workers "
                      f"{f['worker_ms_per_key']:.2f} ms CPU per author key (engine alone {f['engine_ms_per_key']:.3f} ms), "
                      f"stream {f['cpu_s']:.1f} s CPU; load average {_load()}", flush=True)
                if args.control_changes:
                    c = f["control"]
                    for kind in ("read", "watch"):
                        values = c.all(kind) or [float("nan")]
                        p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
                        per_op = ", ".join(f"{op} {len(v)}" for op, v in getattr(c, kind).items())
                        print(f"  control changes to {'GetHomeTimeline' if kind == 'read' else 'a Watch'}: p50"
                              f" {values[len(values) // 2]:.2f}s, p99 {p99:.2f}s ({per_op}; {c.missed} missed) against"
                              f" tweets' p99 {f['steady_p99_s']:.2f}s: {p99 / f['steady_p99_s']:.2f}x", flush=True)
                if args.reply_share > 0:
                    print(f"  replies ({args.reply_share:.0%} of the steady window's events), to a reader who follows"
                          f" both sides: p50 {f['reply_p50_s']:.2f}s, p99 {f['reply_p99_s']:.2f}s"
                          f" ({f['reply_samples']} samples) against tweets' p99 {f['steady_p99_s']:.2f}s:"
                          f" {f['reply_p99_s'] / f['steady_p99_s']:.2f}x", flush=True)
                if args.repost_share > 0:
                    print(f"  reposts ({args.repost_share:.0%} of the steady window's events), to a reader who follows"
                          f" the reposter and not the author: p50 {f['repost_p50_s']:.2f}s, p99 {f['repost_p99_s']:.2f}s"
                          f" ({f['repost_samples']} samples) against tweets' p99 {f['steady_p99_s']:.2f}s:"
                          f" {f['repost_p99_s'] / f['steady_p99_s']:.2f}x", flush=True)
    return 0


def _variants(spec: str) -> list[tuple[str, str]]:
    """``name:k=v,k=v|name2:...`` -> [(name, FEED_SPARK_CONF value)]; an empty spec is one default run."""
    if not spec:
        return [("default", os.environ.get(SPARK_CONF_ENV, ""))]
    out = []
    for part in spec.split("|"):
        name, _, conf = part.partition(":")
        out.append((name.strip(), ";".join(c.strip() for c in conf.split(",") if c.strip())))
    return out


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    exit_on_sigterm()
    try:
        code = main()
    finally:
        for created in _CREATED:
            drop(created)
    raise SystemExit(code)
