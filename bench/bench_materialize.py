"""``feedctl materialize`` as a user runs it, with reposts and replies against the same history without them.

Writes two replay files with ``feedctl workload`` (``--repost-share`` and ``--reply-share`` on, and
the same seed without them: the twin keeps every other event; its replies become plain tweets), then
runs ``feedctl materialize`` on each, alternately ``--rounds`` times, as child processes. Prints the
CPU seconds of each run (user + system of the child, the best round) and events/s, the ratio, and the
load average (docs/reposts-and-replies.md, "Engine throughput").

    .venv/bin/python bench/bench_materialize.py [--users 2000] [--count 40000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

FEEDCTL = [sys.executable, "-m", "feed_service"]


def _cpu_of(cmd: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def twin(src: Path, dst: Path) -> int:
    """``src`` without reposts, its replies made plain tweets; returns the events written."""
    n = 0
    with src.open() as lines, dst.open("w") as out:
        for line in lines:
            event = json.loads(line)
            if event.get("type") == "repost":
                continue
            event.pop("in_reply_to_tweet_id", None)
            event.pop("in_reply_to_author_id", None)
            out.write(json.dumps(event) + "\n")
            n += 1
    return n


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--count", type=int, default=40_000)
    parser.add_argument("--repost-share", type=float, default=0.1)
    parser.add_argument("--reply-share", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        with_them, without = Path(tmp) / "with.jsonl", Path(tmp) / "without.jsonl"
        subprocess.run([*FEEDCTL, "workload", "--users", str(args.users), "--count", str(args.count),
                        "--seed", str(args.seed), "--repost-share", str(args.repost_share),
                        "--reply-share", str(args.reply_share), "--out", str(with_them), "--no-progress"],
                       check=True)
        events = {"with": sum(1 for _ in with_them.open()), "without": twin(with_them, without)}
        best = {"with": float("inf"), "without": float("inf")}
        for _ in range(args.rounds):
            for name, path in (("without", without), ("with", with_them)):
                best[name] = min(best[name], _cpu_of([*FEEDCTL, "materialize", str(path)]))
    rate = {k: events[k] / best[k] for k in best}
    print(f"bench_materialize: feedctl materialize, {args.users:,} users, {args.count:,} stream events, "
          f"best of {args.rounds} rounds (CPU s of the child); load average {os.getloadavg()[0]:.2f}")
    for name in ("without", "with"):
        print(f"  {name} reposts and replies: {events[name]:>9,} events {best[name]:8.2f} s {rate[name]:>9,.0f} events/s")
    print(f"  ratio with / without: {rate['with'] / rate['without']:.2f}")


if __name__ == "__main__":
    main()
