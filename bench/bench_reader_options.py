"""Engine throughput with list and follow-option changes against the same stream without them.

Generates one history with the workload generator (``--repost-share`` reposts, ``--reply-share``
replies, ``--list-share`` of the stream events list and membership changes and ``--option-share``
follows sent again with ``show_reposts`` flipped, docs/lists.md) and its twin without the list and
option changes (every other event the same, in the same order). Each is cut into batches of
``--batch-size`` and run through :class:`~feed_service.core.view.Materializer` (author step, list
stage, per-reader stage, in-memory view), alternately ``--rounds`` times; CPU seconds of this
process, the best round of each. Prints events/s of each and their ratio, with the load average.

    .venv/bin/python bench/bench_reader_options.py [--users 2000] [--events 60000] [--list-share 0.025] [--option-share 0.025]
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_reposts_engine import engine_parser, run  # noqa: E402 - the sibling benchmark's engine run
from feed_service.core.events import Event, parse_event  # noqa: E402
from feed_service.workload.generator import WorkloadModel  # noqa: E402


def _reader_option(raw: dict) -> bool:
    """Whether a generated change is a list or membership change or a follow's option flip."""
    return raw["type"] in ("list", "list_member") or "show_reposts" in raw


def histories(users: int, events: int, repost_share: float, reply_share: float, list_share: float,
              option_share: float, seed: int) -> tuple[list[Event], list[Event], int, int]:
    """(the history with list and option changes, its twin without them, how many of each there are)."""
    model = WorkloadModel(users, seed=seed, repost_share=repost_share, reply_share=reply_share, list_share=list_share,
                          follow_option_share=option_share)
    raw = list(model.setup()) + [model.step() for _ in range(events)]
    lists = sum(r["type"] in ("list", "list_member") for r in raw)
    options = sum("show_reposts" in r for r in raw)
    return ([parse_event(r) for r in raw], [parse_event(r) for r in raw if not _reader_option(r)], lists, options)


def main(argv: list[str] | None = None) -> None:
    parser = engine_parser(__doc__.splitlines()[0])
    parser.add_argument("--list-share", type=float, default=0.025)
    parser.add_argument("--option-share", type=float, default=0.025)
    args = parser.parse_args(argv)
    with_them, without, lists, options = histories(args.users, args.events, args.repost_share, args.reply_share,
                                                   args.list_share, args.option_share, args.seed)
    best = {"with": float("inf"), "without": float("inf")}
    for _ in range(args.rounds):
        for name, events in (("without", without), ("with", with_them)):
            gc.unfreeze()  # each run starts from the collector as a new process has it
            gc.collect()
            best[name] = min(best[name], run(events, args.batch_size, args.inbox_cap)[0])
    rate = {"with": len(with_them) / best["with"], "without": len(without) / best["without"]}
    print(f"bench_reader_options: {args.users:,} users, batches of {args.batch_size:,}, cap {args.inbox_cap}, "
          f"{args.repost_share:g} reposts, {args.reply_share:g} replies, best of {args.rounds} rounds (CPU s); "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"  without list and option changes: {len(without):>9,} events {best['without']:7.2f} s "
          f"{rate['without']:>10,.0f} events/s")
    print(f"  with {lists:,} list and {options:,} option changes: {len(with_them):>9,} events {best['with']:7.2f} s "
          f"{rate['with']:>10,.0f} events/s")
    print(f"  ratio with / without: {rate['with'] / rate['without']:.2f}")


if __name__ == "__main__":
    main()
