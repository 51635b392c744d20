"""Continuing a new stream checkpoint from a completed backfill (``feedctl stream --bootstrap-from``):
the backfill's snapshot offsets, engine states and clock (its manifest: spark_jobs/bootstrap.py)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from feed_service.errors import CheckpointError, ConfigError
from feed_service.settings import Settings
from spark_jobs.bootstrap import load_bootstrap
from spark_jobs.stream.options import DEFAULT_OPERATOR, StreamOptions
from spark_jobs.timeline_join import INITIAL_STATE_OPERATORS

log = logging.getLogger("feed.stream")


def continue_from_backfill(settings: Settings, options: StreamOptions) -> tuple[StreamOptions, dict[str, Any]]:
    """Options and :func:`~spark_jobs.stream.query.start_stream` arguments to continue from the backfill
    of ``options.bootstrap_from`` (its engine states as ``state_path``, to read once a session exists).

    Refuses a checkpoint that already committed a batch (:class:`CheckpointError`: its state and
    offsets are the truth then), an unusable backfill (:class:`BootstrapError`) and an inbox cap
    other than the backfill's (:class:`ConfigError`).
    """
    assert options.bootstrap_from is not None
    if _has_commits(options.checkpoint):
        raise CheckpointError(f"--bootstrap-from needs a new checkpoint; {options.checkpoint} already has"
                              " committed batches (restart it without --bootstrap-from)")
    boot = load_bootstrap(options.bootstrap_from, settings)
    if settings.inbox_cap != boot.inbox_cap:
        raise ConfigError(f"inbox cap {settings.inbox_cap} (--inbox-cap or FEED_INBOX_CAP) differs from the"
                          f" backfill's {boot.inbox_cap}")
    operator = options.operator if options.operator in INITIAL_STATE_OPERATORS else DEFAULT_OPERATOR
    options = replace(options, starting_offsets=boot.starting_offsets, operator=operator)
    log.info("bootstrapping from backfill %s: clock start %d, offsets %s", boot.folder, boot.clock_start,
             boot.starting_offsets)
    return options, {"state_path": boot.state_path, "clock_start": boot.clock_start}


def _has_commits(checkpoint: Path) -> bool:
    commits = checkpoint / "join" / "commits"
    return commits.is_dir() and any(not f.name.startswith(".") for f in commits.iterdir())
