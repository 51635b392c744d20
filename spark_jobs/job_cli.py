"""The command-line frame the two Spark jobs share (``python -m spark_jobs.stream``, ``... backfill``).

A job refuses to start with one line on stderr and exit code :data:`EXIT_REFUSED` when a
:class:`~feed_service.errors.FeedError` stops it before it runs (an invalid setting, a checkpoint
or backfill folder it cannot use): an operator's mistake, not a crash to page anyone about. A fatal
error while it runs (a missing Cassandra grant, the stream's lost input: spark_jobs/fatal.py) ends
it the same way: a deployment to mend, which no restart would (docs/operations.md).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable, Sequence

from feed_service.errors import FeedError
from feed_service.settings import Settings

EXIT_REFUSED = 2


def refused(job: str, error: FeedError) -> int:
    """Report ``error`` as ``feedctl JOB: message`` and return :data:`EXIT_REFUSED`."""
    print(f"feedctl {job}: {error}", file=sys.stderr)
    return EXIT_REFUSED


def job_main(job: str, description: str, add_arguments: Callable[[argparse.ArgumentParser], None],
             run: Callable[[Settings, argparse.Namespace], int], argv: Sequence[str] | None) -> int:
    """Parse ``argv``, set up logging, read the settings from the environment and ``run`` the job."""
    parser = argparse.ArgumentParser(prog=job, description=description)
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_env()
    except FeedError as exc:
        return refused(job, exc)
    return run(settings, args)
