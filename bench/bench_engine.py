"""Throughput of the timeline join step on a generated power-law workload.

Run: ``.venv/bin/python bench/bench_engine.py`` (about 20 s with the defaults; ``--help`` for sizes).

Workload: every user follows ``--follows-per-user`` authors drawn with Zipf weights, so the top
authors have thousands of followers; then a stream of tweets (authors also Zipf-weighted), edits,
deletes, follows and unfollows, in micro-batches grouped by author key exactly as the Spark job does.
Only ``step`` is timed for the throughput figures; grouping is done up front. Times are CPU
seconds of this process (``time.process_time``), so a busy machine does not deflate them. Timeline deltas are
counted exploded (sum of ``len(timeline_ids)``); the cost of exploding them in Python is reported
separately, since in the real pipeline the JVM does it. The state codec is timed per key on its own.

Blocks and mutes (docs/blocks-and-mutes.md): the stream is run twice side by side, as generated and
with block and mute changes added so that they are ``--hide-share`` of all events (mostly mutes and
blocks of followed authors, some undone later), every other event the same; then the per-key cost of
a reader blocking an author with ``--inbox-cap`` retained tweets and of an author with
``--blocking-author-followers`` followers blocking one reader.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import marshal
import pickle
import random
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from feed_service.core.events import (  # noqa: E402
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    TweetDelete,
    TweetUpsert,
    join_keys,
)
from feed_service.core.join import DEFAULT_INBOX_CAP, DEFAULT_PULL_THRESHOLD, StepResult, step  # noqa: E402
from feed_service.core.state import AuthorState, decode_state, encode_state  # noqa: E402
from feed_service.core.stored_step import step_stored, stored_parts  # noqa: E402


def zipf_sampler(n: int, alpha: float, rnd: random.Random) -> Callable[[], int]:
    """Return a sampler of ranks 0..n-1 with P(rank k) proportional to 1/(k+1)^alpha."""
    cumulative = list(itertools.accumulate(1.0 / (k + 1) ** alpha for k in range(n)))
    total = cumulative[-1]
    return lambda: bisect.bisect_left(cumulative, rnd.random() * total)


def generate(args: argparse.Namespace) -> tuple[list[Event], list[Event]]:
    """Return (bootstrap events: follows and profiles, stream events)."""
    rnd = random.Random(args.seed)
    users = [f"u{i}" for i in range(args.users)]
    pick_author = zipf_sampler(args.users, args.alpha, rnd)
    # How much a user tweets is Zipf too, but independent of how many followers they have.
    by_activity = users[:]
    rnd.shuffle(by_activity)
    pick_active = zipf_sampler(args.users, args.alpha, rnd)
    edges: set[tuple[str, str]] = set()
    for follower in users:
        for _ in range(args.follows_per_user):
            followee = users[pick_author()]
            if followee != follower:
                edges.add((follower, followee))
    boot: list[Event] = [FollowChange(f, a, 1, "follow") for f, a in edges]
    boot += [ProfileVersion(u, 1, f"User {u}") for u in users]
    rnd.shuffle(boot)

    stream: list[Event] = []
    tweets: list[tuple[str, str, int]] = []  # (tweet_id, author, created_at)
    versions: dict[str, int] = {}
    edge_list = sorted(edges)
    for i in range(args.events):
        r = rnd.random()
        now = 1_700_000_000_000 + i
        if r < 0.85 or not tweets:
            author = by_activity[pick_active()]
            tid = f"t{i}"
            tweets.append((tid, author, now))
            versions[tid] = 1
            stream.append(TweetUpsert(tid, author, 1, now, f"tweet {i} " + "x" * 60, 1))
        elif r < 0.90:
            tid, author, created = tweets[rnd.randrange(len(tweets))]
            versions[tid] = versions.get(tid, 1) + 1
            stream.append(TweetUpsert(tid, author, versions[tid], created, f"edited {i}", 1))
        elif r < 0.93:
            tid, author, _ = tweets[rnd.randrange(len(tweets))]
            stream.append(TweetDelete(tid, author, 99))
        elif r < 0.98:
            stream.append(FollowChange(users[rnd.randrange(len(users))], users[pick_author()], 2, "follow"))
        else:
            follower, followee = edge_list[rnd.randrange(len(edge_list))]
            stream.append(FollowChange(follower, followee, 3, "unfollow"))
    stream = [e for e in stream if not (isinstance(e, FollowChange) and e.follower_id == e.followee_id)]
    return boot, stream


def with_hides(stream: list[Event], boot: list[Event], share: float, seed: int) -> list[Event]:
    """``stream`` with block and mute changes interleaved so that they are ``share`` of the result.

    Most target an author the user follows (that is when hiding matters): 55 % mutes, 20 % blocks by
    the reader, 10 % blocks of a follower by the author, 15 % undo an earlier one.
    """
    if share <= 0:
        return stream
    rnd = random.Random(seed + 1)
    edges = [(e.follower_id, e.followee_id) for e in boot if isinstance(e, FollowChange)]
    extra = round(len(stream) * share / (1 - share))
    versions: dict[tuple[str, str, str], int] = {}
    done: list[Event] = []
    hides: list[Event] = []
    for _ in range(extra):
        r = rnd.random()
        if r < 0.15 and done:
            old = done.pop(rnd.randrange(len(done)))
            if isinstance(old, MuteChange):
                k = ("mute", old.muter_id, old.muted_id)
                versions[k] += 1
                hides.append(MuteChange(old.muter_id, old.muted_id, versions[k], "unmute"))
            else:
                k = ("block", old.blocker_id, old.blocked_id)
                versions[k] += 1
                hides.append(BlockChange(old.blocker_id, old.blocked_id, versions[k], "unblock"))
            continue
        reader, author = edges[rnd.randrange(len(edges))]
        if r < 0.70:
            k = ("mute", reader, author)
            versions[k] = versions.get(k, 0) + 1
            ev: Event = MuteChange(reader, author, versions[k], "mute")
        else:
            blocker, blocked = (reader, author) if r < 0.90 else (author, reader)
            k = ("block", blocker, blocked)
            versions[k] = versions.get(k, 0) + 1
            ev = BlockChange(blocker, blocked, versions[k], "block")
        hides.append(ev)
        done.append(ev)
    # Spread them evenly through the stream, in their own order (an undo after what it undoes).
    out: list[Event] = []
    every = (len(stream) + len(hides)) / max(len(hides), 1)
    h = 0
    for i, ev in enumerate(stream):
        while h < len(hides) and (h + 1) * every <= len(out) + 1:
            out.append(hides[h])
            h += 1
        out.append(ev)
    out.extend(hides[h:])
    return out


def batches_by_key(events: list[Event], batch_size: int) -> list[dict[str, list[Event]]]:
    """Cut ``events`` into micro-batches, each grouped by join key (the shuffle of the Spark job)."""
    out = []
    for i in range(0, len(events), batch_size):
        groups: dict[str, list[Event]] = {}
        for e in events[i : i + batch_size]:
            for key in join_keys(e):  # a block goes to both of its users
                groups.setdefault(key, []).append(e)
        out.append(groups)
    return out


def run_steps(states: dict[str, AuthorState], batches: list[dict[str, list[Event]]], inbox_cap: int,
              keep: list[StepResult] | None, pull_threshold: int) -> tuple[float, int, int, int, int]:
    """Run every step; return (seconds, events, steps, delta records, exploded deltas)."""
    events = steps = records = deltas = 0
    elapsed = 0.0
    for groups in batches:
        t0 = time.process_time()
        for key, changes in groups.items():
            result = step(states.get(key), changes, inbox_cap=inbox_cap, pull_threshold=pull_threshold, key=key)
            states[key] = result.state
            for d in result.deltas:
                deltas += len(d.timeline_ids)
            records += len(result.deltas)
            if keep is not None and len(keep) < 5000:
                keep.append(result)
        elapsed += time.process_time() - t0
        events += len({id(e) for c in groups.values() for e in c})  # a block counts once
        steps += len(groups)
    return elapsed, events, steps, records, deltas


def explode_cost(results: list[StepResult], limit: int = 2_000_000) -> tuple[float, int]:
    """Time to widen compact deltas into one tuple per timeline row, in Python (the JVM's job)."""
    n = 0
    t0 = time.process_time()
    for r in results:
        rows = [(uid, op, entry, r.ts) for op, entry, ids in r.deltas for uid in ids]
        n += len(rows)
        if n >= limit:
            break
    return time.process_time() - t0, n


def codec_figures(states: dict[str, AuthorState]) -> list[str]:
    """Encode/decode cost per key, and the alternatives considered, on all states and the largest."""
    lines = []
    all_states = list(states.values())
    t0 = time.process_time()
    blobs = [encode_state(s) for s in all_states]
    t1 = time.process_time()
    for b in blobs:
        decode_state(b)
    t2 = time.process_time()
    n = len(all_states)
    lines.append(f"codec (pickle, used): {n} keys, mean {statistics.fmean(map(len, blobs)):.0f} B/key, "
                 f"encode {1e6 * (t1 - t0) / n:.1f} us/key, decode {1e6 * (t2 - t1) / n:.1f} us/key")
    by_bytes = all_states[max(range(n), key=lambda i: len(blobs[i]))]
    by_followers = max(all_states, key=lambda s: len(s.followers))
    for label, big in (("largest state", by_bytes), ("most followers", by_followers)):
        lines.append(f"{label}: {len(big.followers)} followers, {len(big.tweets)} tweets, {len(big.cold)} cold, "
                     f"{len(big.deleted)} tombstones")
        lines.extend(_compare_codecs(big))
    return lines


def _compare_codecs(big: AuthorState) -> list[str]:
    plain = (big.key, big.clock, dict(big.followers), big.active, dict(big.tweets), dict(big.cold),
             frozenset(big.deleted), dict(big.profiles))
    jsonable = (big.key, big.clock, dict(big.followers), big.active, dict(big.tweets), dict(big.cold),
                sorted(big.deleted), {str(k): v for k, v in big.profiles.items()})
    codecs: dict[str, tuple[Callable[[], bytes], Callable[[bytes], object]]] = {
        "pickle": (lambda: pickle.dumps(plain, protocol=5), pickle.loads),
        "marshal": (lambda: marshal.dumps(plain), marshal.loads),
        "json+zlib": (lambda: zlib.compress(json.dumps(jsonable).encode(), 1), lambda b: json.loads(zlib.decompress(b))),
        "pickle+zlib": (lambda: zlib.compress(pickle.dumps(plain, protocol=5), 1), lambda b: pickle.loads(zlib.decompress(b))),
    }
    lines = []
    for name, (enc, dec) in codecs.items():
        reps = 20
        t0 = time.process_time()
        for _ in range(reps):
            blob = enc()
        t1 = time.process_time()
        for _ in range(reps):
            dec(blob)
        t2 = time.process_time()
        lines.append(f"  {name:12s} {len(blob):9d} B  encode {1e3 * (t1 - t0) / reps:7.2f} ms  "
                     f"decode {1e3 * (t2 - t1) / reps:7.2f} ms")
    return lines


def celebrity_figures(followers: int, tweets: int, inbox_cap: int) -> list[str]:
    """One author with ``followers`` followers tweeting, push against pull: the per-key work of a
    micro-batch holding one new tweet, through the stored state as the stream keeps it (decode what
    the step needs, step, encode what changed), and the rows it leaves to write."""
    boot = [FollowChange(f"f{i}", "celeb", 1, "follow") for i in range(followers)]
    boot += [TweetUpsert(f"old{i}", "celeb", 1, i, "x" * 80, 1) for i in range(inbox_cap)]
    lines = []
    for mode, threshold in (("push", followers + 1), ("pull", followers)):
        state = step(None, boot, inbox_cap=inbox_cap, pull_threshold=threshold).state
        core, edges = stored_parts(encode_state(state))
        per_step, rows = [], 0
        for n in range(tweets):
            t0 = time.process_time()
            done = step_stored(core, lambda: edges, [TweetUpsert(f"new{n}", "celeb", 1, 10**9 + n, "hello", 1)],
                               inbox_cap=inbox_cap, pull_threshold=threshold)
            per_step.append(time.process_time() - t0)
            core = done.core or core
            edges = done.edges or edges
            r = done.result
            rows = sum(len(d.timeline_ids) for d in r.deltas) + len(r.author_timeline) + len(r.tweets)
        lines.append(f"  {mode}: {1e3 * statistics.median(per_step):8.2f} ms per one-tweet batch (median of {tweets}),"
                     f" {rows:,} rows to write, state read {len(core) + (len(edges or b'') if mode == 'push' else 0):,} B")
    return lines


def block_cost_figures(inbox_cap: int, pull_threshold: int, author_followers: int, reps: int = 20) -> list[str]:
    """The per-key work (stored state: decode what is needed, step, encode) and the rows left to
    write of two single blocks: a reader blocking an author with ``inbox_cap`` retained tweets, and
    an author with ``author_followers`` followers blocking one of them."""
    lines = []
    tweets = [TweetUpsert(f"old{i}", "star", 1, i, "x" * 80, 1) for i in range(inbox_cap)]

    def measure(label: str, boot: list[Event], event: Event, key: str, threshold: int) -> None:
        state = step(None, boot, inbox_cap=inbox_cap, pull_threshold=threshold, key=key).state
        core, edges = stored_parts(encode_state(state))
        times, result = [], None
        for _ in range(reps):
            t0 = time.process_time()
            done = step_stored(core, lambda: edges, [event], inbox_cap=inbox_cap, pull_threshold=threshold, key=key)
            times.append(time.process_time() - t0)
            result = done.result
        assert result is not None
        inboxes = sorted({uid for d in result.deltas for uid in d.timeline_ids})
        pulls = sorted({uid for p in result.pull_follows for uid in p.follower_ids})
        lines.append(f"  {label}: {1e3 * statistics.median(times):7.2f} ms at key {key!r} (median of {reps}), "
                     f"{result.delta_count:,} inbox rows in {len(inboxes)} inbox(es) {inboxes[:3]}, "
                     f"{len(pulls)} pull-follow row(s) {pulls[:3]}, {len(result.blocks)} blocks row(s)")

    few = [FollowChange(f"f{i}", "star", 1, "follow") for i in range(100)] + tweets
    measure("reader f7 blocks a push author (100 followers, {:,} tweets)".format(inbox_cap), few,
            BlockChange("f7", "star", 1, "block"), "star", pull_threshold)
    measure("reader f7 mutes it", few, MuteChange("f7", "star", 1, "mute"), "star", pull_threshold)
    many = [FollowChange(f"f{i}", "star", 1, "follow") for i in range(author_followers)] + tweets
    measure(f"an author with {author_followers:,} followers (pull) blocks reader f7", many,
            BlockChange("star", "f7", 1, "block"), "star", pull_threshold)
    measure(f"the same author as a push author blocks f7", many,
            BlockChange("star", "f7", 1, "block"), "star", author_followers + 1)
    reader_boot = [FollowChange("star", "f7", 1, "follow"), TweetUpsert("r1", "f7", 1, 1, "hi", 1)]
    measure("the blocked reader's own key (the author follows it)", reader_boot,
            BlockChange("star", "f7", 1, "block"), "f7", pull_threshold)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--follows-per-user", type=int, default=20)
    parser.add_argument("--alpha", type=float, default=0.8, help="Zipf exponent of popularity and activity")
    parser.add_argument("--events", type=int, default=200_000, help="stream events after the follow graph")
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--inbox-cap", type=int, default=DEFAULT_INBOX_CAP)
    parser.add_argument("--pull-threshold", type=int, default=DEFAULT_PULL_THRESHOLD)
    parser.add_argument("--celebrity-followers", type=int, default=1_000_000,
                        help="followers of the author of the push-vs-pull figures (0: skip them)")
    parser.add_argument("--hide-share", type=float, default=0.1,
                        help="share of block and mute changes in the second stream run (0: skip it)")
    parser.add_argument("--blocking-author-followers", type=int, default=50_000,
                        help="followers of the author who blocks one reader (0: skip the block costs)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    t0 = time.process_time()
    boot, stream = generate(args)
    states: dict[str, AuthorState] = {}
    boot_batches = batches_by_key(boot, args.batch_size)
    stream_batches = batches_by_key(stream, args.batch_size)
    print(f"generated {len(boot):,} bootstrap + {len(stream):,} stream events in {time.process_time() - t0:.1f} s CPU")

    el, ev, st, _, _ = run_steps(states, boot_batches, args.inbox_cap, None, args.pull_threshold)
    followers = sorted((len(s.active) for s in states.values()), reverse=True)
    print(f"bootstrap: {ev:,} events in {el:.2f} s = {ev / el:,.0f} events/s ({st:,} steps)")
    print(f"followers per author: max {followers[0]:,}, top-10 {followers[:10]}, median {followers[len(followers) // 2]}")

    booted = dict(states)
    kept: list[StepResult] = []
    el, ev, st, rec, deltas = run_steps(states, stream_batches, args.inbox_cap, kept, args.pull_threshold)
    print(f"stream: {ev:,} events, {st:,} steps, {rec:,} delta records, {deltas:,} timeline deltas in {el:.2f} s")
    print(f"  {ev / el:,.0f} events/s   {deltas / el:,.0f} timeline deltas/s   {rec / el:,.0f} delta records/s   "
          f"{1e6 * el / st:.1f} us/step")
    if args.hide_share > 0:
        hidden = with_hides(stream, boot, args.hide_share, args.seed)
        h_states = dict(booted)
        h_el, h_ev, h_st, h_rec, h_deltas = run_steps(h_states, batches_by_key(hidden, args.batch_size),
                                                      args.inbox_cap, None, args.pull_threshold)
        print(f"stream with {args.hide_share:.0%} blocks and mutes: {h_ev:,} events ({h_ev - ev:,} of them blocks "
              f"and mutes), {h_st:,} steps, {h_deltas:,} timeline deltas in {h_el:.2f} s")
        print(f"  {h_ev / h_el:,.0f} events/s ({h_ev / h_el / (ev / el):.2f}x the stream without them), "
              f"{h_deltas / h_el:,.0f} timeline deltas/s ({h_deltas / h_el / (deltas / el):.2f}x), "
              f"the same other events in {h_el / el:.2f}x the time")
    ex_t, ex_n = explode_cost(kept)
    print(f"  exploding in Python (not done by the engine): {ex_n / ex_t:,.0f} rows/s")
    for line in codec_figures(states):
        print(line)
    if args.blocking_author_followers:
        print("single blocks and mutes (per-key work through the stored state):")
        for line in block_cost_figures(args.inbox_cap, args.pull_threshold, args.blocking_author_followers):
            print(line)
    if args.celebrity_followers:
        print(f"an author with {args.celebrity_followers:,} followers tweets (per-key work, push vs pull):")
        for line in celebrity_figures(args.celebrity_followers, 20, args.inbox_cap):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
