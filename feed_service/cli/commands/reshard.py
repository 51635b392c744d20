"""``feedctl reshard --checkpoint DIR --partitions N``: move a stopped stream to N state partitions.

A checkpoint pins its state partitions when it is created; this changes them without losing or
repeating a change, in place with Spark's offline state repartition or through a backfill and a new
checkpoint (``--via backfill``). ``--finish-pending`` first runs the stream until caught up when the
stop interrupted a batch. Design and figures: docs/streaming.md, "State partitions".
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from spark_jobs.reshard import add_arguments

    parser = sub.add_parser("reshard", help="move a stopped stream's checkpoint to another number of state partitions",
                            description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from feed_service.settings import Settings
    from spark_jobs.reshard import options_from_args, run as run_reshard

    return run_reshard(Settings.from_env().as_role("stream"), options_from_args(args))
