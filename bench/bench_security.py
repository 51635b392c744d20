"""What security costs (docs/security.md#what-it-costs), each part on private stacks of its own.

    flock /tmp/team/bench.lock .venv/bin/python bench/bench_security.py stream [--tweets 20000] [--rounds 2]
    flock /tmp/team/bench.lock .venv/bin/python bench/bench_security.py read -- --rounds 2 \\
        --only floor,floor-tls,floor-mtls,hit,hit-tls,hit-mtls,hit-limited,connect,connect-tls,connect-mtls

``stream``: two single-node stacks side by side in a temporary folder, one plaintext
(``StackConfig.with_free_ports``) and one secured (``secure=True``: Kafka on SASL_SSL with SCRAM
logins, Cassandra with TLS and password logins; Spark runs in local mode on one node, so there is
no Spark RPC to encrypt), each provisioned as the stack's admin. On each, alternately (plain,
secure, plain, secure ... for ``--rounds``), bench_stream.py's throughput phase: a graph where each
of ``--authors`` authors has ``--fanout`` followers streamed first, then a backlog of ``--tweets``
tweets published at once; the time until the stream has caught up gives tweets/s and timeline
inserts/s. Each run has its own topics, keyspace and checkpoint (dropped after it) and the stream
process gets its stack's environment (``StackConfig.environment()``, the security variables
included). Printed per run: tweets/s, inserts/s, the CPU of the stream's process tree, of the
broker and of Cassandra per tweet over the catch-up window, the load average; then each round's
secure/plain ratios. Both stacks are stopped at the end (``--keep`` keeps their folder).

``read``: one plaintext single-node stack of its own, then bench_read_cost.py (the arguments after
``--``) against it: the read bench's servers make their own TLS (bench_read_cost.py's docstring),
so the stack needs none. The stack is stopped at the end.

Nothing is asserted. Run it alone on the machine (``flock /tmp/team/bench.lock``, load below 1.5).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from feed_service.stack.config import StackConfig  # noqa: E402
from feed_service.stack.local_stack import LocalStack  # noqa: E402


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def private_stacks(root: Path, secure: dict[str, bool]) -> dict[str, tuple[StackConfig, LocalStack]]:
    """A single-node stack per name in ``root``/<name> on ports no other holds (each config's free
    ports are checked against the ones before it: the kernel reports them free until a node binds)."""
    configs: dict[str, StackConfig] = {}
    taken: set[int] = set()
    for name, is_secure in secure.items():
        for _ in range(20):
            config = StackConfig.with_free_ports(root / name, secure=is_secure)
            ports = {config.kafka_port, config.kafka_controller_port, config.cassandra_port,
                     config.cassandra_storage_port, config.spark_master_port, config.spark_webui_port}
            if not ports & taken:
                break
        else:
            raise RuntimeError("no disjoint free ports for the stacks")
        taken |= ports
        configs[name] = config
    return {name: (config, LocalStack(config)) for name, config in configs.items()}


def up(stacks: dict[str, tuple[StackConfig, LocalStack]]) -> None:
    """Start every stack side by side (their JVMs boot in parallel) and provision nothing yet."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(stacks)) as pool:
        futures = {name: pool.submit(stack.up) for name, (_, stack) in stacks.items()}
        for name, future in futures.items():
            future.result()
            print(f"stack {name} up ({time.monotonic() - started:.0f}s): kafka {stacks[name][0].kafka_bootstrap},"
                  f" cassandra port {stacks[name][0].cassandra_port}, secure {stacks[name][0].secure}", flush=True)


def down(stacks: dict[str, tuple[StackConfig, LocalStack]]) -> None:
    for name, (_, stack) in stacks.items():
        try:
            stack.down()
        except Exception as exc:  # noqa: BLE001 - clean-up: the other stacks still go down
            print(f"  (stack {name}: could not stop: {exc})", flush=True)


