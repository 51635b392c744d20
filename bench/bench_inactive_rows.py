"""Inbox rows written and stored when the readers who never read get no inbox writes (docs/activity.md),
counted exactly on the engine's model: no stack, no timing.

Runs a ``feedctl workload`` replay file through :class:`~feed_service.core.view.Materializer` in
batches (as bench_trim_exactness.py does), four times: with and without skipping inactive readers,
each with trimming at ``--trim-slack`` (default 200, cap ``--inbox-cap`` 800) and without trimming.
The non-readers are ``--inactive-share`` (default 70 %) of every user that follows anyone in the
workload, drawn with ``--seed``; they are made inactive before the first batch
(``Materializer.set_active(non_readers, False)``: nobody has read yet) and never come back.

Counted per run:

- inbox rows written: every inbox row insert, update and delete of a step's deltas that reaches a
  stored inbox (the engine's own deltas and the refills' answers, both applied by
  ``TimelineView.apply``; a delta's timelines that are dropped are left out, which is
  ``TimelineView.skipped_rows``), by kind;
- rows deleted by trims (``TimelineView.trimmed_rows``: one partition-range delete per trim in the
  store, these rows under it) and by readers going inactive (``dropped_rows``);
- inbox rows stored at the end (the sum of every stored inbox), and the author_timeline rows, which
  both runs write alike (the reads of the inactive readers merge them).

Then every run's snapshot (every timeline as read, ``TimelineView.snapshot``) is compared with the
untrimmed run without skipping: "equal" means every timeline reads the same.

    .venv/bin/feedctl workload --users 1000 --count 40000 --out /tmp/w-inactive.jsonl --no-progress
    .venv/bin/python bench/bench_inactive_rows.py /tmp/w-inactive.jsonl

Prints figures and the load average; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

from feed_service.core.join import StepResult
from feed_service.core.view import Materializer, TimelineView


class CountingView(TimelineView):
    """A view that counts the inbox row writes it applies (those reaching a kept inbox) by kind."""

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.written = {"insert": 0, "update": 0, "delete": 0}
        self.author_rows_written = 0

    def apply(self, result: StepResult) -> None:
        dropped = self.dropped
        for op, _entry, timeline_ids in result.deltas:
            kept = len(timeline_ids) if not dropped else sum(1 for uid in timeline_ids if uid not in dropped)
            self.written["delete" if op == "delete" else op] += kept
        self.author_rows_written += len(result.author_timeline)
        super().apply(result)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(lines: list[str], *, inactive: list[str], cap: int, slack: int | None, batch: int) -> dict:
    view = CountingView(inbox_cap=cap, trim_slack=slack)
    engine = Materializer(inbox_cap=cap, view=view)
    engine.set_active(inactive, False)
    started = time.perf_counter()
    for i in range(0, len(lines), batch):
        engine.process_batch(lines[i:i + batch])
    stored = sum(len(rows) for rows in view.timelines.values())
    return {
        "view": view, "written": dict(view.written), "written_total": sum(view.written.values()),
        "skipped": view.skipped_rows, "trimmed": view.trimmed_rows, "trims": view.trims,
        "dropped": view.dropped_rows, "refills": view.refills, "refilled": view.refilled_rows,
        "stored": stored, "author_rows": sum(len(r) for r in view.author_timelines.values()),
        "author_written": view.author_rows_written, "inboxes": sum(1 for r in view.timelines.values() if r),
        "seconds": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("events", type=Path, help="a replay file (feedctl workload --out)")
    parser.add_argument("--inbox-cap", type=int, default=800)
    parser.add_argument("--trim-slack", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--inactive-share", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    lines = [line for line in args.events.read_text().splitlines() if line.strip()]
    followers = sorted({e["follower_id"] for e in map(json.loads, lines) if e.get("type") == "follow"})
    inactive = sorted(random.Random(args.seed).sample(followers, round(args.inactive_share * len(followers))))
    print(f"{args.events}: {len(lines):,} events, {len(followers):,} followers, {len(inactive):,} of them"
          f" ({len(inactive) / len(followers):.1%}, seed {args.seed}) never read; cap {args.inbox_cap},"
          f" batches of {args.batch_size}; load average {_load()}", flush=True)
    results: dict[tuple[str, str], dict] = {}
    for trim_name, slack in ((f"slack {args.trim_slack}", args.trim_slack), ("untrimmed", None)):
        for skip_name, readers in (("all kept", []), ("skipping", inactive)):
            r = run(lines, inactive=readers, cap=args.inbox_cap, slack=slack, batch=args.batch_size)
            results[(trim_name, skip_name)] = r
            w = r["written"]
            print(f"  {trim_name:>10}, {skip_name:>8}: inbox rows written {r['written_total']:>10,} (insert"
                  f" {w['insert']:,}, update {w['update']:,}, delete {w['delete']:,}); skipped {r['skipped']:,};"
                  f" trimmed {r['trimmed']:,} in {r['trims']:,} trims; dropped {r['dropped']:,}; refills"
                  f" {r['refills']:,} writing {r['refilled']:,}; stored at the end {r['stored']:,} in"
                  f" {r['inboxes']:,} inboxes; author_timeline rows written {r['author_written']:,}, stored"
                  f" {r['author_rows']:,}; {r['seconds']:.1f} s; load {_load()}", flush=True)
    base = results[("untrimmed", "all kept")]["view"].snapshot()
    print(f"\nsnapshots ({len(base):,} timelines, of which {sum(1 for u in inactive if u in base):,} of non-readers"
          f" read merged): ", flush=True)
    for key, r in results.items():
        snap = r["view"].snapshot()
        differ = sorted(u for u in base.keys() | snap.keys() if base.get(u) != snap.get(u))
        r["equal"] = not differ
        print(f"  {key[0]:>10}, {key[1]:>8}: {'equal' if not differ else f'{len(differ)} timelines DIFFER'}"
              f" to the untrimmed run without skipping", flush=True)
    print(f"\n==== inbox rows, {len(inactive) / len(followers):.0%} of followers never read (load average {_load()})")
    print(f"{'trimming':>10} | {'written, all kept':>18} | {'written, skipping':>18} | {'ratio':>6} |"
          f" {'stored, all kept':>17} | {'stored, skipping':>17} | {'ratio':>6} | reads equal")
    for trim_name in (f"slack {args.trim_slack}", "untrimmed"):
        a, s = results[(trim_name, "all kept")], results[(trim_name, "skipping")]
        print(f"{trim_name:>10} | {a['written_total']:>18,} | {s['written_total']:>18,} |"
              f" {a['written_total'] / max(1, s['written_total']):>5.2f}x | {a['stored']:>17,} | {s['stored']:>17,} |"
              f" {a['stored'] / max(1, s['stored']):>5.2f}x | {a['equal'] and s['equal']}")


if __name__ == "__main__":
    main()
