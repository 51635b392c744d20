"""``feedctl backfill --out DIR``: rebuild the timelines from the changelog topics (Spark batch job).

Writes Cassandra in place (idempotent, timestamped writes: docs/backfill.md) and leaves in ``DIR`` the
engine states and ``manifest.json`` that ``feedctl stream --bootstrap-from DIR`` continues from.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from spark_jobs.backfill import add_arguments

    parser = sub.add_parser("backfill", help="rebuild the timelines from the changelog topics (batch)",
                            description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from feed_service.settings import Settings
    from spark_jobs.backfill import options_from_args, run as run_backfill

    return run_backfill(Settings.from_env().as_role("backfill"), options_from_args(args))