# -- stream -------------------------------------------------------------------------------------
def stream_part(args: argparse.Namespace, root: Path) -> int:
    from bench_stream import throughput
    from isolated import drop

    from feed_service.security.roles import ADMIN

    stacks = private_stacks(root, {"plain": False, "secure": True})
    workdir = root / "logs"
    workdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    try:
        up(stacks)
        print(f"bench_security stream: {args.rounds} round(s) of plain, secure; {args.tweets:,} tweets to"
              f" {args.fanout} followers each ({args.authors} authors, {args.users:,} users);"
              f" logs in {workdir}; load average {_load()}", flush=True)
        for rnd in range(1, args.rounds + 1):
            for name in ("plain", "secure"):
                config, stack = stacks[name]
                pids = {"kafka": stack.kafka.process.pid(), "cassandra": stack.cassandra.process.pid()}
                load0 = os.getloadavg()[0]
                r = throughput(config.settings(keyspace="bench"), args, workdir,
                               env=config.environment(), side_pids={k: v for k, v in pids.items() if v})
                load1 = os.getloadavg()[0]
                drop(r.pop("settings").as_role(ADMIN))  # the next run's stack holds no leftovers
                r.update(stack=name, round=rnd, load=(load0, load1))
                rows.append(r)
                print(f"[{name} #{rnd}] {r['tweets_per_s']:,.0f} tweets/s, {r['inserts_per_s']:,.0f} timeline"
                      f" inserts/s ({r['rows']:,} rows in {r['seconds']:.1f}s, {r['batches']} batches);"
                      f" CPU per tweet: stream {_us(r, 'cpu_s')}, kafka {_us(r, 'kafka_cpu_s')},"
                      f" cassandra {_us(r, 'cassandra_cpu_s')} us; load {load0:.2f} -> {load1:.2f}", flush=True)
    finally:
        down(stacks)
    print_stream(rows, args)
    return 0


def _us(r: dict, key: str) -> str:
    return f"{1e6 * r[key] / r['events']:,.0f}" if key in r else "-"


def print_stream(rows: list[dict], args: argparse.Namespace) -> None:
    print(f"\n==== stream throughput, plaintext vs secured single-node stack: {args.tweets:,} tweets x fan-out"
          f" {args.fanout} (load average at the end {_load()})")
    print(f"{'run':<12} {'tweets/s':>9} {'inserts/s':>10} {'seconds':>8} {'batches':>7} {'stream us/tw':>12}"
          f" {'kafka us/tw':>11} {'cass us/tw':>10}  load 1m")
    for r in rows:
        print(f"{r['stack'] + ' #' + str(r['round']):<12} {r['tweets_per_s']:>9,.0f} {r['inserts_per_s']:>10,.0f}"
              f" {r['seconds']:>8.1f} {r['batches']:>7} {_us(r, 'cpu_s'):>12} {_us(r, 'kafka_cpu_s'):>11}"
              f" {_us(r, 'cassandra_cpu_s'):>10}  {r['load'][0]:.2f} -> {r['load'][1]:.2f}")
    by = {(r["stack"], r["round"]): r for r in rows}
    for rnd in sorted({r["round"] for r in rows}):
        plain, secure = by.get(("plain", rnd)), by.get(("secure", rnd))
        if plain and secure:
            print(f"round {rnd}: secure / plain: tweets/s {secure['tweets_per_s']:,.0f} / {plain['tweets_per_s']:,.0f}"
                  f" = {secure['tweets_per_s'] / plain['tweets_per_s']:.2f}; inserts/s"
                  f" {secure['inserts_per_s']:,.0f} / {plain['inserts_per_s']:,.0f}"
                  f" = {secure['inserts_per_s'] / plain['inserts_per_s']:.2f}; catch-up"
                  f" {secure['seconds']:.1f}s / {plain['seconds']:.1f}s")


# -- read ---------------------------------------------------------------------------------------
def read_part(args: argparse.Namespace, root: Path, rest: list[str]) -> int:
    stacks = private_stacks(root, {"plain": False})
    config, _ = stacks["plain"]
    try:
        up(stacks)
        # the stack's folder too: bench_read_cost finds its Cassandra's pid there (StackConfig.from_env)
        env = {**os.environ, **config.environment(), "FEED_STACK_DIR": str(config.data_dir)}
        print(f"bench_security read: bench_read_cost.py {' '.join(rest)}; load average {_load()}", flush=True)
        return subprocess.run([sys.executable, str(REPO / "bench" / "bench_read_cost.py"), *rest], env=env,
                              cwd=REPO).returncode
    finally:
        down(stacks)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rest: list[str] = []
    if "--" in argv:
        argv, rest = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("part", choices=("stream", "read"))
    parser.add_argument("--rounds", type=int, default=2, help="stream: plain then secure, this many times")
    parser.add_argument("--tweets", type=int, default=20_000, help="stream: the backlog of each run")
    parser.add_argument("--fanout", type=int, default=50, help="stream: followers per author")
    parser.add_argument("--authors", type=int, default=200)
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--keep", action="store_true", help="keep the stacks' folder (logs) at the end")
    args = parser.parse_args(argv)
    from isolated import exit_on_sigterm

    exit_on_sigterm()  # a killed run still stops its stacks
    root = Path(tempfile.mkdtemp(prefix="bench-security-"))
    print(f"stacks and logs in {root}", flush=True)
    try:
        return stream_part(args, root) if args.part == "stream" else read_part(args, root, rest)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
