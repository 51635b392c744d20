"""The stream's command line: ``feedctl stream`` and ``python -m spark_jobs.stream`` parse the same arguments
(:func:`add_arguments`) into :class:`~spark_jobs.stream.options.StreamOptions` (:func:`options_from_args`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Sequence

from spark_jobs.job_cli import job_main
from spark_jobs.stream.metrics import DEFAULT_METRICS_HOST, DEFAULT_METRICS_PORT
from spark_jobs.stream.options import (
    DEFAULT_CHECKPOINT, DEFAULT_MAX_OFFSETS_PER_TRIGGER, DEFAULT_STATE_STATS_INTERVAL, StreamOptions,
)
from spark_jobs.stream.runner import run

DESCRIPTION = "The streaming job: Kafka changelogs -> validated changes -> stateful join -> Cassandra."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT,
                        help=f"checkpoint folder (state, offsets); default {DEFAULT_CHECKPOINT}")
    parser.add_argument("--inbox-cap", type=int, default=None,
                        help="entries per timeline and tweets per author (default: FEED_INBOX_CAP, else 800);"
                             " a bootstrapped stream must use the backfill's")
    parser.add_argument("--pull-threshold", type=int, default=None,
                        help="active followers from which an author is merged in at read time instead of pushed"
                             " to inboxes (default: FEED_PULL_THRESHOLD, else 2000); a change takes effect per"
                             " author at its next batch (docs/fan-out.md)")
    parser.add_argument("--state-partitions", type=int, default=None,
                        help="state partitions of a new checkpoint (default: FEED_STATE_PARTITIONS, else 2); an"
                             " existing checkpoint keeps its own until `feedctl reshard` (docs/streaming.md)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=DEFAULT_MAX_OFFSETS_PER_TRIGGER)
    parser.add_argument("--trigger-seconds", type=float, default=0.0,
                        help="micro-batch interval; 0 = start the next batch as soon as one ends")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="for a new checkpoint: earliest, latest or Spark's JSON offsets")
    parser.add_argument("--bootstrap-from", type=Path, default=None, metavar="BACKFILL_DIR",
                        help="new checkpoint only: start from a backfill's snapshot offsets and engine states"
                             " (feedctl backfill --out)")
    parser.add_argument("--status-file", type=Path, default=None,
                        help="progress JSON, rewritten every second (default CHECKPOINT/progress.json)")
    parser.add_argument("--state-stats-interval", type=_seconds, default=DEFAULT_STATE_STATS_INTERVAL,
                        metavar="SECONDS",
                        help="how often the progress JSON's state size per key and rows per timeline are computed"
                             f" (default {DEFAULT_STATE_STATS_INTERVAL:g}; 0 = never; docs/streaming.md)")
    parser.add_argument("--until-caught-up", action="store_true",
                        help="finish an interrupted batch, process what the topics hold now, then exit 0 with every"
                             " batch committed (Spark's availableNow trigger, instead of --trigger-seconds); what"
                             " `feedctl reshard --finish-pending` runs (docs/streaming.md)")
    parser.add_argument("--metrics-port", type=_port, metavar="PORT",
                        default=os.environ.get("FEED_STREAM_METRICS_PORT", str(DEFAULT_METRICS_PORT)),
                        help="Prometheus /metrics of the stream (spark_jobs/stream/metrics.py); 0 = none"
                             f" (default: FEED_STREAM_METRICS_PORT, else {DEFAULT_METRICS_PORT})")
    parser.add_argument("--metrics-host", metavar="HOST",
                        default=os.environ.get("FEED_STREAM_METRICS_HOST", DEFAULT_METRICS_HOST),
                        help=f"address of the metrics endpoint (default: FEED_STREAM_METRICS_HOST, else"
                             f" {DEFAULT_METRICS_HOST})")


def _port(text: str) -> int:
    """A TCP port argument, 0 included (the metrics port: 0 = no endpoint). A string default (an
    environment variable) goes through here too, so a bad FEED_STREAM_METRICS_PORT is refused by name."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {text!r} (--metrics-port or FEED_STREAM_METRICS_PORT)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value} (--metrics-port or FEED_STREAM_METRICS_PORT)")
    return value


def _seconds(text: str) -> float:
    """A duration argument: a number of seconds, not negative."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text}")
    return value


def options_from_args(args: argparse.Namespace) -> StreamOptions:
    return StreamOptions(
        checkpoint=args.checkpoint.resolve(),
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        trigger_seconds=args.trigger_seconds,
        starting_offsets=args.starting_offsets,
        bootstrap_from=args.bootstrap_from,
        state_stats_interval=args.state_stats_interval,
        until_caught_up=args.until_caught_up,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        settings_changes={name: value for name, value in (("inbox_cap", args.inbox_cap),
                                                          ("pull_threshold", args.pull_threshold),
                                                          ("state_partitions", args.state_partitions))
                          if value is not None},
    )


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("stream", DESCRIPTION, add_arguments,
                    lambda settings, args: run(settings, options_from_args(args), status_file=args.status_file), argv)
