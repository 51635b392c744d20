"""``feedctl stream``: run the streaming join (Kafka -> Spark stateful join -> Cassandra) until stopped."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from spark_jobs.stream.cli import add_arguments

    parser = sub.add_parser("stream", help="run the streaming join until SIGTERM/SIGINT")
    add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from feed_service.settings import Settings
    from spark_jobs.stream.cli import options_from_args
    from spark_jobs.stream.runner import run as run_stream

    return run_stream(Settings.from_env().as_role("stream"), options_from_args(args), status_file=args.status_file)
