"""``feedctl state-stats``: how big the join's state is per author key, and how many rows each timeline holds.

Reads the stream checkpoint's committed state with Spark (local, read-only: the stream may be running on
it) and counts rows per timeline in Cassandra; docs/streaming.md, "State size and rows per timeline".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO


def register(sub: argparse._SubParsersAction) -> None:
    from spark_jobs.stream.options import DEFAULT_CHECKPOINT

    parser = sub.add_parser("state-stats", help="state size per key and rows per timeline",
                            description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT,
                        help=f"the stream's checkpoint folder (feedctl stream --checkpoint); default {DEFAULT_CHECKPOINT}")
    parser.add_argument("--sample", type=_positive, default=None, metavar="N",
                        help="count the rows of N timelines (and N author timelines) picked at random instead of"
                             " all of them; the number of timelines is then an estimate")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def run(args: argparse.Namespace) -> int:
    from feed_service.errors import CheckpointError, StoreError
    from feed_service.settings import Settings
    from spark_jobs.runtime.session import build_session
    from spark_jobs.state_stats import QUERY_SUBDIR, collect_stats
    from spark_jobs.stream.pinned import refuse_retired_operator

    settings = Settings.from_env().as_role("stream")
    checkpoint = args.checkpoint.resolve()
    if not (checkpoint / QUERY_SUBDIR).is_dir():  # before paying for a Spark session
        raise CheckpointError(f"no stream checkpoint at {checkpoint} (expected {checkpoint / QUERY_SUBDIR})")
    refuse_retired_operator(checkpoint)
    spark = build_session("feed-state-stats", shuffle_partitions=2)
    try:
        report = collect_stats(spark, settings, checkpoint, sample=args.sample)
    except StoreError as exc:  # Cassandra down or timing out: something to act on, like a stack error
        print(f"feedctl state-stats: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    try:
        report["readers"] = reader_counts(settings, checkpoint)
    except StoreError as exc:
        print(f"feedctl state-stats: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, sys.stdout)
    return 0


def reader_counts(settings: Any, checkpoint: Path) -> dict[str, int]:
    """Readers by state as the stream's driver recorded them (``reader_activity``) and the inbox row
    writes skipping saved (the running stream's progress record: docs/activity.md)."""
    from feed_service.store.cassandra_activity import CassandraActivity

    store = CassandraActivity.connect(settings)
    try:
        states = [state for _, state in store.load().values()]
    finally:
        store.close()
    out = {"active": states.count("active"), "inactive": states.count("dropped"),
           "rebuilding": states.count("rebuilding"), "skipped_rows": None}
    for status in (checkpoint / "progress.json", checkpoint.parent / f"{checkpoint.name}.progress.json"):
        try:
            activity = json.loads(status.read_text()).get("activity") or {}
        except (OSError, ValueError):
            continue
        out["skipped_rows"] = activity.get("skipped_rows")
        break
    return out


def print_report(report: dict[str, Any], out: TextIO) -> None:
    """The report as two small tables: bytes per key of the state, rows per partition of the timelines."""
    state = report["state"]
    batch = state["batch_id"]
    header = f"{'':<22}{'count':>10}{'total':>14}{'p50':>10}{'p99':>10}{'max':>10}"

    def line(name: str, d: dict[str, int]) -> str:
        return f"{name:<22}{d['count']:>10}{d['total']:>14}{d['p50']:>10}{d['p99']:>10}{d['max']:>10}"

    out.write(f"state of {report['checkpoint']}: ")
    if batch is None:
        out.write("no committed batch yet\n")
    else:
        out.write(f"batch {batch}, {state['keys']} keys, {state['total_bytes']} bytes\n")
        out.write(header.replace("count", " keys", 1) + "\n")
        out.write(line("bytes per key", state["bytes_per_key"]) + "\n")
        for name, d in state["variables"].items():
            out.write(line(f"  {name}", d) + "\n")
    out.write("\nrows per timeline (count: timelines counted)\n" + header + "\n")
    for name, table in report["timelines"].items():
        out.write(line(name, table["rows"]) + "\n")
        if not table["exact"]:
            out.write(f"  {table['sampled']} sampled; about {table['partitions']} in all\n")
    readers = report.get("readers")
    if readers is not None:
        skipped = readers["skipped_rows"]
        out.write(f"\nreaders: {readers['active']} active, {readers['inactive']} inactive, {readers['rebuilding']}"
                  f" rebuilding; inbox row writes skipped: {'unknown' if skipped is None else skipped}\n")
    out.write(f"\ncomputed in {report['duration_s']:.1f} s\n")
