"""Engine throughput with reposts and replies against the same stream without them.

Generates one history with the workload generator (``--repost-share`` of the stream events are
repost changes, ``--reply-share`` of the tweets are replies), and its twin without them (reposts
dropped, replies turned into plain tweets, every other event the same). Each is cut into batches of
``--batch-size`` and run through :class:`~feed_service.core.view.Materializer`: the author step, the
per-reader side, the reposter and reader steps, and the in-memory view they write (the stream's sink
work is not in it). The two are run alternately ``--rounds`` times; CPU seconds of this process
(``time.process_time``), the best round of each. Prints events/s of each and their ratio, with the
load average (docs/reposts-and-replies.md).

``--pull-threshold N --pull-reposters`` makes users seen by N readers or more pull reposters (their
reposts merged at read, docs/reposts-and-replies.md, hybrid fan-out) in the run with them; both runs
use the threshold for authors.

    .venv/bin/python bench/bench_reposts_engine.py [--users 2000] [--events 60000] [--batch-size 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gc  # noqa: E402

from feed_service import heap  # noqa: E402
from feed_service.core.events import Event, RepostChange, TweetUpsert, parse_event  # noqa: E402
from feed_service.core.join.key_step import DEFAULT_PULL_THRESHOLD  # noqa: E402
from feed_service.core.view import Materializer  # noqa: E402
from feed_service.workload.generator import WorkloadModel  # noqa: E402


def histories(users: int, events: int, repost_share: float, reply_share: float, seed: int
              ) -> tuple[list[Event], list[Event]]:
    model = WorkloadModel(users, seed=seed, repost_share=repost_share, reply_share=reply_share)
    raw = list(model.setup()) + [model.step() for _ in range(events)]
    parsed = [parse_event(r) for r in raw]
    plain = [replace(e, in_reply_to_tweet_id=None, in_reply_to_author_id=None) if type(e) is TweetUpsert else e
             for e in parsed if type(e) is not RepostChange]
    return parsed, plain


def run(events: list[Event], batch_size: int, inbox_cap: int, pull_threshold: int = DEFAULT_PULL_THRESHOLD,
        pull_reposters: bool = False, settle_heap: bool = True) -> tuple[float, Materializer]:
    engine = Materializer(inbox_cap=inbox_cap, pull_threshold=pull_threshold, pull_reposters=pull_reposters)
    t0 = time.process_time()
    for i in range(0, len(events), batch_size):
        engine.process_batch(events[i:i + batch_size])
        if settle_heap:
            heap.settle()  # as feedctl materialize runs the engine
    return time.process_time() - t0, engine


def message_counts(events: list[Event], batch_size: int, inbox_cap: int, pull_threshold: int = DEFAULT_PULL_THRESHOLD,
                   pull_reposters: bool = False) -> dict[str, int]:
    """The messages the author keys send the per-reader stage over the whole run, and what the stage
    wrote: compact ``home_extras`` deltas and the rows they hold (the per-reader work, which a plain
    tweet does not have)."""
    counts = dict.fromkeys(("relations", "conditional tweets", "edges", "tweets", "extras deltas",
                            "extras rows"), 0)

    class Counting(Materializer):
        def per_reader(self, sides):  # type: ignore[no-untyped-def]
            for side in sides:
                counts["relations"] += len(side.relations)
                counts["conditional tweets"] += len(side.replies)
                counts["edges"] += len(side.edges)
                counts["tweets"] += len(side.tweets)
            super().per_reader(sides)

        def __init__(self, **kwargs):  # type: ignore[no-untyped-def]
            super().__init__(**kwargs)
            self._rows = 0
            apply = self.view.apply_extras

            def counted(deltas):  # type: ignore[no-untyped-def]
                deltas = list(deltas)
                counts["extras deltas"] += len(deltas)
                counts["extras rows"] += sum(len(d.readers) for d in deltas)
                apply(deltas)

            self.view.apply_extras = counted  # type: ignore[method-assign]

    engine = Counting(inbox_cap=inbox_cap, pull_threshold=pull_threshold, pull_reposters=pull_reposters)
    for i in range(0, len(events), batch_size):
        engine.process_batch(events[i:i + batch_size])
    return counts


def engine_parser(description: str) -> argparse.ArgumentParser:
    """The options of an engine run over a generated history (this benchmark's and its siblings')."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--batch-size", type=int, default=1_000)
    parser.add_argument("--inbox-cap", type=int, default=800)
    parser.add_argument("--repost-share", type=float, default=0.1)
    parser.add_argument("--reply-share", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = engine_parser(__doc__.splitlines()[0])
    parser.add_argument("--pull-threshold", type=int, default=DEFAULT_PULL_THRESHOLD)
    parser.add_argument("--no-settle", action="store_true",
                        help="leave the collector's generations alone (feed_service/heap.py)")
    parser.add_argument("--pull-reposters", action="store_true",
                        help="reposters seen by --pull-threshold readers or more are merged at read")
    args = parser.parse_args(argv)
    pulls = dict(pull_threshold=args.pull_threshold)
    with_them, without = histories(args.users, args.events, args.repost_share, args.reply_share, args.seed)
    reposts = sum(type(e) is RepostChange for e in with_them)
    replies = sum(type(e) is TweetUpsert and e.in_reply_to_tweet_id is not None for e in with_them)
    best = {"with": float("inf"), "without": float("inf")}
    for _ in range(args.rounds):
        for name, events in (("without", without), ("with", with_them)):
            mode = pulls if name == "without" else dict(pulls, pull_reposters=args.pull_reposters)
            gc.unfreeze()  # each run starts from the collector as a new process has it
            gc.collect()
            best[name] = min(best[name], run(events, args.batch_size, args.inbox_cap, settle_heap=not args.no_settle,
                                             **mode)[0])
    rate = {"with": len(with_them) / best["with"], "without": len(without) / best["without"]}
    print(f"bench_reposts_engine: {args.users:,} users, batches of {args.batch_size:,}, cap {args.inbox_cap}, "
          f"pull threshold {args.pull_threshold:,}{' (authors and reposters)' if args.pull_reposters else ''}, "
          f"{'heap left to the collector' if args.no_settle else 'heap settled after each batch'}, "
          f"best of {args.rounds} rounds (CPU s); load average {os.getloadavg()[0]:.2f}")
    print(f"  without reposts and replies: {len(without):>9,} events {best['without']:7.2f} s "
          f"{rate['without']:>10,.0f} events/s")
    print(f"  with them ({reposts:,} reposts, {replies:,} replies): {len(with_them):>9,} events "
          f"{best['with']:7.2f} s {rate['with']:>10,.0f} events/s")
    print(f"  ratio with / without: {rate['with'] / rate['without']:.2f}")
    counts = message_counts(with_them, args.batch_size, args.inbox_cap, args.pull_threshold,
                            args.pull_reposters)  # an untimed pass
    print("  messages to the per-reader stage and its output in the run with them: "
          + ", ".join(f"{name} {n:,}" for name, n in counts.items()))


if __name__ == "__main__":
    main()
