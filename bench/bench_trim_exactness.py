"""Trimming against the definition: how many timelines a trimmed in-memory view gets wrong, with
and without the refill (docs/trimming.md#refill).

Runs a ``feedctl workload`` replay file (or one it generates) through the engine in memory at the
given cap, for each slack and batch size, and compares every timeline with the batch reference.
``--no-refill`` turns the refill off (the view before it). In memory, one process: no stack needed.
Prints figures and the load average; asserts nothing.

    .venv/bin/feedctl workload --users 200 --count 20000 --out /tmp/w20k0.jsonl --no-progress
    .venv/bin/python bench/bench_trim_exactness.py /tmp/w20k0.jsonl
    .venv/bin/python bench/bench_trim_exactness.py /tmp/w20k0.jsonl --no-refill
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from feed_service.core.reference import reference_timelines
from feed_service.core.view import Materializer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("events", type=Path, help="a replay file (feedctl workload --out)")
    parser.add_argument("--inbox-cap", type=int, default=800)
    parser.add_argument("--slacks", default="200,0", help="comma-separated trim slacks (default 200,0)")
    parser.add_argument("--batch-sizes", default="1000,137", help="comma-separated batch sizes (default 1000,137)")
    parser.add_argument("--no-refill", action="store_true", help="turn the refill off (the view before it)")
    args = parser.parse_args()
    lines = args.events.read_text().splitlines()
    expected = reference_timelines([json.loads(line) for line in lines if line.strip()], inbox_cap=args.inbox_cap)
    print(f"{len(lines)} events, {len(expected)} timelines, cap {args.inbox_cap}, refill "
          f"{'off' if args.no_refill else 'on'}; load average {os.getloadavg()[0]:.1f}")
    for slack in (int(s) for s in args.slacks.split(",")):
        for size in (int(b) for b in args.batch_sizes.split(",")):
            started = time.perf_counter()
            engine = Materializer(inbox_cap=args.inbox_cap, trim_slack=slack)
            if args.no_refill:
                engine.refill = lambda: None  # type: ignore[method-assign]
            for i in range(0, len(lines), size):
                engine.process_batch(lines[i:i + size])
            got = engine.view.snapshot()
            wrong = sorted(u for u in expected.keys() | got.keys() if expected.get(u) != got.get(u))
            short = sum(1 for u in wrong if len(got.get(u, [])) < len(expected.get(u, [])))
            print(f"slack {slack:>4}, batches of {size:>5}: {len(wrong):>3} of {len(expected)} timelines differ from "
                  f"the reference ({short} short); {engine.view.trims} trims, {engine.view.trimmed_rows} rows "
                  f"trimmed, {engine.view.refills} refills asked, {engine.view.refilled_rows} rows written by them; {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
