"""Move a stopped stream to another number of state partitions (``feedctl reshard``).

A checkpoint pins its state partitions at creation (:mod:`spark_jobs.checkpoint`). Two routes change
them without losing or repeating a change (docs/streaming.md, "State partitions"):

- ``repartition`` (default): Spark's offline state repartition
  (``StreamingCheckpointManager.repartition``, experimental in Spark 4.2) rewrites the RocksDB state
  of the last committed batch into N partitions as one extra batch that reads nothing and writes
  nothing; the stream restarts on the same checkpoint, from the same offsets. It needs the last batch
  committed: a batch that was interrupted would otherwise be skipped, and its half-written rows could
  differ from the ones its replay writes (same timestamps, other contents).
- ``backfill``: a backfill (docs/backfill.md) into a folder next to the checkpoint, then a new
  checkpoint that the stream bootstraps from it with N partitions. Slower (it rewrites the whole view
  in Cassandra) but independent of the old checkpoint's logs: the fallback when the offline
  repartition refuses or fails.

Both refuse, before any Spark session, a checkpoint another process holds
(:class:`~spark_jobs.checkpoint.CheckpointLock`) or whose progress file is still being rewritten.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Sequence, get_args

from feed_service.errors import CheckpointError, FeedError
from feed_service.settings import Settings, check_state_partitions
from spark_jobs.checkpoint import (
    CheckpointInfo, CheckpointLock, inspect_checkpoint, query_dir, recent_progress,
)
from spark_jobs.job_cli import job_main, refused

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("feed.reshard")

Route = Literal["repartition", "backfill"]
ROUTES: tuple[Route, ...] = get_args(Route)


@dataclass(frozen=True, slots=True)
class ReshardOptions:
    checkpoint: Path
    """The stream's ``--checkpoint`` folder."""
    partitions: int
    via: Route = "repartition"
    new_checkpoint: Path | None = None
    """Backfill route: the new checkpoint (default ``<checkpoint>-p<N>``, next to the old one)."""
    out: Path | None = None
    """Backfill route: the backfill folder (default ``<new checkpoint>.backfill``)."""

    def new_checkpoint_path(self) -> Path:
        return self.new_checkpoint or self.checkpoint.with_name(f"{self.checkpoint.name}-p{self.partitions}")

    def backfill_path(self) -> Path:
        new = self.new_checkpoint_path()
        return self.out or new.with_name(f"{new.name}.backfill")


@dataclass(frozen=True, slots=True)
class ReshardResult:
    before: int
    after: int
    seconds: float
    via: Route
    checkpoint: Path
    """The checkpoint the stream continues with: the same one, or the new one (backfill route)."""
    stream_command: tuple[str, ...]
    """What the operator runs next."""

    def describe(self) -> str:
        return (f"{self.before} -> {self.after} state partitions in {self.seconds:.1f}s (via {self.via});"
                f" next: {' '.join(self.stream_command)}")


def check_reshard(options: ReshardOptions) -> CheckpointInfo:
    """The checkpoint's logs if ``options`` can proceed; :class:`CheckpointError` (or
    :class:`ConfigError` for N) if not. No Spark; the caller holds the checkpoint's lock."""
    check_state_partitions(options.partitions)
    checkpoint = options.checkpoint
    if not query_dir(checkpoint).is_dir():
        raise CheckpointError(f"{checkpoint} is not a stream checkpoint (no {query_dir(checkpoint).name}/ folder)")
    age = recent_progress(checkpoint)
    if age is not None:
        raise CheckpointError(f"checkpoint {checkpoint} looks in use: its progress.json was rewritten {age:.0f}s"
                              " ago; stop the stream (and retry in a few seconds)")
    info = inspect_checkpoint(checkpoint)
    if info.is_new:
        raise CheckpointError(f"checkpoint {checkpoint} has no batch yet: nothing to reshard (a new checkpoint"
                              " takes --state-partitions or FEED_STATE_PARTITIONS at its first start)")
    if options.via == "repartition" and not info.cleanly_committed:
        raise CheckpointError(
            f"the last batch ({info.last_batch}) of checkpoint {checkpoint} is not committed (offsets/"
            f"{info.last_batch} without commits/{info.last_batch}): the stream stopped in the middle of a batch;"
            " start it again, stop it once it has caught up, then reshard (or use --via backfill)")
    if options.via == "backfill":
        new = options.new_checkpoint_path()
        if new.resolve() == checkpoint.resolve() or not inspect_checkpoint(new).is_new:
            raise CheckpointError(f"--new-checkpoint {new} must be a new checkpoint folder")
    return info


