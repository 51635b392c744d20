"""``feedctl materialize EVENTS.jsonl``: run a replay file through the engine and print the timelines.

The outside check of the engine (docs/join-engine.md): one JSON document on stdout,
``{"timelines": {user_id: [entry, ...]}, "lists": {list_id: [entry, ...]}, "rejected": n}``, users
with an empty home timeline omitted, every live list present (docs/lists.md; a deleted one absent),
one line per rejected record on stderr, exit 0 once the file was processed even with rejects.
Blank lines are not records: they are skipped and not counted.
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import islice
from typing import Any, BinaryIO, TextIO

from feed_service import heap
from feed_service.cli.arg_types import default_inbox_cap, default_pull_threshold, inbox_cap, pull_threshold
from feed_service.cli.arg_types import default_trim_slack, trim_slack as _trim_slack
from feed_service.cli.arg_types import positive_int as _positive
from feed_service.core.join import DEFAULT_INBOX_CAP, DEFAULT_PULL_THRESHOLD
from feed_service.core.view import Materializer

DEFAULT_BATCH_SIZE = 1000
"""Lines per micro-batch; large enough to amortize per-key steps, small enough to stay streaming-like."""


def register(sub: Any) -> None:
    """Add the ``materialize`` parser to the ``feedctl`` subcommands."""
    parser = sub.add_parser("materialize", help="apply an events file through the join engine, print timelines",
                            description="Run a replay file through the join engine and print the timelines.")
    parser.add_argument("events", metavar="EVENTS.jsonl", help="one JSON event envelope per line")
    parser.add_argument("--batch-size", type=_positive, default=DEFAULT_BATCH_SIZE,
                        help=f"lines per micro-batch (default {DEFAULT_BATCH_SIZE})")
    parser.add_argument("--inbox-cap", type=inbox_cap, default=default_inbox_cap(),
                        help="entries kept per timeline (default: FEED_INBOX_CAP, else 800)")
    parser.add_argument("--pull-threshold", type=pull_threshold, default=default_pull_threshold(),
                        help="active followers from which an author is merged in at read time (default:"
                             " FEED_PULL_THRESHOLD, else 2000); the output is the same view whatever it is")
    parser.add_argument("--trim-slack", type=_trim_slack, default=default_trim_slack(),
                        help="rows an inbox may hold above the cap before it is trimmed back to it, as the"
                             " stream does in Cassandra (default: FEED_TRIM_SLACK, else 200; docs/trimming.md)")
    parser.set_defaults(handler=run)


def materialize(
    lines: BinaryIO, *, batch_size: int = DEFAULT_BATCH_SIZE, inbox_cap: int = DEFAULT_INBOX_CAP,
    pull_threshold: int = DEFAULT_PULL_THRESHOLD, errors: TextIO | None = None, trim_slack: int | None = None,
) -> dict[str, Any]:
    """Apply every line of ``lines`` in micro-batches; return the output document.

    The timelines are what a reader gets: the inboxes merged with the pull authors each user follows,
    by the engine and the read-side merge the stream and the server use (docs/fan-out.md).
    Rejected lines are written to ``errors`` as ``line N: <code>: <reason>`` (1-based numbers).
    ``trim_slack`` trims the inboxes as the stream does (None: never).
    """
    engine = Materializer(inbox_cap=inbox_cap, pull_threshold=pull_threshold, encode_states=True,
                          trim_slack=trim_slack)
    line_no = 0
    while True:
        chunk = list(islice(lines, batch_size))
        if not chunk:
            break
        records = [(line_no + 1 + i, raw) for i, raw in enumerate(chunk) if raw.strip()]
        line_no += len(chunk)
        report = engine.process_batch([raw for _, raw in records])
        heap.settle()  # the state survives the run: keep the collector off it
        if errors is not None:
            for rej in report.rejections:
                errors.write(f"line {records[rej.position][0]}: {rej.code}: {rej.reason}\n")
    return {"timelines": engine.view.snapshot(), "lists": engine.view.list_snapshot(), "rejected": engine.rejected}


def run(args: argparse.Namespace) -> int:
    """Handler of ``feedctl materialize``."""
    try:
        with open(args.events, "rb") as lines:
            document = materialize(lines, batch_size=args.batch_size, inbox_cap=args.inbox_cap,
                                   pull_threshold=args.pull_threshold, errors=sys.stderr,
                                   trim_slack=args.trim_slack)
    except OSError as exc:
        print(f"feedctl materialize: cannot read {args.events}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    # json.dumps, not json.dump: only the one-shot form runs the C encoder (json.dump streams through
    # the pure-Python one, most of a plain run's CPU); ASCII: lone surrogates in text stay encodable
    sys.stdout.write(json.dumps(document, separators=(",", ":")))
    sys.stdout.write("\n")
    return 0
