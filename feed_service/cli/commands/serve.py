"""``feedctl serve``: the gRPC timeline read service; ``feedctl token``: mint a bearer token for it.

``feedctl serve`` reads its configuration from defaults < config file (``--config`` or FEED_CONFIG)
< environment < flags (``feed_service.server.config`` lists every setting), refuses to start without
an auth secret unless ``--demo`` / FEED_DEMO_MODE=1 (then: a random secret for this run and a
printed service token), and drains in-flight calls on SIGTERM/SIGINT. ``--workers N`` runs N server
processes on one port (SO_REUSEPORT) to use more than one core.

``feedctl token --user U`` / ``--service NAME`` prints a token signed with the configured secret.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import multiprocessing
import os
import secrets
import signal
import sys
from typing import Any

from feed_service.cli.arg_types import port as _port
from feed_service.cli.arg_types import positive_int as _positive


def register(sub: Any) -> None:
    """Add the ``serve`` and ``token`` parsers to the ``feedctl`` subcommands."""
    parser = sub.add_parser("serve", help="run the gRPC timeline read service (feed.v1.TimelineService)",
                            description="Serve feed.v1.TimelineService, health and reflection over gRPC.")
    parser.add_argument("--config", metavar="FILE.toml", help="config file (default: $FEED_CONFIG)")
    parser.add_argument("--host", help="listen address (FEED_GRPC_HOST, default 0.0.0.0)")
    parser.add_argument("--port", type=_port, help="listen port (FEED_GRPC_PORT, default 50051)")
    parser.add_argument("--metrics-port", type=_port, help="Prometheus port, 0 = off (FEED_METRICS_PORT, default 9464)")
    parser.add_argument("--demo", action="store_true", default=None,
                        help="local demo only: random auth secret for this run, print a service token")
    parser.add_argument("--workers", type=_positive, default=1,
                        help="server processes sharing the port (SO_REUSEPORT; default 1)")
    parser.set_defaults(handler=run_serve)

    token = sub.add_parser("token", help="mint a bearer token for the gRPC service",
                           description="Print a bearer token signed with the configured auth secret.")
    who = token.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", metavar="USER_ID", help="a user token: reads only USER_ID's timeline")
    who.add_argument("--service", metavar="NAME", help="a service token: reads any timeline")
    token.add_argument("--ttl", type=_positive, default=3600, help="validity in seconds (default 3600)")
    token.add_argument("--config", metavar="FILE.toml", help="config file (default: $FEED_CONFIG)")
    token.set_defaults(handler=run_token)


def _load(args: argparse.Namespace, overrides: dict[str, Any]):
    from feed_service.server.config import load_config

    return load_config(path=args.config, overrides=overrides)


def run_token(args: argparse.Namespace) -> int:
    from feed_service.server import auth
    from feed_service.server.config import ConfigError

    try:
        config = _load(args, {})
    except ConfigError as exc:
        print(f"feedctl token: {exc}", file=sys.stderr)
        return 2
    if config.auth_secret is None:
        print("feedctl token: no auth secret (FEED_AUTH_SECRET, FEED_AUTH_SECRET_FILE or the config file);"
              " a --demo server prints its own token", file=sys.stderr)
        return 2
    role, subject = ("user", args.user) if args.user else ("service", args.service)
    print(auth.mint(config.auth_secret, subject=subject, role=role, ttl_s=args.ttl))
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from feed_service.server import auth
    from feed_service.server.config import ConfigError
    from feed_service.server.logs import configure_json_logging

    overrides = {"host": args.host, "port": args.port, "metrics_port": args.metrics_port, "demo": args.demo}
    try:
        config = _load(args, overrides).validated()
    except ConfigError as exc:
        print(f"feedctl serve: {exc}", file=sys.stderr)
        return 2
    configure_json_logging(config.log_level)
    if config.auth_secret is None:  # demo mode: one random secret for every worker of this run
        config = dataclasses.replace(config, auth_secret=secrets.token_bytes(32))
        token = auth.mint(config.auth_secret, subject="demo", role="service", ttl_s=24 * 3600)
        print(f"DEMO MODE: random auth secret for this run. Service token (24 h):\n{token}", flush=True)
    if args.workers == 1:
        return asyncio.run(_serve(config, reuse_port=False))
    if config.port == 0:
        print("feedctl serve: --workers needs a fixed --port", file=sys.stderr)
        return 2
    return _run_workers(config, args.workers)


async def _serve(config, *, reuse_port: bool, metrics: bool = True) -> int:
    from feed_service.server.app import TimelineServer

    if not metrics:
        config = dataclasses.replace(config, metrics_port=None)
    server = TimelineServer(config, reuse_port=reuse_port)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
    return 0


def _worker(config, index: int) -> None:
    from feed_service.server.logs import configure_json_logging

    configure_json_logging(config.log_level)
    # only the first worker serves /metrics (one port); the others count for themselves only
    sys.exit(asyncio.run(_serve(config, reuse_port=True, metrics=index == 0)))


def _run_workers(config, count: int) -> int:
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_worker, args=(config, i), name=f"feed-serve-{i}") for i in range(count)]
    for w in workers:
        w.start()

    def forward(signum: int, _frame: Any) -> None:
        for w in workers:
            if w.pid is not None and w.is_alive():
                os.kill(w.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for w in workers:
        w.join()
    return max((w.exitcode or 0) for w in workers)
