"""The backfill job on the real stack: Kafka changelogs -> Spark batch join -> Cassandra, and the
stream bootstrapped from it. Every test compares with the engine's batch reference.

One round trip serves the first two tests (a stream start and a backfill are the slow parts): the
stream runs over a history, its view is wiped and the backfill command rebuilds it (``rebuilt``); the
first test checks the rebuild, the second bootstraps a stream from that backfill and continues it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from feed_service.core.events import event_to_json, parse_event
from feed_service.core.reference import reference_tables, reference_timelines
from feed_service.kafka.client_config import client_config
from feed_service.kafka.keys import ROLE_OF_TYPE
from feed_service.security.roles import PRODUCER
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from spark_jobs.backfill import BackfillOptions, run_backfill
from spark_jobs.backfill.join import join_timelines_batch
from spark_jobs.backfill.read import classify, read_snapshot, valid_events
from spark_jobs.backfill.snapshot import Snapshot
from spark_jobs.backfill.states import state_timeline_rows
from spark_jobs.backfill.winners import winning_changes
from spark_jobs.envelope import parse_changes

from tests.support.isolation import isolated
from tests.support.pipeline import GARBAGE, StreamProcess, publish, read_table, read_timelines, running

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: cwd of the CLI runs below
TABLES = ("home_timeline", "tweets", "profiles", "blocks")
#: The (subject, object) fields of a block and of a mute edge.
HIDE_ENDS = {"block": ("blocker_id", "blocked_id"), "mute": ("muter_id", "muted_id")}


def _history(seed: int, events: int = 600) -> list[dict]:
    return list(generate(users=30, events=events, seed=seed, mean_following=6, prefix=f"b{seed}-"))


def _hide(kind: str, op: str, subject: str, target: str, version: int) -> dict:
    """A block or mute envelope."""
    return {"type": kind, "op": op, HIDE_ENDS[kind][0]: subject, HIDE_ENDS[kind][1]: target, "version": version}


def _hides(events: list[dict], seed: int, count: int = 24) -> list[dict]:
    """Blocks and mutes over follow edges of ``events``, so that they hide rows: mutes, blocks by the
    reader and by the author; some lifted later (unblock, unmute), some lifted at the same version (a
    tie: the hiding op wins); and a block of a user with no other change (a key of blocks only)."""
    rnd = random.Random(seed)
    follows = sorted({(e["follower_id"], e["followee_id"]) for e in events if e["type"] == "follow"})
    top = max(e["version"] for e in events) + 1
    out = []
    for i, (reader, author) in enumerate(rnd.sample(follows, count)):
        kind, subject, target = [("mute", reader, author), ("block", reader, author), ("block", author, reader)][i % 3]
        out.append(_hide(kind, kind, subject, target, top + i))
        if i % 4 == 1:
            out.append(_hide(kind, "un" + kind, subject, target, top + i + 1))
        elif i % 4 == 2:
            out.append(_hide(kind, "un" + kind, subject, target, top + i))
    return out + [_hide("block", "block", follows[0][0], f"loner-{seed}", top)]


def _blocks_in_force(events: list[dict]) -> list[tuple[str, str]]:
    """``(blocker_id, blocked_id)`` of the reference's blocks in force: the rows of the blocks table."""
    return sorted(edge for edge, (_, on) in reference_tables(events).blocks.items() if on)


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def _tables(settings: Settings) -> dict[str, list[tuple]]:
    return {
        "tweets": sorted(read_table(settings, "SELECT tweet_id, author_id, created_at, version, text, profile_version"
                                              " FROM tweets")),
        "profiles": sorted(read_table(settings, "SELECT user_id, version, display_name, avatar_url, bio FROM profiles")),
        "blocks": sorted(read_table(settings, "SELECT blocker_id, blocked_id FROM blocks")),
    }


class Rebuilt(NamedTuple):
    """A pipeline the stream ran on, its view wiped and rebuilt by the backfill command, and what was
    read at each step."""

    pipeline: Settings
    events: list[dict]
    streamed: dict[str, list[dict[str, Any]]]
    streamed_tables: dict[str, list[tuple]]
    wiped: dict[str, list[dict[str, Any]]]
    out: Path
    backfill: subprocess.CompletedProcess
    timelines: dict[str, list[dict[str, Any]]]
    tables: dict[str, list[tuple]]


