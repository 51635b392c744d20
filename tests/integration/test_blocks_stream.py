"""Blocks and mutes end to end: publish, stream, read home timelines through the gRPC API.

One stream process and one read server go through three phases of a designed history, each compared
with the batch reference (which hides a tweet of author A from reader R when R mutes A, R blocks A
or A blocks R): follows and tweets with blocks and mutes already in them (a block published with a
follow of the same pair, so both land in one micro-batch; a mute and a block undone in the same
history; a self-block, which must become exactly one dead letter); then a block and a mute of
authors the readers follow, which take entries out; then the unblock and the unmute, which bring
them back. A low pull threshold makes the blocked author a pull author, so the read-time merge is
covered as well as the inboxes. The ``blocks`` table is checked after each phase.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from feed_service.core.reference import reference_timelines
from feed_service.kafka.offsets import watermarks
from feed_service.ops.provision import provision
from feed_service.settings import Settings

from .pipeline import StreamProcess, consume_all, grpc_server, publish, read_all_home_timelines, read_table, running

#: bob has three followers and is read-time merged (docs/fan-out.md); everyone else is pushed.
THRESHOLD = 3
T0 = 1_767_225_600_000


def _isolated(settings: Settings, unique: str) -> Settings:
    isolated = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}", pull_threshold=THRESHOLD)
    provision(isolated)
    return isolated


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


def test_blocks_and_mutes_hide_and_restore_entries_through_the_stream(
        settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = _isolated(settings, unique)
    ann, bob, cat, dan, eve = (f"{name}-{unique[-6:]}" for name in ("ann", "bob", "cat", "dan", "eve"))
    users = sorted((ann, bob, cat, dan, eve))
    base = [
        {"type": "profile", "user_id": bob, "version": 1, "display_name": "Bob"},
        _follow(ann, bob), _follow(cat, bob), _follow(dan, bob),  # bob: a pull author
        _follow(bob, ann), _follow(cat, ann), _follow(ann, cat), _follow(bob, cat),
        *(_tweet(author, n) for author in (ann, bob, cat, eve) for n in range(2)),
        # the pair in one batch: eve blocks dan as dan follows eve, so dan never gets eve's tweets
        _follow(dan, eve), _block(eve, dan, 1),
        # hidden, then not: dan mutes and unmutes bob, cat blocks and unblocks ann
        _mute(dan, bob, 1), _mute(dan, bob, 2, "unmute"), _block(cat, ann, 1), _block(cat, ann, 2, "unblock"),
    ]
    self_block = json.dumps(_block(ann, ann, 1), separators=(",", ":")).encode()
    publish(pipeline, base, [("blocks_mutes", self_block)])
    hiding = [_block(bob, ann, 3), _mute(cat, ann, 3), _tweet(bob, 5)]
    restoring = [_block(bob, ann, 4, "unblock"), _mute(cat, ann, 4, "unmute")]

    def blocks_rows() -> set[tuple[str, str]]:
        return set(read_table(pipeline, "SELECT blocker_id, blocked_id FROM blocks"))

    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log")) as stream, \
            grpc_server(pipeline) as server:
        stream.wait_caught_up()
        before = read_all_home_timelines(server, users, page_size=3)
        assert before == reference_timelines(base, inbox_cap=pipeline.inbox_cap)
        assert eve not in _authors(before, dan) and {bob, cat} <= _authors(before, ann) and ann in _authors(before, cat)
        assert blocks_rows() == {(eve, dan)}

        publish(pipeline, hiding)
        stream.wait_caught_up()
        hidden = read_all_home_timelines(server, users, page_size=3)
        assert hidden == reference_timelines(base + hiding, inbox_cap=pipeline.inbox_cap)
        assert bob not in _authors(hidden, ann) and ann not in _authors(hidden, bob)  # both ways
        assert ann not in _authors(hidden, cat) and bob in _authors(hidden, cat)  # a mute: one way only
        assert blocks_rows() == {(eve, dan), (bob, ann)}

        publish(pipeline, restoring)
        stream.wait_caught_up()
        restored = read_all_home_timelines(server, users, page_size=3)
        assert restored == reference_timelines(base + hiding + restoring, inbox_cap=pipeline.inbox_cap)
        assert {e["tweet_id"] for e in restored[ann]} >= {f"{bob}-t0", f"{bob}-t1", f"{bob}-t5"}
        assert ann in _authors(restored, bob) and ann in _authors(restored, cat)
        assert blocks_rows() == {(eve, dan)}

    # The self-block is one dead letter, with its reason.
    dead_letter = pipeline.topic("dead_letter")
    assert sum(watermarks(pipeline, ("dead_letter",))[1][dead_letter].values()) == 1
    (letter,) = consume_all(pipeline, dead_letter, expect=1)
    record = json.loads(letter.value())
    assert (record["reason_code"], record["source_topic"], record["value"]) == (
        "self_block", pipeline.topic("blocks_mutes"), self_block.decode())
