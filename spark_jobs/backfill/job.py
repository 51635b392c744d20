"""The backfill job: rebuild the timelines from the compacted changelog topics.

:func:`run_backfill` runs the stages in order (one module each in this package) and writes the
manifest last; :func:`run` and :func:`main` are the command line (``feedctl backfill``,
``python -m spark_jobs.backfill``). Design and figures: docs/backfill.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence, TextIO

from feed_service.errors import ConfigError, FeedError
from feed_service.security.roles import BACKFILL
from feed_service.settings import Settings
from spark_jobs.fatal import fatal_error
from spark_jobs.job_cli import job_main, refused
from spark_jobs.backfill.join import count_timelines, join_timelines_batch
from spark_jobs.backfill.lists import list_stage, write_list_inputs
from spark_jobs.backfill.per_reader import per_reader_stage, write_per_reader_inputs
from spark_jobs.backfill.progress import Progress, format_summary
from spark_jobs.backfill.read import classify, count_records, read_snapshot, send_dead_letters, valid_events
from spark_jobs.backfill.snapshot import snapshot_offsets
from spark_jobs.backfill.states import engine_states, messages_of, winner_events, write_states
from spark_jobs.backfill.winners import winning_changes
from spark_jobs.backfill.write import tables_to_write, write_table
from spark_jobs.bootstrap import (
    LIST_INPUTS_DIR, MANIFEST_NAME, PER_READER_DIR, STATE_DIR, Manifest, build_manifest, holds_completed_backfill, write_manifest,
)
from spark_jobs.envelope import parse_changes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Spark's console progress bar off: :class:`~spark_jobs.backfill.progress.Progress` reports stages
#: and tasks on stderr itself.
SESSION_CONF = {"spark.ui.showConsoleProgress": "false"}
#: Exit code of a backfill refused before or while running (bad option, folder, topics).


@dataclass(frozen=True, slots=True)
class BackfillOptions:
    """How to run one backfill; the view's shape (inbox cap) comes from the settings."""

    out: Path
    write: bool = True
    dead_letters: bool = False
    backfill_ts: int | None = None
    """Write timestamp of every row (µs since epoch); None = now."""
    all_inboxes: bool = False
    """Lay out every inbox; by default the inboxes of readers inactive for ``FEED_INACTIVE_AFTER_S``
    (by the stream's ``reader_activity``) are left out and flagged dropped (docs/activity.md#backfill)."""
    settings_changes: Mapping[str, Any] = field(default_factory=dict)
    """Settings given on the command line (``--inbox-cap``): :func:`run` applies them with
    :meth:`Settings.replace`, validated before any Spark session; :func:`run_backfill` ignores them."""


@dataclass(frozen=True, slots=True)
class BackfillResult:
    manifest: Manifest
    """The manifest exactly as ``manifest.json`` holds it."""

    @property
    def summary(self) -> dict[str, Any]:
        return self.manifest["summary"]


def check_out(out: Path) -> None:
    """Create ``out`` unless it already holds a completed backfill (:class:`ConfigError`: a bad ``--out``)."""
    if holds_completed_backfill(out):
        raise ConfigError(f"{out} already holds a completed backfill ({MANIFEST_NAME}); choose a new --out")
    out.mkdir(parents=True, exist_ok=True)


