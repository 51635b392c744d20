"""Hybrid fan-out end to end: publish, stream, read every timeline through the gRPC API.

A small pull threshold makes several authors pull authors (their tweets merged in at read time), and
a designed history makes one author cross the threshold up and back down while the stream runs,
with a kill -9 of the stream in the middle of it. Every home timeline read page by page through
``GetHomeTimeline`` must equal the batch reference, which knows nothing about pull authors. (The
same without a kill, and with reposts, replies and hides: every reader of the streamed world,
tests/integration/test_world.py; the backfill of a hybrid view: tests/integration/test_backfill.py.)

Blocks and mutes through the same path, on the streamed world (tests/support/world.py): one read
server goes through three phases of a designed history of users of the test's own, each compared with
the batch reference of that history (which hides a tweet of author A from reader R when R mutes A, R
blocks A or A blocks R): follows and tweets with blocks and mutes already in them (a block published
with a follow of the same pair, so both land in one micro-batch; a mute and a block undone in the same
history; a self-block, which must become exactly one dead letter); then a block and a mute of authors
the readers follow, which take entries out; then the unblock and the unmute, which bring them back.
The blocked author has the world's pull threshold of followers, so the read-time merge is covered as
well as the inboxes. The ``blocks`` table is checked after each phase.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from feed_service.core.reference import reference_timelines
from feed_service.kafka.offsets import watermarks
from feed_service.settings import Settings
from feed_service.workload.generator import generate

from tests.support.history import crossing
from tests.support.isolation import isolated
from tests.support.pipeline import (
    StreamProcess, consume_all, grpc_server, publish, read_all_home_timelines, read_table, running,
)
from tests.support.world import PULL_THRESHOLD, World

#: The kill test's pull threshold: several of its 40 users are pull authors.
THRESHOLD = 4
T0 = 1_767_225_600_000


def _follow(follower: str, followee: str, version: int = 1, op: str = "follow") -> dict[str, Any]:
    return {"type": "follow", "op": op, "follower_id": follower, "followee_id": followee, "version": version}


def _tweet(author: str, n: int) -> dict[str, Any]:
    return {"type": "tweet", "op": "upsert", "tweet_id": f"{author}-t{n}", "author_id": author, "version": 1,
            "created_at": T0 + n * 1000 + len(author), "text": f"{author} #{n}", "profile_version": 1}


def _block(blocker: str, blocked: str, version: int, op: str = "block") -> dict[str, Any]:
    return {"type": "block", "op": op, "blocker_id": blocker, "blocked_id": blocked, "version": version}


def _mute(muter: str, muted: str, version: int, op: str = "mute") -> dict[str, Any]:
    return {"type": "mute", "op": op, "muter_id": muter, "muted_id": muted, "version": version}


def _authors(timelines: dict[str, list[dict[str, Any]]], reader: str) -> set[str]:
    return {e["author_id"] for e in timelines.get(reader, [])}


def _blocks_users(tag: str) -> tuple[str, ...]:
    """ann, bob, cat, dan, eve and fay of the blocks test, and gus and hal, who only follow bob."""
    return tuple(f"{name}-{tag}" for name in ("ann", "bob", "cat", "dan", "eve", "fay", "gus", "hal"))


def _blocks_base(tag: str) -> list[dict[str, Any]]:
    """The blocks test's first phase: bob has the world's pull threshold of followers (a pull author)."""
    ann, bob, cat, dan, eve, fay, gus, hal = _blocks_users(tag)
    bobs_followers = (ann, cat, dan, fay, gus, hal)
    assert len(bobs_followers) == PULL_THRESHOLD
    return [
        {"type": "profile", "user_id": bob, "version": 1, "display_name": "Bob"},
        *(_follow(f, bob) for f in bobs_followers),
        _follow(bob, ann), _follow(cat, ann), _follow(ann, cat), _follow(bob, cat),
        *(_tweet(author, n) for author in (ann, bob, cat, eve) for n in range(2)),
        # the pair in one batch: eve blocks dan as dan follows eve, so dan never gets eve's tweets
        _follow(dan, eve), _block(eve, dan, 1),
        # hidden, then not: dan mutes and unmutes bob, cat blocks and unblocks ann
        _mute(dan, bob, 1), _mute(dan, bob, 2, "unmute"), _block(cat, ann, 1), _block(cat, ann, 2, "unblock"),
    ]


def _history(prefix: str, events: int = 500) -> list[dict[str, Any]]:
    return list(generate(users=40, events=events, seed=5, mean_following=6, prefix=prefix))


def _users(events: list[dict[str, Any]]) -> list[str]:
    return sorted({e["follower_id"] for e in events if e["type"] == "follow"})


def test_kill_while_an_author_crosses_the_threshold(settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = isolated(settings, unique, pull_threshold=THRESHOLD)
    prefix = f"k{unique[-6:]}-"
    # a base history for the background: the stream takes it in batches of 40 before the crossings,
    # so it is kept short
    base = _history(prefix, events=200)
    publish(pipeline, base)
    checkpoint = tmp_path / "ckpt"
    args = ["--max-offsets-per-trigger", "40"]  # small batches: the crossing spans several of them
    first = StreamProcess(pipeline, checkpoint, log_file=tmp_path / "run1.log", extra_args=args).start()
    try:
        first.wait_caught_up()
        up, down, again = (crossing(prefix, THRESHOLD, up=True, version=1),
                           crossing(prefix, THRESHOLD, up=False, version=2),
                           crossing(prefix, THRESHOLD, up=True, version=3))
        publish(pipeline, up + down + again)
        done = first.progress()["timeline-join"]["batch_id"]
        first.wait_for_batch(done + 1)
    finally:
        first.kill()  # SIGKILL somewhere inside the three crossings

    events = base + up + down + again
    with running(StreamProcess(pipeline, checkpoint, log_file=tmp_path / "run2.log", extra_args=args)) as second:
        second.wait_caught_up()
    with grpc_server(pipeline) as server:
        assert read_all_home_timelines(server, _users(events)) == reference_timelines(events)
    assert {a for _, a in read_table(pipeline, "SELECT follower_id, author_id FROM pull_follows")} >= {f"{prefix}star"}


def test_blocks_and_mutes_hide_and_restore_entries_through_the_stream(world: World, unique: str) -> None:
    pipeline = world.settings
    tag = unique[-6:]
    ann, bob, cat, dan, eve, fay, gus, hal = _blocks_users(tag)
    users = sorted(_blocks_users(tag))
    base = _blocks_base(tag)
    hiding = [_block(bob, ann, 3), _mute(cat, ann, 3), _tweet(bob, 5)]
    restoring = [_block(bob, ann, 4, "unblock"), _mute(cat, ann, 4, "unmute")]
    cap = pipeline.inbox_cap

    def blocks_rows() -> set[tuple[str, str]]:
        """The test's rows of the blocks table (the world's corpus has blocks too)."""
        return {r for r in read_table(pipeline, "SELECT blocker_id, blocked_id FROM blocks") if r[0] in users}

    # the first phase with the self-block, raw (the producer refuses it): the world records where it landed
    self_block = json.dumps(_block(ann, ann, 1), separators=(",", ":")).encode()
    garbage_before = len(world.garbage)
    with world.server() as server:
        world.publish(base, [("blocks_mutes", self_block)])
        before = read_all_home_timelines(server, users, page_size=3)
        assert before == reference_timelines(base, inbox_cap=cap)
        assert {a for _, a in read_table(pipeline, "SELECT follower_id, author_id FROM pull_follows")
                if a == bob} == {bob}  # bob is read-time merged
        assert eve not in _authors(before, dan) and {bob, cat} <= _authors(before, ann) and ann in _authors(before, cat)
        assert blocks_rows() == {(eve, dan)}

        world.publish(hiding)
        hidden = read_all_home_timelines(server, users, page_size=3)
        assert hidden == reference_timelines(base + hiding, inbox_cap=cap)
        assert bob not in _authors(hidden, ann) and ann not in _authors(hidden, bob)  # both ways
        assert ann not in _authors(hidden, cat) and bob in _authors(hidden, cat)  # a mute: one way only
        assert blocks_rows() == {(eve, dan), (bob, ann)}

        world.publish(restoring)
        restored = read_all_home_timelines(server, users, page_size=3)
        assert restored == reference_timelines(base + hiding + restoring, inbox_cap=cap)
        assert {e["tweet_id"] for e in restored[ann]} >= {f"{bob}-t0", f"{bob}-t1", f"{bob}-t5"}
        assert ann in _authors(restored, bob) and ann in _authors(restored, cat)
        assert blocks_rows() == {(eve, dan)}

    # The self-block is one dead letter, with its reason: the letters of the world's topic that carry
    # its value are one record (a set: a destructive test's stream on the world's topics letters
    # records again, tests/support/world.py World.topics_for).
    (where,) = world.garbage[garbage_before:]
    dead_letter = pipeline.topic("dead_letter")
    letters = consume_all(pipeline, dead_letter,
                          expect=sum(watermarks(pipeline, ("dead_letter",))[1][dead_letter].values()))
    mine = {(m.key().decode(), r["reason_code"], r["source_topic"], r["source_partition"], r["source_offset"])
            for m in letters for r in [json.loads(m.value())] if r["value"] == self_block.decode()}
    assert mine == {(f"{where.topic}/{where.partition}/{where.offset}", "self_block", pipeline.topic("blocks_mutes"),
                     where.partition, where.offset)}
