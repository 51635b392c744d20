"""``feedctl stack up|down|status|env``: the local Kafka + Cassandra (+ Spark jars) on loopback.

``--topology cluster`` runs three Kafka brokers, three Cassandra nodes and a Spark standalone master
with two workers instead (docs/cluster.md); ``env`` prints the ``export`` lines that point the CLI,
the jobs and the server at the running stack (needed for a cluster: its settings are not the defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import asdict, replace

from feed_service.settings import Settings
from feed_service.stack.config import TOPOLOGIES, StackConfig


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("stack", help="start, stop or inspect the local Kafka + Cassandra stack")
    parser.add_argument("action", choices=("up", "down", "status", "env", "rotate-certs"),
                        help="rotate-certs: issue every node's and client's certificate again from the stack's "
                             "CA, then restart the nodes one at a time (docs/security.md)")
    parser.add_argument("--topology", choices=TOPOLOGIES, default=None,
                        help="one node per service (single, the default: .stack/local) or a replicated "
                             "cluster on 127.0.0.1-3 (cluster: .stack/cluster, its own ports); also "
                             "FEED_STACK_TOPOLOGY")
    parser.add_argument("--secure", action=argparse.BooleanOptionalAction, default=None,
                        help="up: TLS and logins on every link, a role per component (docs/security.md); the "
                             "cluster topology's default, an opt-in for the single-node stack (also FEED_STACK_SECURE)")
    parser.add_argument("--no-restart", action="store_true",
                        help="rotate-certs: only issue the certificates (the nodes load them at their next start)")
    parser.add_argument("--no-provision", action="store_true", help="up: skip topics and schema")
    parser.add_argument("--json", action="store_true", help="status: machine-readable output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from feed_service.stack.local_stack import LocalStack, StackError

    wanted = StackConfig.from_env(topology=args.topology)
    if args.secure is not None:
        wanted = replace(wanted, secure=args.secure)
    recorded = StackConfig.load(wanted.data_dir)
    config = recorded or wanted
    if args.action == "up":
        config = wanted
        if recorded is not None and recorded.secure != config.secure and any(s.running for s in LocalStack(recorded).status()):
            print(f"stack up failed: the running stack in {recorded.data_dir} is "
                  f"{'secured' if recorded.secure else 'plaintext'}; `feedctl stack down` first", file=sys.stderr)
            return 1
        if recorded is not None and recorded.topology != config.topology and any(
                s.running for s in LocalStack(recorded).status()):
            print(f"stack up failed: a {recorded.topology} stack is running in {recorded.data_dir}; "
                  f"`feedctl stack down --topology {recorded.topology}` first", file=sys.stderr)
            return 1
    if args.action == "env":
        for name, value in config.environment().items():
            print(f"export {name}={shlex.quote(value)}")
        return 0
    stack = LocalStack(config)
    if args.action == "rotate-certs":
        return _rotate(stack, restart=not args.no_restart)
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
            settings = Settings.from_env({**os.environ, **config.environment()}).as_role("admin")
            for report in provision(settings):
                print(f"  topic {report}")
            print(f"  {'provision':<22} {time.monotonic() - started:6.1f}s (topics, keyspace, tables)")
        print(f"stack up ({config.topology}): kafka {config.kafka_bootstrap}, cassandra "
              f"{','.join(config.hosts)}:{config.cassandra_port}"
              + (f", spark {config.spark_master_url}" if config.spark_master_url else ""))
        if config.topology != "single":
            print("point the CLI, jobs and server at it with:  eval \"$(feedctl stack env --topology cluster)\"")
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


def _rotate(stack, *, restart: bool) -> int:
    """Issue the stack's certificates again (new keys, same names, same CA) and restart its nodes one
    at a time, each back and healthy before the next: a cluster keeps serving throughout."""
    from feed_service.stack.local_stack import StackError
    from feed_service.stack.rolling import rolling_restart
    from feed_service.stack.stack_secrets import StackSecrets

    if not stack.config.secure:
        print("stack rotate-certs: this stack is not secured (no certificates)", file=sys.stderr)
        return 1
    rotated = StackSecrets(stack.config).ca.rotate()
    print(f"issued again: {', '.join(rotated)}")
    if restart:
        try:
            for name, seconds in rolling_restart(stack).items():
                print(f"  {name:<22} {seconds:6.1f}s")
        except StackError as exc:
            print(f"stack rotate-certs: {exc}", file=sys.stderr)
            return 1
    print("read servers load the new certificate when they restart (a rollout on Kubernetes)")
    return 0
