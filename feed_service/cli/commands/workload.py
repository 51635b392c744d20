"""``feedctl workload``: generate a seeded workload and write it to Kafka or to a JSONL file.

    feedctl workload --users 10000 --count 100000 --seed 1 --kafka
    feedctl workload --users 1000 --rate 500 --duration 60 --seed 7 --kafka
    feedctl workload --users 100 --count 1000 --seed 3 --out events.jsonl     (``-``: stdout)
    feedctl workload --users 1000 --count 100000 --seed 1 --hide-share 0.1 --out hiding.jsonl

The setup (one profile per user, then the follow graph) is sent first as fast as possible; the
stream of ``--count`` changes (or as many as ``--duration`` seconds allow) follows at ``--rate``
events/s (0 or omitted: as fast as possible). ``--hide-share`` is the fraction of stream events that
are block and mute changes (default 0.02; 0 gives the workload of before blocks and mutes, event for
event, so older runs stay comparable). ``--repost-share`` is the fraction of stream events that are
repost changes and ``--reply-share`` the fraction of new tweets that are replies, and
``--follow-option-share`` the fraction that flip a follow's show_reposts (all default 0: the workload
of before them, event for event).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from typing import Any, Iterator

from feed_service.cli.arg_types import number_at_least, share
from feed_service.cli.connection import add_connection_args, settings_from_args


def _non_negative(kind: type):
    return number_at_least(0, kind)


def _start_ms(text: str) -> int:
    if text == "now":
        return time.time_ns() // 1_000_000
    return _non_negative(int)(text)


def register(sub: Any) -> None:
    """Add the ``workload`` parser to the ``feedctl`` subcommands."""
    from feed_service.workload import generator as wl

    parser = sub.add_parser("workload", help="generate a seeded power-law workload to Kafka or a JSONL file",
                            description="Generate a seeded workload (profiles, a power-law follow graph, then "
                                        "a stream of changes) to Kafka or a JSONL file.")
    parser.add_argument("--users", type=_non_negative(int), default=wl.DEFAULT_USERS,
                        help=f"number of users (default {wl.DEFAULT_USERS})")
    parser.add_argument("--rate", type=_non_negative(float), default=0.0,
                        help="stream events per second (default 0: as fast as possible)")
    amount = parser.add_mutually_exclusive_group(required=True)
    amount.add_argument("--count", type=_non_negative(int), help="stream events after the setup")
    amount.add_argument("--duration", type=_non_negative(float), help="seconds of stream after the setup")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sink = parser.add_mutually_exclusive_group(required=True)
    sink.add_argument("--kafka", action="store_true", help="publish to the topics")
    sink.add_argument("--out", metavar="FILE.jsonl", help="write a replay file ('-' for stdout)")
    parser.add_argument("--no-setup", action="store_true", help="skip profiles and follow graph")
    parser.add_argument("--mean-following", type=float, default=wl.DEFAULT_MEAN_FOLLOWING,
                        help=f"mean follows per user in the graph (default {wl.DEFAULT_MEAN_FOLLOWING:g})")
    parser.add_argument("--zipf", type=float, default=wl.DEFAULT_ZIPF_EXPONENT,
                        help=f"popularity exponent s, weight ~ rank^-s (default {wl.DEFAULT_ZIPF_EXPONENT:g})")
    parser.add_argument("--start-ms", type=_start_ms, default=wl.WORKLOAD_EPOCH_MS,
                        help="simulated start time, ms since the epoch, or 'now' (default 2026-01-01, reproducible)")
    parser.add_argument("--hide-share", type=share, default=wl.DEFAULT_HIDE_SHARE, metavar="FRACTION",
                        help="fraction of stream events that are block and mute changes "
                             f"(default {wl.DEFAULT_HIDE_SHARE:g}; 0: none, the workload of before them)")
    parser.add_argument("--repost-share", type=share, default=wl.DEFAULT_REPOST_SHARE, metavar="FRACTION",
                        help="fraction of stream events that are repost and unrepost changes "
                             f"(default {wl.DEFAULT_REPOST_SHARE:g})")
    parser.add_argument("--reply-share", type=share, default=wl.DEFAULT_REPLY_SHARE, metavar="FRACTION",
                        help=f"fraction of new tweets that are replies (default {wl.DEFAULT_REPLY_SHARE:g})")
    parser.add_argument("--follow-option-share", type=share, default=wl.DEFAULT_FOLLOW_OPTION_SHARE,
                        metavar="FRACTION", help="fraction of stream events that flip a follow's show_reposts "
                                                 f"(default {wl.DEFAULT_FOLLOW_OPTION_SHARE:g})")
    parser.add_argument("--prefix", default="", help="prefix of user and tweet ids (keeps runs apart)")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    add_connection_args(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``feedctl workload``."""
    from feed_service.cli.progress import ProgressLine
    from feed_service.workload.generator import WorkloadModel
    from feed_service.workload.sinks import paced

    if args.users < 1:
        print("feedctl workload: --users must be >= 1", file=sys.stderr)
        return 2
    model = WorkloadModel(users=args.users, seed=args.seed, mean_following=args.mean_following,
                          zipf_exponent=args.zipf, start_ms=args.start_ms,
                          events_per_second=args.rate or 1000.0, prefix=args.prefix,
                          hide_share=args.hide_share, repost_share=args.repost_share,
                          reply_share=args.reply_share, follow_option_share=args.follow_option_share)
    count = {"setup": 0, "stream": 0}

    def counted(phase: str, events: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for event in events:
            count[phase] += 1
            if (count[phase] & 1023) == 0:
                progress.tick()
            yield event

    def render(elapsed: float) -> str:
        total = count["setup"] + count["stream"]
        return (f"workload: {count['setup']:,} setup + {count['stream']:,} stream events "
                f"in {elapsed:.1f}s ({total / elapsed if elapsed else 0:,.0f} ev/s)")

    progress = ProgressLine(render, enabled=not args.no_progress)
    setup = iter(()) if args.no_setup else model.setup()
    stream = (model.step() for _ in (range(args.count) if args.count is not None else itertools.count()))
    # The setup goes out as fast as possible; only the stream is paced.
    events = itertools.chain(counted("setup", setup),
                             counted("stream", paced(stream, rate=args.rate, duration=args.duration)))
    error = _to_kafka(args, events) if args.kafka else _to_file(args.out, events)
    progress.done()
    if error is None:
        return 0
    print(f"feedctl workload: {error}", file=sys.stderr)
    return 1 if args.kafka else 2


def _to_kafka(args: argparse.Namespace, events: Iterator[dict[str, Any]]) -> str | None:
    """Publish ``events``; return why that failed, or ``None``."""
    from feed_service.errors import ProducerError
    from feed_service.workload.sinks import publish_workload

    try:
        publish_workload(settings_from_args(args).as_role("producer"), events)
    except ProducerError as exc:
        return str(exc)
    return None


def _to_file(path: str, events: Iterator[dict[str, Any]]) -> str | None:
    """Write ``events`` to ``path`` (``-``: stdout); return why that failed, or ``None``."""
    from feed_service.workload.sinks import write_jsonl

    try:
        if path == "-":
            write_jsonl(events, sys.stdout)
            sys.stdout.flush()
        else:
            write_jsonl(events, path)
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    return None
