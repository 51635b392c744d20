"""GetHomeTimeline under load: the materialized inbox vs. naive fan-out-on-read, side by side.

    .venv/bin/python bench/bench_grpc.py                    # populate (once) + both benchmarks
    .venv/bin/python bench/bench_grpc.py --users 30000      # scale down the materialized data set
    .venv/bin/python bench/bench_grpc.py --skip-populate    # reuse the data of an earlier run
    .venv/bin/python bench/bench_grpc.py --skip-populate --before 7ae2457 --floor --skip-fanout
                                                            # this tree vs. an older revision, and the floor

What runs (against the Cassandra of ``Settings.from_env()``: ``feedctl stack up`` gives 127.0.0.1:9042):

1. populate keyspace ``feed_bench`` (``--keyspace``) through the project's ``CassandraWriter``:
   ``--users`` home timelines of ``--entries`` entries each, drawn from ``--authors`` authors with
   2 profile versions each; and, for the baseline, its own tables (not part of the schema):
   ``follows_by_follower`` and ``tweets_by_author``, with ``--baseline-users`` users following
   50, 200 and 1,000 of the same authors.
2. materialized design: ``feedctl serve --workers N`` (the real command) reads ``home_timeline``,
   on the uncached path: without the view's change topic (``FEED_CHANGE_FEED=0``), so no read cache;
   every call reads the user's ``pull_follows`` (a 1 s TTL cache, which random users rarely hit) and
   inbox slice, and profile versions not yet in the server's profile cache (each worker fills its
   own during the runs). ``--server-env K=V`` changes the server's settings.
   With ``--before REV`` the same runs are made, alternately (``--rounds``), with the server of
   git revision ``REV`` (its files extracted to a temporary directory; nothing in the checkout
   changes): before and after, side by side, at the same load.
3. baseline: the same service code, with a store whose ``page`` reads the user's followees, the
   newest ``page_size`` tweets of each (concurrently) and merges them (``FanoutStore``);
4. ``--floor``: what gRPC and the driver cost without the service: ``--workers`` processes of a bare
   ``grpc.aio`` server answering GetHomeTimeline with a canned 20-entry response, then the same
   building the entries from one Cassandra read (the inbox slice), then from two (``pull_follows``
   and the slice, as the uncached path reads): no auth, validation, metrics, hydration or token.
5. the load generator runs in its own process: ``ghz`` when installed (``go install
   github.com/bojand/ghz/cmd/ghz@latest``), else a multi-process grpc.aio generator. 20-entry pages,
   random users, a service token. The materialized design is measured twice: at a fixed rate
   (``--rate``, open loop: the latency a client sees at that load) and unthrottled (capacity).

Every run reports the CPU each party spent per OK request (``/proc``: the server's processes, the
local stack's Cassandra JVM, the load generator) and the load average before and after it: on a
shared machine the CPU per request is the steadier figure; QPS and latency follow the load.
Prints a table (and writes the figures as JSON with ``--out FILE``); nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import io
import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from feed_service.settings import Settings  # noqa: E402

FOLLOWEE_COUNTS = (50, 200, 1000)
PAGE_SIZE = 20
BENCH_SECRET = "bench-secret-0123456789abcdef"
BASELINE_DDL = (
    "CREATE TABLE IF NOT EXISTS {ks}.follows_by_follower (follower_id text, followee_id text,"
    " PRIMARY KEY ((follower_id), followee_id))",
    "CREATE TABLE IF NOT EXISTS {ks}.tweets_by_author (author_id text, created_at bigint, tweet_id text,"
    " version bigint, text text, profile_version bigint, PRIMARY KEY ((author_id), created_at, tweet_id))"
    " WITH CLUSTERING ORDER BY (created_at DESC, tweet_id DESC)",
)


# -- data ----------------------------------------------------------------------------------
def author_tweets(a: int, per_author: int, rng: random.Random) -> list[tuple]:
    """(tweet_id, author_id, created_at, version, text, profile_version) of author ``a``."""
    base = 1_700_000_000_000
    return [(f"t{a}-{i}", f"a{a}", base + rng.randrange(10**9), 1, f"tweet {i} of author {a}: " + "x" * 80,
             1 + i % 2) for i in range(per_author)]


def write_retrying(writer, **rows) -> None:
    """``writer.write(**rows)``, again after a pause when some writes failed (up to 5 tries): the
    writes are idempotent, so a chunk that timed out on a busy node is simply written again."""
    from feed_service.errors import WriteFailed

    for attempt in range(5):
        try:
            writer.write(**rows)
            return
        except WriteFailed:
            if attempt == 4:
                raise
            time.sleep(1 + attempt)


def populate(settings: Settings, args: argparse.Namespace) -> dict:
    from feed_service.store.schema import apply_schema
    from feed_service.store.session import connect
    from feed_service.core.rows import Entry, ProfileRow, ProfileWrite, TimelineWrite
    from feed_service.store.cassandra_writer import CassandraWriter

    cluster, session = connect(settings)
    started = time.monotonic()
    try:
        apply_schema(session, settings.keyspace)
        for ddl in BASELINE_DDL:
            session.execute(ddl.format(ks=settings.keyspace), timeout=60)
        writer = CassandraWriter(session, settings.keyspace, concurrency=64)

        def write(**rows) -> None:
            write_retrying(writer, **rows)

        rng = random.Random(42)
        tweets = {a: author_tweets(a, args.tweets_per_author, rng) for a in range(args.authors)}
        ts = 1
        write(profiles=[ProfileWrite(ProfileRow(f"a{a}", v, f"Author {a} v{v}", f"https://img/{a}/{v}.png", None), ts)
                               for a in range(args.authors) for v in (1, 2)])
        # baseline: tweets by author, follows by follower
        ins_tweet = session.prepare(f"INSERT INTO {settings.keyspace}.tweets_by_author (author_id, created_at,"
                                    " tweet_id, version, text, profile_version) VALUES (?, ?, ?, ?, ?, ?)")
        ins_follow = session.prepare(f"INSERT INTO {settings.keyspace}.follows_by_follower (follower_id,"
                                     " followee_id) VALUES (?, ?)")
        from cassandra.concurrent import execute_concurrent_with_args

        rows = [(t[1], t[2], t[0], t[3], t[4], t[5]) for ts_ in tweets.values() for t in ts_]
        execute_concurrent_with_args(session, ins_tweet, rows, concurrency=64)
        follows = [(f"f{k}-{u}", f"a{a}") for k in FOLLOWEE_COUNTS for u in range(args.baseline_users)
                   for a in rng.sample(range(args.authors), k)]
        execute_concurrent_with_args(session, ins_follow, follows, concurrency=64)
        # materialized: one inbox per user, the newest entries of random authors' tweets
        chunk: list[tuple] = []
        for u in range(args.users):
            for t in sorted((rng.choice(tweets[rng.randrange(args.authors)]) for _ in range(args.entries)),
                            key=lambda t: t[2], reverse=True):
                chunk.append(TimelineWrite("insert", f"u{u}", Entry(*t[:6]), ts))
            if len(chunk) >= 20_000:
                write(timeline=chunk)
                chunk = []
            if u and u % 10_000 == 0:
                print(f"  populated {u} users ({time.monotonic() - started:.0f}s)", flush=True)
        write(timeline=chunk)
        session.execute(f"CREATE TABLE IF NOT EXISTS {settings.keyspace}.bench_meta (k text PRIMARY KEY, v text)")
        meta = {"users": args.users, "entries": args.entries, "authors": args.authors,
                "baseline_users": args.baseline_users, "tweets_per_author": args.tweets_per_author}
        session.execute(f"INSERT INTO {settings.keyspace}.bench_meta (k, v) VALUES ('meta', %s)", (json.dumps(meta),))
    finally:
        cluster.shutdown()
    meta["populate_s"] = round(time.monotonic() - started, 1)
    return meta


def read_meta(settings: Settings) -> dict | None:
    from feed_service.store.session import connect

    cluster, session = connect(settings)
    try:
        row = session.execute(f"SELECT v FROM {settings.keyspace}.bench_meta WHERE k = 'meta'").one()
        return json.loads(row.v) if row else None
    except Exception:
        return None
    finally:
        cluster.shutdown()


# -- the baseline store --------------------------------------------------------------------
class FanoutStore:
    """``TimelineStore`` whose ``page`` runs the join at read time: followees, their tweets, merge."""

    def __init__(self, settings: Settings) -> None:
        from feed_service.store.cassandra_reader import CassandraReader

        self.reader = CassandraReader.connect(settings)
        ks, p = settings.keyspace, self.reader.session.prepare
        self._followees = p(f"SELECT followee_id FROM {ks}.follows_by_follower WHERE follower_id = ?")
        self._by_author = p(f"SELECT tweet_id, author_id, created_at, version, text, profile_version"
                            f" FROM {ks}.tweets_by_author WHERE author_id = ? LIMIT ?")

    async def page(self, timeline_id, *, before, limit, timeout):
        from feed_service.core.rows import Entry

        followees = await self.reader._execute(self._followees, (timeline_id,), timeout)
        per_author = await asyncio.gather(*(self.reader._execute(self._by_author, (f[0], limit), timeout)
                                            for f in followees))
        rows = heapq.nlargest(limit, (r for rs in per_author for r in rs), key=lambda r: (r[2], r[0]))
        return [Entry(*r) for r in rows]

    async def inbox(self, timeline_id, *, before, limit, timeout):
        """:meth:`page`, with no pull author (the server's home read asks for both at once)."""
        from feed_service.store.ports import InboxSlice

        return InboxSlice(await self.page(timeline_id, before=before, limit=limit, timeout=timeout), [])

    def __getattr__(self, name):  # tweet, profile(s), newer, close: the materialized reader's
        return getattr(self.reader, name)


def serve_baseline(settings: Settings, port: int) -> None:
    from feed_service.server.app import TimelineServer
    from feed_service.server.config import ServerConfig
    from feed_service.server.logs import configure_json_logging

    configure_json_logging("WARNING")
    async def main() -> None:
        # a generous Cassandra timeout: the baseline is measured by its latency, not by its timeouts
        # no change topic: a read cache in front of FanoutStore would measure the cache, not the join
        no_feed = {"change_feed": False} if "change_feed" in ServerConfig.__dataclass_fields__ else {}
        # no rate limit: a bench over the per-principal limit would measure refusals (docs/api.md#limits)
        no_limit = {"rate_limit_per_s": 0.0} if "rate_limit_per_s" in ServerConfig.__dataclass_fields__ else {}
        config = ServerConfig(host="127.0.0.1", port=port, metrics_port=None, auth_secret=BENCH_SECRET.encode(),
                              request_timeout_s=30.0, settings=settings, **no_feed, **no_limit)
        server = TimelineServer(config, store=FanoutStore(settings))
        await server.start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop(1.0)

    asyncio.run(main())


# -- the floor: gRPC and the driver without the service ------------------------------------
def serve_floor(settings: Settings, port: int, reads: int, workers: int) -> None:
    """``workers`` processes of a bare grpc.aio GetHomeTimeline on ``port`` (SO_REUSEPORT): a canned
    20-entry response (``reads`` 0), or entries built from ``reads`` Cassandra reads through the
    project's ``CassandraReader`` (1: the inbox slice; 2: ``pull_follows``, then the slice)."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_floor_worker, args=(settings, port, reads)) for _ in range(workers)]
    for proc in procs:
        proc.start()
    signal.signal(signal.SIGTERM, lambda *_: [os.kill(p.pid, signal.SIGTERM) for p in procs if p.pid])
    for proc in procs:
        proc.join()


def _floor_worker(settings: Settings, port: int, reads: int, tls: tuple[str, str, str] | None = None) -> None:
    """One floor process; ``tls``: (certificate chain, key, client CA or "") files, served as the read
    service serves them (``feed_service.server.tls``; a client CA: mutual TLS)."""
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from feed_service.api import timeline_pb2 as pb
    from feed_service.api import timeline_pb2_grpc as pb_grpc
    from feed_service.store.cassandra_reader import CassandraReader

    def entry(e) -> pb.TimelineEntry:
        return pb.TimelineEntry(tweet_id=e.tweet_id, author_id=e.author_id, created_at_ms=e.created_at,
                                version=e.version, text=e.text or "", profile_version=e.profile_version)

    canned = pb.GetHomeTimelineResponse(entries=[
        pb.TimelineEntry(tweet_id=f"t{i}-1", author_id=f"a{i}", created_at_ms=1_700_000_000_000 + i, version=1,
                         text="x" * 100, profile_version=1, author_display_name=f"Author {i}") for i in range(20)])

    class Floor(pb_grpc.TimelineServiceServicer):
        def __init__(self, reader) -> None:
            self.reader = reader

        async def GetHomeTimeline(self, request, context):
            if not reads:
                return canned
            if reads > 1:
                await self.reader.pull_authors(request.user_id, timeout=2.0)
            rows = await self.reader.page(request.user_id, before=None, limit=request.page_size + 1, timeout=2.0)
            return pb.GetHomeTimelineResponse(entries=[entry(e) for e in rows[:request.page_size]])

    async def main() -> None:
        reader = await asyncio.to_thread(CassandraReader.connect, settings) if reads else None
        server = grpc.aio.server(options=[("grpc.so_reuseport", 1)])
        pb_grpc.add_TimelineServiceServicer_to_server(Floor(reader), server)
        checks = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(checks, server)
        if tls:
            from feed_service.server.config import ServerConfig
            from feed_service.server.tls import server_credentials

            server.add_secure_port(f"127.0.0.1:{port}", server_credentials(
                ServerConfig(tls_cert_file=tls[0], tls_key_file=tls[1], client_ca_file=tls[2])))
        else:
            server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await checks.set("", health_pb2.HealthCheckResponse.SERVING)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop(1.0)
        if reader is not None:
            reader.close()

    asyncio.run(main())


# -- servers of this tree or of another revision ---------------------------------------------
def revision_tree(rev: str, dest: Path) -> Path:
    """The server of git revision ``rev``, runnable from ``dest``: its packages, ``proto`` and ``schemas``
    (``git archive``: the checkout is not touched), package data copied and gRPC stubs
    generated as the editable install does (setup.py). Returns ``dest``."""
    from grpc_tools import protoc

    tar = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "feed_service", "spark_jobs", "proto", "schemas"],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(dest, filter="data")
    for tree in ("proto", "schemas"):
        shutil.copytree(dest / tree, dest / "feed_service" / "_data" / tree)
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        if protoc.main(["grpc_tools.protoc", f"-I{dest / 'proto'}", f"-I{include}", f"--python_out={tmp}",
                        f"--grpc_python_out={tmp}", str(dest / "proto" / "feed/v1/timeline.proto")]) != 0:
            raise RuntimeError(f"protoc failed on the proto of {rev}")
        for suffix in ("_pb2.py", "_pb2_grpc.py"):
            text = Path(tmp, "feed", "v1", f"timeline{suffix}").read_text()
            (dest / "feed_service" / "api" / f"timeline{suffix}").write_text(
                text.replace("from feed.v1 import ", "from feed_service.api import "))
    return dest


def start_server(tree: Path, port: int, workers: int, keyspace: str, server_env: dict[str, str]) -> subprocess.Popen:
    """``feedctl serve --workers N`` of the package in ``tree`` (this checkout or a revision_tree)."""
    env = {**os.environ, "FEED_AUTH_SECRET": BENCH_SECRET, "FEED_KEYSPACE": keyspace,
           "FEED_GRPC_HOST": "127.0.0.1", "FEED_GRPC_PORT": str(port), "FEED_METRICS_PORT": "0",
           "FEED_LOG_LEVEL": "WARNING", "FEED_CHANGE_FEED": "0",
           "FEED_RATE_LIMIT_PER_S": "0",  # a bench over the per-principal limit would measure refusals
           **server_env,
           "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    return subprocess.Popen([sys.executable, "-m", "feed_service", "serve", "--workers", str(workers)],
                            env=env, cwd=tree)


def stop_server(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


# -- load generation -----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the server's workers), from /proc."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return pids


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of ``pids`` (processes that are gone count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def cassandra_pid() -> int | None:
    """The local stack's Cassandra (``feedctl stack up``), to account its CPU per request."""
    from feed_service.stack.config import StackConfig
    from feed_service.stack.process import ServiceProcess

    home = StackConfig.from_env().data_dir / "cassandra"
    return ServiceProcess("cassandra", home / "cassandra.pid", home / "cassandra.log").pid()


def measured(run, server_pid: int) -> dict:
    """``run()``'s figures plus the CPU each party spent per OK request: the gRPC server's
    processes, the local Cassandra and the load generator (a child process of this one)."""
    cass = cassandra_pid()
    server = _process_tree(server_pid)
    load_before = os.getloadavg()
    before = (_cpu_seconds(server), _cpu_seconds([cass]) if cass else 0.0, os.times())
    result = run()
    after = (_cpu_seconds(server), _cpu_seconds([cass]) if cass else 0.0, os.times())
    result["load_average"] = {"before": [round(x, 2) for x in load_before],
                              "after": [round(x, 2) for x in os.getloadavg()]}
    ok = (result.get("codes") or {}).get("OK", result.get("count", 0))
    if ok:
        per = lambda seconds: round(seconds * 1e6 / ok)  # noqa: E731
        result["cpu_us_per_request"] = {
            "server": per(after[0] - before[0]),
            "cassandra": per(after[1] - before[1]) if cass else None,
            "load_generator": per((after[2].children_user + after[2].children_system)
                                  - (before[2].children_user + before[2].children_system)),
        }
    return result


def wait_serving(port: int, timeout: float = 60, tls: Any = None) -> None:
    """Until the server on ``port`` is SERVING; ``tls``: the ``ClientTLS`` of a TLS server (None: plaintext)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from feed_service.server.client_channel import ClientTLS, channel_for

    deadline = time.monotonic() + timeout
    with channel_for(f"127.0.0.1:{port}", tls or ClientTLS()) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise TimeoutError(f"server on port {port} never became SERVING")


def ghz_path() -> str | None:
    return shutil.which("ghz") or next((str(p) for p in [Path.home() / "go" / "bin" / "ghz"] if p.exists()), None)


def _cut_at_end(error: str) -> bool:
    return "transport is closing" in error or "use of closed network connection" in error


def run_ghz(ghz: str, port: int, users: list[str], token: str, *, concurrency: int, duration: float,
            rate: int = 0, connections: int = 4) -> dict:
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.json"
        data.write_text(json.dumps([{"user_id": u, "page_size": PAGE_SIZE} for u in users]))
        # a compiled descriptor set: ghz's .proto parser predates proto3 `optional` fields
        protoset = Path(tmp) / "timeline.protoset"
        if protoc.main(["protoc", f"-I{REPO / 'proto'}", "--include_imports", f"--descriptor_set_out={protoset}",
                        "feed/v1/timeline.proto"]) != 0:
            raise RuntimeError("protoc could not build the descriptor set for ghz")
        cmd = [ghz, "--insecure", "--protoset", str(protoset), "--call", "feed.v1.TimelineService.GetHomeTimeline",
               "-D", str(data), "-m", json.dumps({"authorization": f"Bearer {token}"}),
               "-c", str(concurrency), "--connections", str(connections), "-z", f"{duration}s",
               "--rps", str(rate), "--format", "json", "--skipFirst", str(min(200, concurrency * 4)),
               f"127.0.0.1:{port}"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if not out.stdout.strip():
        raise RuntimeError(f"ghz failed: {out.stderr}")
    report = json.loads(out.stdout)
    lat = {d["percentage"]: d["latency"] / 1e6 for d in report.get("latencyDistribution") or []}
    codes = dict(report.get("statusCodeDistribution", {}))
    # ghz ends a timed run by closing its connections: calls in flight then fail on the client with
    # "transport is closing" or "use of closed network connection" (UNAVAILABLE) without an answer
    # from the server. They are not server errors; count them apart.
    cut = sum(n for err, n in (report.get("errorDistribution") or {}).items() if _cut_at_end(err))
    if cut:
        codes["Unavailable"] = codes.get("Unavailable", 0) - cut
        codes = {code: n for code, n in codes.items() if n}
        codes["cut at end of run"] = cut
    errors = {err: n for err, n in (report.get("errorDistribution") or {}).items() if not _cut_at_end(err)}
    return {"tool": "ghz", "qps": round(report["rps"], 1), "p50_ms": round(lat.get(50, float("nan")), 2),
            "p99_ms": round(lat.get(99, float("nan")), 2), "count": report["count"], "codes": codes,
            "concurrency": concurrency, "rate": rate or "max", **({"errors_seen": errors} if errors else {})}


def _py_worker(port: int, users: list[str], token: str, concurrency: int, duration: float, queue) -> None:
    import grpc

    from feed_service.api import timeline_pb2 as pb
    from feed_service.api import timeline_pb2_grpc as pb_grpc

    async def main() -> None:
        latencies, errors = [], 0
        md = (("authorization", f"Bearer {token}"),)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.TimelineServiceStub(channel)
            end = time.perf_counter() + duration

            async def loop() -> None:
                nonlocal errors
                rng = random.Random()
                while time.perf_counter() < end:
                    t = time.perf_counter()
                    try:
                        await stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=rng.choice(users),
                                                                             page_size=PAGE_SIZE), metadata=md)
                        latencies.append(time.perf_counter() - t)
                    except grpc.RpcError:
                        errors += 1

            await asyncio.gather(*(loop() for _ in range(concurrency)))
        queue.put((latencies, errors))

    asyncio.run(main())


def run_python_load(port: int, users: list[str], token: str, *, concurrency: int, duration: float,
                    processes: int = 2) -> dict:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    per = max(1, concurrency // processes)
    procs = [ctx.Process(target=_py_worker, args=(port, users, token, per, duration, queue)) for _ in range(processes)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    latencies = sorted(x for r in results for x in r[0])
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 100 else [float("nan")] * 99
    return {"tool": "python-grpc.aio", "qps": round(len(latencies) / duration, 1), "p50_ms": round(q[49] * 1000, 2),
            "p99_ms": round(q[98] * 1000, 2), "count": len(latencies), "errors": sum(r[1] for r in results),
            "concurrency": concurrency, "rate": "max"}


def load(port: int, users: list[str], token: str, *, concurrency: int, duration: float, rate: int = 0) -> dict:
    ghz = ghz_path()
    if ghz:
        return run_ghz(ghz, port, users, token, concurrency=concurrency, duration=duration, rate=rate)
    return run_python_load(port, users, token, concurrency=concurrency, duration=duration)


# -- main ----------------------------------------------------------------------------------
def _row(name: str, r: dict) -> str:
    cpu = r.get("cpu_us_per_request") or {}
    load = r.get("load_average")
    loads = f"{load['before'][0]:.1f} -> {load['after'][0]:.1f}" if load else ""
    parts = "/".join(str(cpu.get(k, "-")) for k in ("server", "cassandra", "load_generator")) if cpu else ""
    return (f"{name:<40} {r['qps']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8}  {parts:>16}  {loads:>12}  "
            f"{r.get('codes', r.get('errors'))}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keyspace", default="feed_bench")
    parser.add_argument("--users", type=int, default=100_000, help="materialized timelines (default 100000)")
    parser.add_argument("--entries", type=int, default=25, help="entries per timeline (default 25)")
    parser.add_argument("--authors", type=int, default=5_000)
    parser.add_argument("--tweets-per-author", type=int, default=20)
    parser.add_argument("--baseline-users", type=int, default=100, help="users per followee count")
    parser.add_argument("--skip-populate", action="store_true", help="reuse the data of an earlier run")
    parser.add_argument("--populate-only", action="store_true", help="populate, then stop")
    parser.add_argument("--workers", type=int, default=2, help="feedctl serve --workers (default 2)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per materialized run")
    parser.add_argument("--baseline-duration", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rate", type=int, default=1500, help="fixed-rate run (requests/s; 0 = skip)")
    parser.add_argument("--before", metavar="REV", help="also run the server of git revision REV, alternately")
    parser.add_argument("--rounds", type=int, default=None,
                        help="runs of each server, alternating (default 2 with --before, else 1)")
    parser.add_argument("--server-env", action="append", default=[], metavar="K=V",
                        help="server setting (e.g. FEED_CHANGE_FEED=1: with the read cache)")
    parser.add_argument("--floor", action="store_true", help="also measure bare gRPC (+ 1 and 2 driver reads)")
    parser.add_argument("--skip-fanout", action="store_true", help="skip the fan-out-on-read baseline")
    parser.add_argument("--out", help="also write the figures as JSON to this file")
    parser.add_argument("--serve-baseline", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--serve-floor", type=int, nargs=2, metavar=("PORT", "READS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    settings = replace(Settings.from_env(), keyspace=args.keyspace)
    if args.serve_baseline:
        serve_baseline(settings, args.serve_baseline)
        return 0
    if args.serve_floor:
        serve_floor(settings, args.serve_floor[0], args.serve_floor[1], args.workers)
        return 0

    from feed_service.server import auth

    meta = read_meta(settings) if args.skip_populate else None
    if meta is None:
        print(f"populating {args.keyspace}: {args.users} users x {args.entries} entries, {args.authors} authors,"
              f" baseline {args.baseline_users} users x {FOLLOWEE_COUNTS} followees", flush=True)
        meta = populate(settings, args)
        print(f"populated in {meta['populate_s']}s", flush=True)
    if args.populate_only:
        return 0
    token = auth.mint(BENCH_SECRET.encode(), subject="bench", role="service", ttl_s=3600)
    rng = random.Random(7)
    users = [f"u{rng.randrange(meta['users'])}" for _ in range(20_000)]
    server_env = dict(kv.split("=", 1) for kv in args.server_env)
    results: dict = {"data": meta, "load_generator": "ghz" if ghz_path() else "python-grpc.aio",
                     "cpus": os.cpu_count(), "workers": args.workers, "server_env": server_env, "runs": []}
    rows: list[tuple[str, dict]] = []

    def record(name: str, result: dict) -> dict:
        results["runs"].append({"name": name, **result})
        rows.append((name, result))
        print(_row(name, result), flush=True)
        return result

    def measure_server(name: str, server: subprocess.Popen, port: int) -> None:
        if args.rate:
            record(f"{name} @ {args.rate}/s", measured(
                lambda: load(port, users, token, concurrency=max(args.concurrency, 64), duration=args.duration,
                             rate=args.rate), server.pid))
        record(f"{name} (max)", measured(
            lambda: load(port, users, token, concurrency=args.concurrency, duration=args.duration), server.pid))

    with tempfile.TemporaryDirectory(prefix="bench-grpc-") as tmp:
        trees = [("uncached", REPO)]
        if args.before:
            trees.insert(0, (f"uncached, {args.before}", revision_tree(args.before, Path(tmp))))
        servers: list[tuple[str, subprocess.Popen, int]] = []
        try:
            for name, tree in trees:
                port = free_port()
                servers.append((name, start_server(tree, port, args.workers, args.keyspace, server_env), port))
            for name, server, port in servers:
                wait_serving(port)
                load(port, users, token, concurrency=args.concurrency, duration=3)  # warm-up: caches, JIT of the JVM
            for _ in range(args.rounds or (2 if args.before else 1)):
                for name, server, port in servers:
                    measure_server(name, server, port)
        finally:
            for _, server, _ in servers:
                stop_server(server)

    if args.floor:
        for reads, name in ((0, "floor: canned response"), (1, "floor: canned + 1 driver read"),
                            (2, "floor: canned + 2 driver reads")):
            port = free_port()
            floor = subprocess.Popen([sys.executable, __file__, "--keyspace", args.keyspace, "--workers",
                                      str(args.workers), "--serve-floor", str(port), str(reads)], cwd=REPO)
            try:
                wait_serving(port)
                load(port, users, token, concurrency=args.concurrency, duration=3)
                record(f"{name} (max)", measured(
                    lambda: load(port, users, token, concurrency=args.concurrency, duration=args.duration),
                    floor.pid))
            finally:
                stop_server(floor)

    if not args.skip_fanout:
        port = free_port()
        baseline = subprocess.Popen([sys.executable, __file__, "--keyspace", args.keyspace, "--serve-baseline",
                                     str(port)], cwd=REPO)
        try:
            wait_serving(port)
            for k in FOLLOWEE_COUNTS:
                followers = [f"f{k}-{u}" for u in range(meta["baseline_users"])]
                load(port, followers, token, concurrency=4, duration=2)
                results[f"fanout_{k}"] = record(f"fan-out-on-read, {k} followees",
                                                load(port, followers, token, concurrency=4,
                                                     duration=args.baseline_duration))
        finally:
            stop_server(baseline)

    results["load_average"] = os.getloadavg()
    print("\nGetHomeTimeline, 20-entry pages, %s users, load: %s, server workers: %d, CPUs: %s, load average: %s%s"
          % (meta["users"], results["load_generator"], args.workers, os.cpu_count(),
             " ".join(f"{x:.1f}" for x in os.getloadavg()),
             f", server env: {server_env}" if server_env else ""))
    print(f"{'run':<40} {'QPS':>8} {'p50 ms':>8} {'p99 ms':>8}  {'CPU us/request':>16}  {'load 1 min':>12}  status codes")
    print(f"{'':<40} {'':>8} {'':>8} {'':>8}  {'srv/cass/loadgen':>16}  {'start -> end':>12}")
    for name, r in rows:
        print(_row(name, r))
    m = next((r for name, r in rows if name == "uncached (max)"), None)
    f200 = results.get("fanout_200")
    if m and f200 and f200["qps"] > 0 and m["qps"] > 0:
        results["speedup_qps_vs_fanout_200"] = round(m["qps"] / f200["qps"], 1)
        results["speedup_p50_vs_fanout_200"] = round(f200["p50_ms"] / m["p50_ms"], 1)
        print(f"materialized vs fan-out at 200 followees: {results['speedup_qps_vs_fanout_200']}x QPS,"
              f" {results['speedup_p50_vs_fanout_200']}x lower p50")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
        print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
