"""Move a stopped stream to another number of state partitions (``feedctl reshard``).

A checkpoint pins its state partitions at creation (:mod:`spark_jobs.checkpoint`). Two routes change
them without losing or repeating a change (docs/streaming.md, "State partitions"):

- ``repartition`` (default): Spark's offline state repartition
  (``StreamingCheckpointManager.repartition``, experimental in Spark 4.2) rewrites the RocksDB state
  of the last committed batch into N partitions as one extra batch that reads nothing and writes
  nothing; the stream restarts on the same checkpoint, from the same offsets. It needs the last batch
  committed: a batch that was interrupted would otherwise be skipped, and its half-written rows could
  differ from the ones its replay writes (same timestamps, other contents). ``--finish-pending``
  first runs the stream once with ``--until-caught-up`` (a child process, same checkpoint and
  settings), which re-runs that batch with its logged offsets and ends with every batch committed.
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
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
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

#: Progress file of the stream ``--finish-pending`` runs: not the stream's default ``progress.json``,
#: whose fresh rewrite would make the check that follows refuse the checkpoint as in use.
FINISH_STATUS_NAME = "finish-pending.progress.json"

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
    finish_pending: bool = False
    """Repartition route: when the last batch is not committed, run the stream ``--until-caught-up``
    first (:func:`finish_pending`) instead of refusing."""

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
    finished_batch: int | None = None
    """The uncommitted last batch that ``--finish-pending`` ran to its commit first, if any."""
    finish_seconds: float = 0.0

    def describe(self) -> str:
        finished = ("" if self.finished_batch is None else
                    f"finished pending batch {self.finished_batch} and caught up in {self.finish_seconds:.1f}s, then ")
        return (f"{finished}{self.before} -> {self.after} state partitions in {self.seconds:.1f}s (via {self.via});"
                f" next: {' '.join(self.stream_command)}")


def check_reshard(options: ReshardOptions) -> CheckpointInfo:
    """The checkpoint's logs if ``options`` can proceed; :class:`CheckpointError` (or
    :class:`ConfigError` for N) if not. An uncommitted last batch passes only with ``finish_pending``
    (for :func:`finish_pending` to run first). No Spark; the caller holds the checkpoint's lock."""
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
    if options.via == "repartition":  # the stream would refuse a retired operator's after the move
        from spark_jobs.stream.pinned import refuse_retired_operator

        refuse_retired_operator(checkpoint)
    if options.via == "repartition" and not info.cleanly_committed:
        pending = (f"the last batch ({info.last_batch}) of checkpoint {checkpoint} is not committed (offsets/"
                   f"{info.last_batch} without commits/{info.last_batch}): the stream stopped in the middle of a"
                   " batch")
        if not options.finish_pending:
            raise CheckpointError(f"{pending}; add --finish-pending to finish it first (runs the stream until"
                                  " caught up: needs Kafka and Cassandra), or use --via backfill")
        if info.last_commit is None:
            # Batch 0 of a bootstrapped checkpoint needs the backfill's initial state, which only the
            # stream's own --bootstrap-from can give it.
            raise CheckpointError(f"{pending}, and none of its batches committed yet: start the stream as before"
                                  " (with its --bootstrap-from, if any) until it commits a batch, then reshard")
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


def finish_command(checkpoint: Path) -> list[str]:
    """The stream job that finishes a pending batch: ``feedctl stream``'s module with the availableNow
    trigger, no periodic state statistics (a pass over the state that nobody would read) and no
    metrics endpoint (the stopped stream's port stays free for its restart)."""
    return [sys.executable, "-m", "spark_jobs.stream", "--checkpoint", str(checkpoint), "--until-caught-up",
            "--state-stats-interval", "0", "--metrics-port", "0", "--status-file", str(checkpoint / FINISH_STATUS_NAME)]