@pytest.fixture(scope="module")
def rebuilt(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Rebuilt:
    """The stream over a history with blocks, mutes and bad records; then its view truncated and
    rebuilt by ``feedctl backfill``, the real command as an operator runs it."""
    pipeline = isolated(settings)
    tmp = tmp_path_factory.mktemp("rebuilt")
    events = _history(seed=11)
    events += _hides(events, seed=11)
    publish(pipeline, events, GARBAGE)
    with running(StreamProcess(pipeline, tmp / "ckpt", log_file=tmp / "stream.log")) as stream:
        stream.wait_caught_up()
    streamed, streamed_tables = read_timelines(pipeline), _tables(pipeline)

    for table in TABLES:
        read_table(pipeline, f"TRUNCATE {table}")
    wiped = read_timelines(pipeline)

    out = tmp / "backfill"
    proc = subprocess.run([sys.executable, "-m", "feed_service", "backfill", "--out", str(out)], cwd=REPO_ROOT,
                          env={**os.environ, **pipeline.to_env()}, capture_output=True, text=True, timeout=600)
    return Rebuilt(pipeline, events, streamed, streamed_tables, wiped, out, proc, read_timelines(pipeline),
                   _tables(pipeline))


def test_backfill_after_wipe_rebuilds_what_the_stream_wrote(rebuilt: Rebuilt) -> None:
    pipeline, events, streamed, out, proc = (rebuilt.pipeline, rebuilt.events, rebuilt.streamed, rebuilt.out,
                                             rebuilt.backfill)
    assert streamed == reference_timelines(events)
    assert rebuilt.streamed_tables["blocks"] == _blocks_in_force(events)
    assert rebuilt.wiped == {}

    assert proc.returncode == 0, proc.stderr[-4000:]
    assert rebuilt.timelines == streamed
    assert rebuilt.tables == rebuilt.streamed_tables

    manifest = json.loads((out / "manifest.json").read_text())
    summary = manifest["summary"]
    assert summary["records_read"] == len(events) + len(GARBAGE)
    assert summary["invalid"] == len(GARBAGE) and summary["tombstones"] == 0
    assert summary["rows"]["timeline"] == sum(len(t) for t in streamed.values())
    assert summary["timelines"] == len(streamed)
    assert "backfill summary" in proc.stderr and "stage write: done" in proc.stderr
    for topic, parts in manifest["end_offsets"].items():  # per partition progress lines
        for p in parts:
            assert f"{topic} p{p}:" in proc.stderr

    # Running it again is a no-op on the data (in place, idempotent), and refuses a used folder.
    again = subprocess.run([sys.executable, "-m", "feed_service", "backfill", "--out", str(out)], cwd=REPO_ROOT,
                           env={**os.environ, **pipeline.to_env()}, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "already holds a completed backfill" in again.stderr


def _continuation(events: list[dict], seed: int) -> list[dict]:
    """Later changes that need the stream's state from the backfill to be applied right: deletes and
    edits of old tweets (followers from state), unfollows (retained tweets from state), new follows of
    old authors (their tweets backfilled into the new inbox), blocks and mutes lifted (the hidden rows
    come back) or lifted at the winner's version (a tie: still hidden), new blocks and mutes, follows
    of a user who blocks the follower (still hidden), and fresh tweets."""
    rnd = random.Random(seed)
    parsed = [parse_event(e) for e in events]
    top = max(e["version"] for e in events) + 1
    ups = [e for e in events if e["type"] == "tweet" and e["op"] == "upsert"]
    deleted = {e["tweet_id"] for e in events if e["type"] == "tweet" and e["op"] == "delete"}
    live = [e for e in ups if e["tweet_id"] not in deleted]
    more: list[dict] = []
    for e in rnd.sample(live, 15):
        more.append({**e, "version": top + len(more), "text": "edited later: " + e["text"]})
    for e in rnd.sample([e for e in live if e not in more], 10):
        more.append({"type": "tweet", "op": "delete", "tweet_id": e["tweet_id"], "author_id": e["author_id"],
                     "version": top + len(more)})
    edges = {(ev.follower_id, ev.followee_id) for ev in parsed if type(ev).__name__ == "FollowChange"}
    for follower, followee in rnd.sample(sorted(edges), 10):
        more.append({"type": "follow", "op": rnd.choice(["unfollow", "follow"]), "follower_id": follower,
                     "followee_id": followee, "version": top + len(more)})
    users = sorted({e["author_id"] for e in ups})
    for _ in range(10):
        a, b = rnd.sample(users, 2)
        more.append({"type": "follow", "op": "follow", "follower_id": a, "followee_id": b, "version": top + len(more)})
    tables = reference_tables(events)
    in_force = sorted([("block", *edge, v) for edge, (v, on) in tables.blocks.items() if on]
                      + [("mute", *edge, v) for edge, (v, on) in tables.mutes.items() if on])
    lifted = rnd.sample(in_force, 8)
    for i, (kind, subject, target, version) in enumerate(lifted):
        more.append(_hide(kind, "un" + kind, subject, target, top + len(more) if i % 2 else version))
    for i, (follower, followee) in enumerate(rnd.sample(sorted(edges), 6)):
        kind, subject, target = [("mute", follower, followee), ("block", follower, followee),
                                 ("block", followee, follower)][i % 3]
        more.append(_hide(kind, kind, subject, target, top + len(more)))
    kept = [edge for edge in in_force if edge[0] == "block" and edge not in lifted]
    for _, blocker, blocked, _ in kept[:4]:
        more.append({"type": "follow", "op": "follow", "follower_id": blocked, "followee_id": blocker,
                     "version": top + len(more)})
    more += _history(seed=seed, events=150)[-100:]  # new tweets etc. of another prefix's users
    return more


def test_stream_bootstrapped_from_backfill_continues_exactly(rebuilt: Rebuilt, spark, tmp_path: Path) -> None:
    pipeline, events, out = rebuilt.pipeline, rebuilt.events, rebuilt.out
    assert rebuilt.backfill.returncode == 0, rebuilt.backfill.stderr[-4000:]
    manifest = json.loads((out / "manifest.json").read_text())
    backfill_ts = manifest["backfill_ts"]
    assert rebuilt.timelines == reference_timelines(events)
    assert rebuilt.tables["blocks"] == _blocks_in_force(events)

    # The DataFrame join and the engine's states hold exactly the same rows.
    snap = Snapshot(manifest["start_offsets"], manifest["end_offsets"])
    winners = winning_changes(valid_events(classify(parse_changes(read_snapshot(spark, pipeline, snap)))))
    joined = _rows(join_timelines_batch(winners, 800, pipeline.pull_threshold))
    from_states = _rows(state_timeline_rows(spark.read.parquet(str(out / "state"))))
    assert joined == from_states and len(joined) == manifest["summary"]["rows"]["timeline"]

    more = _continuation(events, seed=13)
    checkpoint = tmp_path / "ckpt"
    with running(StreamProcess(pipeline, checkpoint, log_file=tmp_path / "stream.log",
                               extra_args=["--bootstrap-from", str(out)])) as stream:
        publish(pipeline, more)
        stream.wait_caught_up()
        assert read_timelines(pipeline) == reference_timelines(events + more)
        assert _tables(pipeline)["blocks"] == _blocks_in_force(events + more)
    assert int((checkpoint / "clock_start").read_text()) == backfill_ts

    # Nothing of the backfilled history was applied twice: rows the continuation did not touch keep
    # the backfill's timestamp, everything the stream wrote is above it.
    stamps = [r[0] for r in read_table(pipeline, "SELECT writetime(version) FROM home_timeline")]
    assert min(stamps) == backfill_ts and stamps.count(backfill_ts) > len(stamps) // 2
    assert any(s > backfill_ts for s in stamps)

    # A second bootstrap into the now used checkpoint is refused before Spark starts.
    again = subprocess.run([sys.executable, "-m", "spark_jobs.stream", "--checkpoint", str(checkpoint),
                            "--bootstrap-from", str(out)], cwd=REPO_ROOT,
                           env={**os.environ, **pipeline.to_env()}, capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "committed batches" in again.stderr


def _noisy(events: list[dict], seed: int) -> list[dict]:
    """Duplicates, older versions and same-version ties of every kind, shuffled."""
    rnd = random.Random(seed)
    out = list(events)
    for e in events:
        if rnd.random() > 0.35:
            continue
        out.append(dict(e))  # duplicate
        if e["type"] == "tweet" and e["op"] == "upsert":
            out.append({**e, "text": e["text"] + " (same version, other text)"})
            if e["version"] > 0:
                out.append({**e, "version": e["version"] - 1, "text": "stale"})
        elif e["type"] == "tweet":
            out.append({**e, "version": 0})  # an older delete: still final
        elif e["type"] == "follow":
            out.append({**e, "op": "unfollow" if e["op"] == "follow" else "follow"})  # tie: unfollow wins
            out.append({**e, "op": "follow", "version": max(e["version"] - 1, 0)})  # stale re-follow
        elif e["type"] in HIDE_ENDS:
            other = e["op"][2:] if e["op"].startswith("un") else "un" + e["op"]
            out.append({**e, "op": other})  # tie: block (mute) wins
            out.append({**e, "op": other, "version": max(e["version"] - 1, 0)})  # stale
        else:
            out.append({**e, "display_name": e["display_name"] + " (tie)", "bio": None})
    rnd.shuffle(out)
    return out


def test_backfill_skips_tombstones_and_keeps_each_entitys_winner(
    settings: Settings, spark, unique: str, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    pipeline = isolated(settings, unique)
    history = _history(seed=14, events=400)
    events = _noisy(history + _hides(history, seed=14), seed=14)
    publish(pipeline, events[: len(events) // 2])
    raw = Producer(client_config(pipeline, PRODUCER))
    tombstones = 0
    for e in events[:40]:  # compaction markers (null values) for keys of every topic, mid-log
        raw.produce(pipeline.topic(ROLE_OF_TYPE[e["type"]]), key=f"tombstone-{tombstones}".encode(), value=None)
        tombstones += 1
    assert raw.flush(30) == 0
    publish(pipeline, events[len(events) // 2:])

    cap = 3  # small: authors exceed it, so retention at the cap is exercised too
    result = run_backfill(spark, pipeline.replace(inbox_cap=cap), BackfillOptions(out=tmp_path / "backfill"))
    summary = result.summary
    assert summary["tombstones"] == tombstones and summary["invalid"] == 0
    assert summary["records_read"] == len(events) + tombstones

    # The store is the reference at the cap: the engine states' inbox rows, each timeline's newest
    # `cap` of them (the bound of trimmed inboxes, docs/trimming.md).
    stored = read_timelines(pipeline)
    assert stored == reference_timelines(events, inbox_cap=cap)
    from_states = _rows(state_timeline_rows(spark.read.parquet(str(tmp_path / "backfill" / "state"))))
    per_timeline: dict[str, list[tuple]] = {}
    for row in from_states:
        per_timeline.setdefault(row[0], []).append(row)
    newest = [r for rows in per_timeline.values() for r in sorted(rows, key=lambda r: (r[3], r[1], r[2]))[-cap:]]
    stored_rows = [(*r[:7], r[7] or None, r[8] or None)  # '' is stored for no reply
                   for r in read_table(pipeline, "SELECT timeline_id, tweet_id, author_id, created_at, version, text,"
                                                 " profile_version, in_reply_to_tweet_id, in_reply_to_author_id"
                                                 " FROM home_timeline") if r[1] is not None]
    assert sorted(stored_rows) == sorted(newest) and len(stored_rows) == summary["rows"]["timeline"]
    assert len(from_states) > len(stored_rows)  # the states hold more: the cut did cut

    # Winners by the engine's rules: tweet text and version, profile payloads per (user, version),
    # blocks and mutes in force.
    tables = reference_tables(events)
    want_tweets = sorted((tid, a, c[1], c[0], c[2], c[3]) for (a, tid), c in tables.tweets.items())
    got = _tables(pipeline)
    assert got["tweets"] == want_tweets
    assert got["profiles"] == sorted((u, v, *p) for (u, v), p in tables.profiles.items())
    assert got["blocks"] == _blocks_in_force(events)
    assert summary["entities"]["mutes_in_force"] == sum(1 for _, on in tables.mutes.values() if on)
    assert summary["entities"]["tweets_deleted"] == len(tables.deleted)
    assert summary["entities"]["follow_edges_active"] == sum(1 for _, a in tables.follows.values() if a)


def test_backfill_no_write_leaves_cassandra_alone(settings: Settings, spark, unique: str, tmp_path: Path) -> None:
    pipeline = isolated(settings, unique)
    events = [event_to_json(parse_event(e)) for e in _history(seed=15, events=100)]
    publish(pipeline, events)
    result = run_backfill(spark, pipeline, BackfillOptions(out=tmp_path / "backfill", write=False))
    assert read_timelines(pipeline) == {}
    assert result.summary["written"] is False
    assert result.summary["rows"]["timeline"] == sum(len(t) for t in reference_timelines(events).values())
