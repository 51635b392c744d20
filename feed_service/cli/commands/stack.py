"""``feedctl stack up|down|status``: the local Kafka + Cassandra (+ Spark jars) on loopback."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict

from feed_service.settings import Settings
from feed_service.stack.config import StackConfig


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("stack", help="start, stop or inspect the local Kafka + Cassandra stack")
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--no-provision", action="store_true", help="up: skip topics and schema")
    parser.add_argument("--json", action="store_true", help="status: machine-readable output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from feed_service.stack.local_stack import LocalStack, StackError

    config = StackConfig.load(StackConfig.from_env().data_dir) or StackConfig.from_env()
    if args.action == "up":
        config = StackConfig.from_env()
    stack = LocalStack(config)
    if args.action == "up":
        try:
            timings = stack.up()
        except StackError as exc:
            print(f"stack up failed: {exc}", file=sys.stderr)
            return 1
        for step, seconds in timings.items():
            print(f"  {step:<22} {seconds:6.1f}s")
        if not args.no_provision:
            from feed_service.ops.provision import provision

            started = time.monotonic()
            for report in provision(Settings.from_env()):
                print(f"  topic {report}")
            print(f"  {'provision':<22} {time.monotonic() - started:6.1f}s (topics, keyspace, tables)")
        print(f"stack up: kafka {config.kafka_bootstrap}, cassandra {config.host}:{config.cassandra_port}")
        return 0
    if args.action == "down":
        stopped = stack.down()
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    statuses = stack.status()
    if args.json:
        print(json.dumps([asdict(s) for s in statuses]))
    else:
        for s in statuses:
            state = f"running (pid {s.pid})" if s.running else "stopped"
            print(f"{s.name:<10} {state:<22} {s.endpoint:<22} log: {s.log_file}")
    return 0 if all(s.running for s in statuses) else 3