def run_backfill(spark: "SparkSession", settings: Settings, options: BackfillOptions,
                 *, out: TextIO = sys.stderr) -> BackfillResult:
    """Run every stage (docs/backfill.md); returns the manifest written to ``options.out``.

    The inbox cap is ``settings.inbox_cap``; the stream bootstrapped from this backfill must use the
    same. Authors with at least ``settings.pull_threshold`` active followers are laid out as pull
    authors (docs/fan-out.md); the engine states record it, so a stream with another threshold
    moves each author over at its next batch.
    """
    from pyspark import StorageLevel

    out_dir = options.out.resolve()
    check_out(out_dir)
    backfill_ts = options.backfill_ts if options.backfill_ts is not None else time.time_ns() // 1000
    inbox_cap, pull_threshold = settings.inbox_cap, settings.pull_threshold
    progress = Progress(spark, out)
    persisted: list[DataFrame] = []

    def keep(df: "DataFrame") -> "DataFrame":
        persisted.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    summary: dict[str, Any] = {"backfill_ts": backfill_ts, "inbox_cap": inbox_cap, "pull_threshold": pull_threshold,
                               "pull_reposters": settings.pull_reposters}
    with progress:
        try:
            with progress.stage("snapshot"):
                snap = snapshot_offsets(settings)
                for line in snap.describe():
                    progress.say(f"  {line}")

            with progress.stage("read"):
                parsed = keep(classify(parse_changes(read_snapshot(spark, settings, snap))))
                counts = count_records(parsed, snap.end)
                for partition in counts.partitions:
                    progress.say(f"  {partition.describe()}")
                summary.update(counts.summary())
                if options.dead_letters and counts.invalid:
                    send_dead_letters(parsed, settings)
                    progress.say(f"  {counts.invalid} invalid records sent to {settings.topic('dead_letter')}")

            with progress.stage("winners"):
                winners = winning_changes(valid_events(parsed)).map(keep)
                summary["entities"] = winners.count()
                progress.say("  " + ", ".join(f"{k} {v}" for k, v in summary["entities"].items()))

            with progress.stage("lists"):
                list_path = out_dir / LIST_INPUTS_DIR
                lists = list_stage(spark, winners, backfill_ts)
                winners = winners.with_list_edges(keep(lists.follows), keep(lists.exclusions))
                summary["lists"] = write_list_inputs(lists, list_path)
                progress.say("  " + ", ".join(f"{k} {v}" for k, v in summary["lists"].items()) + f" -> {list_path}")

            with progress.stage("states"):
                state_path = out_dir / STATE_DIR
                engine = keep(engine_states(winner_events(winners), inbox_cap=inbox_cap,
                                            pull_threshold=pull_threshold, backfill_ts=backfill_ts))
                summary["keys"] = write_states(spark, engine, state_path)
                progress.say(f"  {summary['keys']} author keys -> {state_path}")

            with progress.stage("per_reader"):
                per_reader_path = out_dir / PER_READER_DIR
                messages = messages_of(engine)
                per_reader = per_reader_stage(spark, messages, backfill_ts, settings.reposter_threshold,
                                              lists.done.facts)
                summary["per_reader"] = write_per_reader_inputs(per_reader, per_reader_path)
                progress.say("  " + ", ".join(f"{k} {v}" for k, v in summary["per_reader"].items())
                             + f" -> {per_reader_path}")

            with progress.stage("join"):
                timelines = join_timelines_batch(winners, inbox_cap, pull_threshold)
                summary["timelines"] = count_timelines(winners, inbox_cap)
                progress.say(f"  {summary['timelines']} non-empty timelines")
                inactive = set() if options.all_inboxes else inactive_readers(settings, backfill_ts)
                if inactive:
                    timelines = without_inboxes(spark, timelines, inactive)
                summary["inactive_readers"] = len(inactive)
                if inactive:
                    progress.say(f"  {len(inactive)} inactive readers' inboxes left out (--all-inboxes lays them out)")

            with progress.stage("write" if options.write else "count (--no-write)"):
                reports = []
                for table, df in tables_to_write(spark, timelines, winners, inbox_cap=inbox_cap,
                                                 pull_threshold=pull_threshold, per_reader=per_reader,
                                                 lists=lists):
                    reports.append(write_table(settings, table, df, backfill_ts, write=options.write))
                    progress.say(f"  {reports[-1].describe(written=options.write)}")
                if options.write:
                    mark_readers(settings, inactive, kept_all=options.all_inboxes, backfill_ts=backfill_ts)
                summary["rows"] = {r.table: r.rows for r in reports}
                summary["write_seconds"] = {r.table: round(r.seconds, 2) for r in reports}
                summary["written"] = options.write

            with progress.stage("manifest"):
                # The summary is final here: the manifest is its record, nothing changes it later.
                summary["stage_seconds"] = dict(progress.durations)
                summary["duration_seconds"] = progress.elapsed()
                manifest = write_manifest(out_dir, build_manifest(
                    settings, backfill_ts=backfill_ts, start_offsets=snap.start, end_offsets=snap.end,
                    summary=summary))
        finally:
            for df in persisted:
                df.unpersist()
    print(format_summary(summary), file=out, flush=True)
    return BackfillResult(manifest)


