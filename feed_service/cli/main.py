"""``feedctl``: one entry point, one module per subcommand under ``feed_service.cli.commands``.

Each command module exposes ``register(subparsers)`` which adds its parser and sets
``handler`` (a callable ``(args) -> int``). Keeping them apart lets each adapter be
imported lazily, so ``feedctl materialize`` never pays for importing pyspark. This is the one
place errors become exit codes: a configuration, pipeline, stack or grant error is printed on one line
with exit code 2; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from feed_service.errors import ConfigError, PipelineError, StackError, StorePermissionDenied

#: Subcommand modules, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "stack",
    "topics",
    "provision",
    "materialize",
    "publish",
    "schema",
    "workload",
    "stream",
    "serve",
    "health",
    "backfill",
    "reshard",
    "state_stats",
    "demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="feedctl", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"feed_service.cli.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"feed_service.cli.commands.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        logging.getLogger("cassandra").setLevel(logging.WARNING)  # driver start-up chatter
    try:
        return int(args.handler(args) or 0)
    except (ConfigError, PipelineError, StackError, StorePermissionDenied) as exc:
        # What the user can act on (a setting, a checkpoint, the local stack, a role's grants): one line, exit 2.
        print(f"feedctl {args.command}: {exc}", file=sys.stderr)
        return 2
