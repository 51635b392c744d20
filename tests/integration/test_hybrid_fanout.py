"""Hybrid fan-out end to end: publish, stream, read every timeline through the gRPC API.

A small pull threshold makes several authors pull authors (their tweets merged in at read time), and
a designed history makes one author cross the threshold up and back down while the stream runs,
with a kill -9 of the stream in the middle of it. Every home timeline read page by page through
``GetHomeTimeline`` must equal the batch reference, which knows nothing about pull authors.

Blocks and mutes through the same path: one read server goes through three phases of a designed
history, each compared with the batch reference (which hides a tweet of author A from reader R when R
mutes A, R blocks A or A blocks R): follows and tweets with blocks and mutes already in them (a block
published with a follow of the same pair, so both land in one micro-batch; a mute and a block undone
in the same history; a self-block, which must become exactly one dead letter); then a block and a
mute of authors the readers follow, which take entries out; then the unblock and the unmute, which
bring them back. The pull threshold makes the blocked author a pull author, so the read-time merge
is covered as well as the inboxes. The ``blocks`` table is checked after each phase.

The kill test has a pipeline of its own and comes first. The three tests after it share one stream
process on the module's topics and keyspace (a stream start is the slow part of these tests), each
with users of its own. Their first histories are published before that stream starts, so each lands
in its first batch, as with a stream of its own. The last test stops the stream, as the backfill it
runs must rebuild everything that stream wrote.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.core.reference import reference_tables, reference_timelines
from feed_service.kafka.offsets import watermarks
from feed_service.settings import Settings
from feed_service.workload.generator import generate

from tests.support.isolation import isolated
from tests.support.pipeline import (
    StreamProcess, consume_all, grpc_server, publish, read_all_home_timelines, read_table, running, stop_cleanly,
)

#: In the blocks test bob has four followers and is read-time merged (docs/fan-out.md); everyone else
#: there is pushed.
THRESHOLD = 4
T0 = 1_767_225_600_000


class Shared(NamedTuple):
    """The module's own topics and keyspace, and the first history of each test that shares its stream,
    published: for the gRPC and the backfill tests (users ``h{tag}-*`` and ``b{tag}-*``) a history and
    the star's crossing up, in one batch; for the blocks test (``*-{tag}``) its first phase and its
    self-block."""

    pipeline: Settings
    histories: dict[str, list[dict[str, Any]]]
    tag: str
    self_block: bytes


@pytest.fixture(scope="module")
def shared(settings: Settings) -> Shared:
    unique = uuid.uuid4().hex[:10]
    pipeline = isolated(settings, unique, pull_threshold=THRESHOLD)
    tag = unique[-6:]
    histories = {test: _history(f"{letter}{tag}-") + _crossing(f"{letter}{tag}-", up=True, version=1)
                 for test, letter in (("grpc", "h"), ("backfill", "b"))}
    histories["blocks"] = _blocks_base(tag)
    self_block = json.dumps(_block(f"ann-{tag}", f"ann-{tag}", 1), separators=(",", ":")).encode()
    publish(pipeline, [e for events in histories.values() for e in events], [("blocks_mutes", self_block)])
    return Shared(pipeline, histories, tag, self_block)


@pytest.fixture(scope="module")
def stream(shared: Shared, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StreamProcess]:
    """The module's stream process on ``shared``; the backfill test stops it (cleanly), so it comes last.
    It must exit with code 0."""
    folder = tmp_path_factory.mktemp("stream")
    process = StreamProcess(shared.pipeline, folder / "ckpt", log_file=folder / "stream.log").start()
    yield process
    stop_cleanly(process)


def _crossing(prefix: str, *, up: bool, version: int) -> list[dict[str, Any]]:
    """Follows that take ``{prefix}star`` to THRESHOLD + 1 followers (up) or back to 2 (down), with
    tweets of the star in the same batch."""
    star = f"{prefix}star"
    fans = [f"{prefix}fan{i}" for i in range(THRESHOLD + 1)]
    followers = fans if up else fans[:2]
    events: list[dict[str, Any]] = [
        {"type": "follow", "op": "follow" if f in followers else "unfollow", "follower_id": f, "followee_id": star,
         "version": version} for f in fans]
    events += [{"type": "tweet", "op": "upsert", "tweet_id": f"{star}-{version}-{n}", "author_id": star,
                "version": 1, "created_at": 1_767_225_600_000 + version * 100 + n, "text": f"star {version}/{n}",
                "profile_version": 1} for n in range(3)]
    if version == 1:
        events.insert(0, {"type": "profile", "user_id": star, "version": 1, "display_name": "The Star"})
    return events


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
    """ann, bob, cat, dan, eve and fay of the blocks test."""
    return tuple(f"{name}-{tag}" for name in ("ann", "bob", "cat", "dan", "eve", "fay"))


def _blocks_base(tag: str) -> list[dict[str, Any]]:
    """The blocks test's first phase."""
    ann, bob, cat, dan, eve, fay = _blocks_users(tag)
    return [
        {"type": "profile", "user_id": bob, "version": 1, "display_name": "Bob"},
        _follow(ann, bob), _follow(cat, bob), _follow(dan, bob), _follow(fay, bob),  # bob: a pull author
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
    # so it is kept short (the gRPC and backfill tests have the full one)
    base = _history(prefix, events=200)
    publish(pipeline, base)
    checkpoint = tmp_path / "ckpt"
    args = ["--max-offsets-per-trigger", "40"]  # small batches: the crossing spans several of them
    first = StreamProcess(pipeline, checkpoint, log_file=tmp_path / "run1.log", extra_args=args).start()
    try:
        first.wait_caught_up()
        up, down, again = (_crossing(prefix, up=True, version=1), _crossing(prefix, up=False, version=2),
                           _crossing(prefix, up=True, version=3))
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


def test_home_timelines_through_grpc_equal_the_reference_with_pull_authors(
        shared: Shared, stream: StreamProcess) -> None:
    pipeline = shared.pipeline
    prefix, events = f"h{shared.tag}-", shared.histories["grpc"]
    stream.wait_caught_up()
    pulls = {a for f, a in read_table(pipeline, "SELECT follower_id, author_id FROM pull_follows")
             if a.startswith(prefix)}
    assert len(pulls) >= 3  # several authors are read-time merged, the star among them
    with grpc_server(pipeline) as server:
        assert read_all_home_timelines(server, _users(events)) == reference_timelines(events)

        # GetUserTimeline: an author's live tweets, newest first, paged, readable with any token.
        star = f"{prefix}star"
        tables = reference_tables(events)
        own = sorted(((c[1], tid, c[0], c[2]) for (a, tid), c in tables.tweets.items() if a == star), reverse=True)
        ids, token = [], ""
        while True:
            page = server.stub().GetUserTimeline(pb.GetUserTimelineRequest(user_id=star, page_size=2,
                                                                           page_token=token),
                                                 metadata=server.auth("someone-else"), timeout=10)
            ids += [(e.created_at_ms, e.tweet_id, e.version, e.text) for e in page.entries]
            assert all(e.author_display_name == "The Star" for e in page.entries)
            token = page.next_page_token
            if not token:
                break
        assert ids == own

    # the star falls back below the threshold: its tweets are pushed to its remaining followers
    more = _crossing(prefix, up=False, version=2)
    publish(pipeline, more)
    stream.wait_caught_up()
    assert not {a for _, a in read_table(pipeline, "SELECT follower_id, author_id FROM pull_follows")
                if a == f"{prefix}star"}
    with grpc_server(pipeline) as server:
        assert read_all_home_timelines(server, _users(events + more)) == reference_timelines(events + more)


def test_blocks_and_mutes_hide_and_restore_entries_through_the_stream(shared: Shared, stream: StreamProcess) -> None:
    pipeline = shared.pipeline
    ann, bob, cat, dan, eve, fay = _blocks_users(shared.tag)
    users = sorted((ann, bob, cat, dan, eve, fay))
    base = shared.histories["blocks"]  # published with the self-block before the stream started
    hiding = [_block(bob, ann, 3), _mute(cat, ann, 3), _tweet(bob, 5)]
    restoring = [_block(bob, ann, 4, "unblock"), _mute(cat, ann, 4, "unmute")]

    def blocks_rows() -> set[tuple[str, str]]:
        """The test's rows of the blocks table (the other tests' histories have blocks too)."""
        return {r for r in read_table(pipeline, "SELECT blocker_id, blocked_id FROM blocks") if r[0] in users}

    with grpc_server(pipeline) as server:
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

    # The self-block is one dead letter, with its reason (the only bad record of the module's topics).
    dead_letter = pipeline.topic("dead_letter")
    assert sum(watermarks(pipeline, ("dead_letter",))[1][dead_letter].values()) == 1
    (letter,) = consume_all(pipeline, dead_letter, expect=1)
    record = json.loads(letter.value())
    assert (record["reason_code"], record["source_topic"], record["value"]) == (
        "self_block", pipeline.topic("blocks_mutes"), shared.self_block.decode())


VIEW_TABLES = {
    "home_timeline": "SELECT timeline_id, created_at, tweet_id, author_id, version, text, profile_version FROM home_timeline",
    "author_timeline": "SELECT author_id, created_at, tweet_id, version, text, profile_version FROM author_timeline",
    "pull_follows": "SELECT follower_id, author_id FROM pull_follows",
    "pull_authors": "SELECT DISTINCT timeline_id, pull_authors FROM home_timeline",
    "tweets": "SELECT tweet_id, author_id, created_at, version, text, profile_version FROM tweets",
    "profiles": "SELECT user_id, version, display_name, avatar_url, bio FROM profiles",
}


def _view(pipeline: Settings) -> dict[str, list[tuple]]:
    rows = {table: read_table(pipeline, query) for table, query in VIEW_TABLES.items()}
    # the inbox partitions' static copy of pull_follows, as sorted tuples; and the inbox rows alone
    # (a partition holding only the static column reads as one row without a clustering key)
    rows["pull_authors"] = [(t, tuple(sorted(a))) for t, a in rows["pull_authors"] if a]
    rows["home_timeline"] = [r for r in rows["home_timeline"] if r[1] is not None]
    return {table: sorted(map(tuple, found)) for table, found in rows.items()}


def test_backfill_lays_out_the_hybrid_view_and_bootstraps_the_stream(
        shared: Shared, stream: StreamProcess, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    pipeline = shared.pipeline
    prefix, events = f"b{shared.tag}-", shared.histories["backfill"]
    stream.wait_caught_up()
    stop_cleanly(stream)  # the stream's view (of every test of the module) is what the backfill must rebuild
    streamed = _view(pipeline)
    assert [r for r in streamed["pull_follows"] if r[1].startswith(prefix)]
    assert [r for r in streamed["author_timeline"] if r[0].startswith(prefix)]
    for table in set(VIEW_TABLES) - {"pull_authors"}:  # pull_authors is a column of home_timeline
        read_table(pipeline, f"TRUNCATE {table}")

    out = tmp_path / "backfill"
    env = {**os.environ, **pipeline.to_env()}  # FEED_PULL_THRESHOLD included
    proc = subprocess.run([sys.executable, "-m", "feed_service", "backfill", "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert _view(pipeline) == streamed  # the same hybrid layout, table for table

    more = _crossing(prefix, up=False, version=2)
    with running(StreamProcess(pipeline, tmp_path / "ckpt2", log_file=tmp_path / "stream2.log",
                               extra_args=["--bootstrap-from", str(out)])) as stream:
        publish(pipeline, more)
        stream.wait_caught_up()
    with grpc_server(pipeline) as server:
        assert read_all_home_timelines(server, _users(events + more)) == reference_timelines(events + more)
