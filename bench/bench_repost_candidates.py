"""What each shape of the reposts-and-replies join would keep per reader, on a generated history.

Pure Python over the batch reference's final tables (no stack): generates a workload history with
the generator's shares of reposts and replies, folds it into the final tables, and prints per
reader (p50, p99, mean, total) what docs/reposts-and-replies.md weighs:

- ``view``: the entries of the capped view (what a reader can be shown);
- ``all candidates`` (shape 2, one reader stage owning every row): every row that could ever be an
  entry of the reader: each visible author's retained tweets (newest ``cap`` per class) and each
  visible reposter's live reposts of tweets whose author is not hidden;
- ``read-time rows`` (shape 1): the candidate rows a read must walk to produce the first ``cap``
  entries exactly (every candidate at or above the cap-th entry's time, filtered replies and
  duplicate reposts included);
- ``reader step`` (shape 3, chosen): the reader step's state: one relation per followee or hidden
  author, the conditional replies from visible authors, the repost candidates from visible reposters;
- ``extras rows``: the entries the reader step writes (reposts and conditional replies shown);

and the messages per event of shape 3 by kind (relations, audience deltas, conditional replies,
joined reposts, candidates), from the final audiences.

    .venv/bin/python bench/bench_repost_candidates.py [--users 2000] [--events 40000] [--cap 800]
        [--repost-share 0.1] [--reply-share 0.2] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from feed_service.core.events import reply_of  # noqa: E402
from feed_service.core.reference import FinalTables, reference_entries, reference_tables  # noqa: E402
from feed_service.workload.generator import WorkloadModel  # noqa: E402


def history(users: int, events: int, repost_share: float, reply_share: float, seed: int) -> list[dict]:
    model = WorkloadModel(users, seed=seed, repost_share=repost_share, reply_share=reply_share)  # type: ignore[call-arg]
    out = list(model.setup())
    out += [model.step() for _ in range(events)]
    return out


def retained(tables: FinalTables, cap: int) -> dict[str, list[tuple[str, tuple]]]:
    """author -> its retained tweets: the newest ``cap`` of each class (non-replies and self-replies;
    replies to each other user), as the author step of shape 3 keeps them."""
    classes: dict[tuple[str, str | None], list[tuple[int, str, tuple]]] = {}
    for (author, tid), c in tables.tweets.items():
        parent = reply_of(c)
        cls = None if parent is None or parent[1] == author else parent[1]
        classes.setdefault((author, cls), []).append((c[1], tid, c))
    out: dict[str, list[tuple[str, tuple]]] = {}
    for (author, _), items in classes.items():
        items.sort(reverse=True)
        out.setdefault(author, []).extend((tid, c) for _, tid, c in items[:cap])
    return out


def measure(tables: FinalTables, cap: int) -> tuple[dict[str, list[int]], Counter]:
    view = reference_entries(tables, inbox_cap=cap)
    visible = tables.visible()
    hidden = tables.hidden()
    hidden_by_reader: dict[str, set[str]] = {}
    for reader, author in hidden:
        hidden_by_reader.setdefault(reader, set()).add(author)
    kept = retained(tables, cap)
    reposts = tables.live_reposts()
    audience: Counter = Counter(x for sees in visible.values() for x in sees)
    figures: dict[str, list[int]] = {k: [] for k in ("view", "all candidates", "read-time rows", "reader step",
                                                     "extras rows")}
    for reader, sees in visible.items():
        candidates: list[tuple[int, str]] = []  # (time, kind) of every candidate row
        conditional = 0
        for author in sees:
            for tid, c in kept.get(author, ()):
                parent = reply_of(c)
                if parent is not None and parent[1] not in (author, reader):
                    conditional += 1
                candidates.append((c[1], "tweet"))
        repost_candidates = 0
        for reposter in sees:
            for author, tid, at, _ in reposts.get(reposter, ()):
                if (reader, author) not in hidden:
                    repost_candidates += 1
                    candidates.append((at, "repost"))
        entries = view.get(reader, [])
        floor = entries[-1].at if len(entries) >= cap else -1
        figures["view"].append(len(entries))
        figures["all candidates"].append(len(candidates))
        figures["read-time rows"].append(sum(1 for at, _ in candidates if at >= floor))
        figures["reader step"].append(len(sees) + len(hidden_by_reader.get(reader, ())) + conditional
                                      + repost_candidates)
        figures["extras rows"].append(sum(1 for e in entries if e.reposted_by is not None or (
            e.in_reply_to_author_id not in (None, e.author_id, reader))))
    messages: Counter = Counter()
    for (author, _), c in tables.tweets.items():
        parent = reply_of(c)
        if parent is not None and parent[1] != author:
            messages["conditional reply -> holders"] += audience[author]
    for reposter, items in reposts.items():
        messages["joined repost -> reposter step"] += len(items)
        messages["repost candidates -> readers"] += len(items) * audience[reposter]
    edges = sum(len(s) for s in visible.values())
    messages["relations + audience deltas (per visible edge)"] += 2 * edges
    return figures, messages


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--cap", type=int, default=800)
    parser.add_argument("--repost-share", type=float, default=0.1)
    parser.add_argument("--reply-share", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    events = history(args.users, args.events, args.repost_share, args.reply_share, args.seed)
    tables = reference_tables(events)
    figures, messages = measure(tables, args.cap)
    kinds = Counter(e["type"] + ("/reply" if e.get("in_reply_to_tweet_id") else "") for e in events)
    print(f"bench_repost_candidates: {len(events):,} events ({dict(sorted(kinds.items()))}), "
          f"{args.users:,} users, cap {args.cap}, seed {args.seed}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'per reader':<16} {'p50':>8} {'p99':>8} {'mean':>9} {'total':>11}")
    for name, values in figures.items():
        values = sorted(values) or [0]
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        print(f"{name:<16} {statistics.median(values):>8.0f} {p99:>8} {statistics.fmean(values):>9.1f} "
              f"{sum(values):>11,}")
    print("shape 3 messages over the final tables (each live row sent once):")
    for name, count in messages.items():
        print(f"  {name:<48} {count:>11,}")
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