def repartition_checkpoint(spark: "SparkSession", checkpoint: Path, partitions: int) -> int:
    """Spark's offline state repartition of the stopped stream ``checkpoint``; returns the batch id
    of the repartition batch. :class:`CheckpointError` with Spark's reason if it refuses or fails."""
    # The RocksDB state reader reports to the StateStoreCoordinator, which only exists once the
    # session's StreamingQueryManager does; without it every state load fails ("Cannot find
    # endpoint: StateStoreCoordinator").
    spark.streams.active
    try:
        spark._streamingCheckpointManager.repartition(str(query_dir(checkpoint)), partitions, True)
    except Exception as exc:  # noqa: BLE001 - py4j's error of a JVM exception, translated once here
        java = getattr(exc, "java_exception", None)
        if java is None:
            raise
        first = (str(java.getMessage() or java).splitlines() or ["(no message)"])[0]
        raise CheckpointError(f"Spark's state repartition of {checkpoint} failed: {first}") from None
    info = inspect_checkpoint(checkpoint)
    if info.state_partitions != partitions or not info.cleanly_committed:
        raise CheckpointError(f"after the repartition {checkpoint} reports {info.state_partitions} partitions and"
                              f" last batch {info.last_batch} (commit {info.last_commit}); expected {partitions},"
                              " committed")
    assert info.last_batch is not None
    return info.last_batch


def reshard(spark: "SparkSession", settings: Settings, options: ReshardOptions, info: CheckpointInfo) -> ReshardResult:
    """Run the route of ``options`` on a checkpoint :func:`check_reshard` accepted (lock held)."""
    before = info.state_partitions or 0
    started = time.monotonic()
    if options.via == "repartition":
        batch = repartition_checkpoint(spark, options.checkpoint, options.partitions)
        log.info("repartition batch %d committed in %s", batch, options.checkpoint)
        command = ("feedctl", "stream", "--checkpoint", str(options.checkpoint))
        return ReshardResult(before, options.partitions, time.monotonic() - started, "repartition",
                             options.checkpoint, command)
    from spark_jobs.backfill import BackfillOptions, run_backfill

    new, out = options.new_checkpoint_path().resolve(), options.backfill_path().resolve()
    run_backfill(spark, settings, BackfillOptions(out=out))
    new.mkdir(parents=True, exist_ok=True)
    command = ("feedctl", "stream", "--checkpoint", str(new), "--bootstrap-from", str(out),
               "--state-partitions", str(options.partitions))
    return ReshardResult(before, options.partitions, time.monotonic() - started, "backfill", new, command)


def run_reshard(settings: Settings, options: ReshardOptions) -> ReshardResult | None:
    """Check, lock, build a session and reshard; None if the checkpoint already has N partitions.

    Every refusal (:class:`FeedError`) happens before the Spark session starts.
    """
    from feed_service.stack.spark import build_session

    check_state_partitions(options.partitions)
    if not query_dir(options.checkpoint).is_dir():
        check_reshard(options)  # raises with the reason; no lock file left in a wrong folder
    with CheckpointLock.acquire(options.checkpoint, "feedctl reshard"):
        info = check_reshard(options)
        if info.state_partitions == options.partitions:
            return None
        spark = build_session("feed-reshard", shuffle_partitions=options.partitions)
        try:
            return reshard(spark, settings, options, info)
        finally:
            spark.stop()


# --- command line ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, required=True, help="the stopped stream's checkpoint folder")
    parser.add_argument("--partitions", type=int, required=True, help="state partitions to move to (1-4096)")
    parser.add_argument("--via", choices=ROUTES, default="repartition",
                        help="repartition: Spark's offline state repartition, in place (default; needs the last"
                             " batch committed); backfill: a backfill and a new checkpoint bootstrapped from it")
    parser.add_argument("--new-checkpoint", type=Path, default=None,
                        help="--via backfill: the new checkpoint folder (default CHECKPOINT-pN)")
    parser.add_argument("--out", type=Path, default=None,
                        help="--via backfill: the backfill folder (default NEW_CHECKPOINT.backfill)")


def options_from_args(args: argparse.Namespace) -> ReshardOptions:
    return ReshardOptions(checkpoint=args.checkpoint.resolve(), partitions=args.partitions, via=args.via,
                          new_checkpoint=args.new_checkpoint, out=args.out)


def run(settings: Settings, options: ReshardOptions) -> int:
    """The command: 0 when done (or nothing to do), :data:`~spark_jobs.job_cli.EXIT_REFUSED` with one
    line on stderr when a :class:`FeedError` stops it."""
    try:
        result = run_reshard(settings, options)
    except FeedError as exc:
        return refused("reshard", exc)
    if result is None:
        print(f"feedctl reshard: {options.checkpoint} already has {options.partitions} state partitions;"
              " nothing to do", file=sys.stderr)
        return 0
    print(f"feedctl reshard: {options.checkpoint}: {result.describe()}", file=sys.stderr)
    if result.via == "backfill":
        print(f"feedctl reshard: the stream continues on the new checkpoint {result.checkpoint} (the old one"
              f" {options.checkpoint} is no longer used; keep it until the new stream has committed a batch)",
              file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("reshard", __doc__.splitlines()[0], add_arguments,
                    lambda settings, args: run(settings, options_from_args(args)), argv)


if __name__ == "__main__":
    sys.exit(main())
