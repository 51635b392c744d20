"""Continuing a new stream checkpoint from a completed backfill (``feedctl stream --bootstrap-from``):
the backfill's snapshot offsets, engine states, per-reader states and clock (its manifest:
spark_jobs/bootstrap.py)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from feed_service.errors import CheckpointError, ConfigError
from feed_service.security.roles import STREAM
from feed_service.settings import Settings
from spark_jobs.bootstrap import BOOTSTRAP_BATCH_ID, PER_READER_SCHEMA, load_bootstrap
from spark_jobs.stream.options import StreamOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from feed_service.store.stage_inputs import StageInputs

log = logging.getLogger("feed.stream")


def continue_from_backfill(settings: Settings, options: StreamOptions) -> tuple[StreamOptions, dict[str, Any]]:
    """Options and :func:`~spark_jobs.stream.query.start_stream` arguments to continue from the backfill
    of ``options.bootstrap_from`` (its engine states as ``state_path``, its per-reader stage's inputs as
    ``per_reader_path`` and its list stage's as ``list_inputs_path``, to read once a session exists:
    :func:`seed_per_reader_inputs`).

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
    options = replace(options, starting_offsets=boot.starting_offsets)
    log.info("bootstrapping from backfill %s: clock start %d, offsets %s", boot.folder, boot.clock_start,
             boot.starting_offsets)
    return options, {"state_path": boot.state_path, "per_reader_path": boot.per_reader_path,
                     "list_inputs_path": boot.list_inputs_path, "clock_start": boot.clock_start}


#: Per-reader inputs per save call on an executor (the store writes them concurrently).
SEED_CHUNK = 2000


def seed_per_reader_inputs(spark: "SparkSession", settings: Settings, path: Path, clock_start: int, *,
                           inputs_for: Callable[[Settings], "StageInputs"] | None = None,
                           stage_name: Callable[[int], str] | None = None) -> int:
    """Save the backfill's per-reader stage inputs (``identity, value`` parquet at ``path``) as this
    checkpoint's (stage :func:`~spark_jobs.stream.per_reader.state_stage` of ``clock_start``; the list
    stage's with ``stage_name`` :func:`~spark_jobs.stream.per_reader.list_stage_name`) at batch
    :data:`~spark_jobs.bootstrap.BOOTSTRAP_BATCH_ID`, from the executors; returns the inputs saved.

    Run before the query starts, at every start that bootstraps (only a checkpoint without a
    committed batch may): batch 0, or a replay of it, then restores the stage from the backfill's
    inputs, whatever a failed earlier attempt saved (its rows say batch 0 and hold the seed as
    ``previous``; a new seed overwrites them with the same value).
    """
    import json
    import pickle

    from spark_jobs.stream.per_reader import state_stage

    if inputs_for is None:
        from spark_jobs.cassandra_writers import inputs_for
    stream_settings = settings.as_role(STREAM)
    stage = (stage_name or state_stage)(clock_start)

    def save(rows: Iterable[Any]) -> Iterator[int]:
        store = inputs_for(stream_settings)
        saved = 0
        chunk: list[tuple[tuple[str, ...], Any, None]] = []
        for row in rows:
            chunk.append((tuple(json.loads(row["identity"])), pickle.loads(bytes(row["value"])), None))
            if len(chunk) >= SEED_CHUNK:
                saved += store.save(stage, chunk, BOOTSTRAP_BATCH_ID).rows
                chunk = []
        if chunk:
            saved += store.save(stage, chunk, BOOTSTRAP_BATCH_ID).rows
        yield saved

    inputs = spark.read.schema(PER_READER_SCHEMA).parquet(str(path))
    return sum(inputs.rdd.mapPartitions(save).collect())


def _has_commits(checkpoint: Path) -> bool:
    commits = checkpoint / "join" / "commits"
    return commits.is_dir() and any(not f.name.startswith(".") for f in commits.iterdir())