def finish_pending(settings: Settings, checkpoint: Path) -> CheckpointInfo:
    """Run the stream on ``checkpoint`` until caught up, as a child process with ``settings`` in its
    environment; the checkpoint's logs afterwards. :class:`CheckpointError` if it failed or its last
    batch is still not committed.

    The child takes the checkpoint's lock itself (the caller must not hold it) and re-runs the
    uncommitted batch with its logged offsets: the same bounds as the interrupted run, so the same
    write timestamps for the same rows (docs/streaming.md, "State partitions").
    """
    child = subprocess.Popen(finish_command(checkpoint), env={**os.environ, **settings.to_env()})
    try:
        code = child.wait()
    except BaseException:
        # Ctrl-C reached the child too (same process group); let it stop the way a stream stops.
        child.send_signal(signal.SIGTERM)
        child.wait()
        raise
    info = inspect_checkpoint(checkpoint)
    if code != 0 or not info.cleanly_committed:
        raise CheckpointError(f"the stream run to finish the pending batch of {checkpoint} ended with exit code"
                              f" {code}, last batch {info.last_batch}, last commit {info.last_commit} (its log"
                              " above; it needs the Kafka and Cassandra of the settings); nothing was resharded")
    return info


def _changes_layout(settings: Settings, options: ReshardOptions) -> bool:
    """Whether the backfill route would give the new checkpoint another state layout than the old
    one's (docs/state-buckets.md): how a checkpoint of one state per key moves to state buckets, even
    at the same number of partitions. The in-place repartition keeps the layout."""
    from spark_jobs.stream.pinned import recorded_state_buckets

    return options.via == "backfill" and recorded_state_buckets(options.checkpoint) != settings.state_buckets


def run_reshard(settings: Settings, options: ReshardOptions) -> ReshardResult | None:
    """Check, lock, build a session and reshard; None if the checkpoint already has N partitions (and,
    by the backfill route, the layout of ``settings.state_buckets``).

    With ``finish_pending``, an uncommitted last batch is first finished by :func:`finish_pending`
    (the lock is released meanwhile: the stream takes it) and everything is checked again after it.
    Every refusal (:class:`FeedError`) happens before the reshard's Spark session starts.
    """
    from spark_jobs.runtime.session import build_session

    check_state_partitions(options.partitions)
    if not query_dir(options.checkpoint).is_dir():
        check_reshard(options)  # raises with the reason; no lock file left in a wrong folder
    finished: tuple[int, float] | None = None
    if options.finish_pending and options.via == "repartition":
        with CheckpointLock.acquire(options.checkpoint, "feedctl reshard"):
            info = check_reshard(options)
        if info.state_partitions == options.partitions:
            return None
        if not info.cleanly_committed:
            assert info.last_batch is not None
            log.info("last batch %d of %s is not committed: running the stream until caught up first",
                     info.last_batch, options.checkpoint)
            started = time.monotonic()
            finish_pending(settings, options.checkpoint)
            finished = (info.last_batch, time.monotonic() - started)
    with CheckpointLock.acquire(options.checkpoint, "feedctl reshard"):
        info = check_reshard(replace(options, finish_pending=False))
        if info.state_partitions == options.partitions and not _changes_layout(settings, options):
            return None
        spark = build_session("feed-reshard", shuffle_partitions=options.partitions)
        try:
            result = reshard(spark, settings, options, info)
        finally:
            spark.stop()
    if finished is not None:
        result = replace(result, finished_batch=finished[0], finish_seconds=finished[1])
    return result


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
    parser.add_argument("--finish-pending", action="store_true",
                        help="--via repartition: if the stream stopped in the middle of a batch, first run it with"
                             " --until-caught-up on the same checkpoint and settings (needs their Kafka and"
                             " Cassandra) instead of refusing")


def options_from_args(args: argparse.Namespace) -> ReshardOptions:
    return ReshardOptions(checkpoint=args.checkpoint.resolve(), partitions=args.partitions, via=args.via,
                          new_checkpoint=args.new_checkpoint, out=args.out, finish_pending=args.finish_pending)


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