def inactive_readers(settings: Settings, backfill_ts: int) -> set[str]:
    """The readers the stream has recorded as inactive, or whose last read is older than the window
    at ``backfill_ts`` (µs); none with ``FEED_INACTIVE_AFTER_S=0``. A reader without a record counts
    as read now, as the stream counts one it first writes (docs/activity.md#backfill)."""
    if not settings.inactive_after_s:
        return set()
    from feed_service.store.cassandra_activity import CassandraActivity

    store = CassandraActivity.connect(settings.as_role(BACKFILL))  # the backfill logs in as itself
    try:
        readers = store.load()
    finally:
        store.close()
    since = backfill_ts // 1000 - settings.inactive_after_s * 1000
    return {r for r, (last, state) in readers.items() if state == "dropped" or last < since}


def without_inboxes(spark: "SparkSession", timelines: "DataFrame", readers: set[str]) -> "DataFrame":
    """``timelines`` (inbox rows) less those of ``readers`` (an anti join with a broadcast of them)."""
    from pyspark.sql import functions as F

    left_out = spark.createDataFrame([(r,) for r in sorted(readers)], "timeline_id string")
    return timelines.join(F.broadcast(left_out), "timeline_id", "left_anti")


def mark_readers(settings: Settings, inactive: set[str], *, kept_all: bool, backfill_ts: int) -> None:
    """Record what the layout did, for the read service and the stream's driver: the left-out readers
    flagged dropped (any older rows of theirs deleted at their write times); with ``kept_all`` the
    inactive ones laid out anyway are kept for one more window."""
    if not settings.inactive_after_s:
        return
    from feed_service.store.cassandra_activity import CassandraActivity

    store = CassandraActivity.connect(settings.as_role(BACKFILL))  # the backfill logs in as itself
    try:
        if kept_all:
            readers = {r: state for r, state in store.load().items()
                       if state[1] == "dropped" or state[0] < backfill_ts // 1000 - settings.inactive_after_s * 1000}
            store.set_dropped(readers, False)
            store.save({r: (backfill_ts // 1000, "active") for r in readers})
        elif inactive:
            store.set_dropped(inactive, True)
            store.drop_rows(inactive)
            last = store.load()
            store.save({r: (last.get(r, (0, ""))[0], "dropped") for r in inactive})
    finally:
        store.close()


# --- command line ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True,
                        help="output folder (engine states, manifest.json); must not hold a completed backfill")
    parser.add_argument("--inbox-cap", type=int, default=None,
                        help="entries kept per timeline and tweets per author (default: FEED_INBOX_CAP, else 800);"
                             " the bootstrapped stream must use the same")
    parser.add_argument("--no-write", action="store_true",
                        help="compute and count everything, write the states (author keys' and per-reader"
                             " steps') and manifest, but not Cassandra")
    parser.add_argument("--all-inboxes", action="store_true",
                        help="lay out every reader's inbox, inactive readers' too (default: leave out those"
                             " inactive for FEED_INACTIVE_AFTER_S; their reads merge from the author timelines)")
    parser.add_argument("--dead-letters", action="store_true",
                        help="also send invalid records to the dead-letter topic (tombstones are never sent)")


def options_from_args(args: argparse.Namespace) -> BackfillOptions:
    changes = {"inbox_cap": args.inbox_cap} if args.inbox_cap is not None else {}
    return BackfillOptions(out=args.out, write=not args.no_write, dead_letters=args.dead_letters,
                           all_inboxes=args.all_inboxes, settings_changes=changes)


def run(settings: Settings, options: BackfillOptions) -> int:
    """The command: apply the command line's settings, build a session, run the backfill.

    Exit code 0, or :data:`~spark_jobs.job_cli.EXIT_REFUSED` with the message on stderr when a :class:`FeedError` stops it
    (options, settings and the out folder are checked before any Spark session starts) or a fatal
    failure does (a missing Cassandra grant: spark_jobs/fatal.py, docs/operations.md).
    """
    from spark_jobs.runtime.session import build_session

    try:
        settings = settings.replace(**options.settings_changes)
        check_out(options.out.resolve())
    except FeedError as exc:
        return refused("backfill", exc)
    spark = build_session("feed-backfill", shuffle_partitions=4, extra_conf=SESSION_CONF)
    try:
        run_backfill(spark, settings, options)
    except FeedError as exc:
        return refused("backfill", exc)
    except Exception as exc:
        fatal = fatal_error(exc)  # a missing grant, seen by the driver or in a failed Spark job's text
        if fatal is None:
            raise
        return refused("backfill", fatal)
    finally:
        spark.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("backfill", __doc__.splitlines()[0], add_arguments,
                    lambda settings, args: run(settings, options_from_args(args)), argv)
