"""Hybrid fan-out end to end: publish, stream, read every timeline through the gRPC API.

A small pull threshold makes several authors pull authors (their tweets merged in at read time), and
a designed history makes one author cross the threshold up and back down while the stream runs,
with a kill -9 of the stream in the middle of it. Every home timeline read page by page through
``GetHomeTimeline`` must equal the batch reference, which knows nothing about pull authors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from feed_service.api import timeline_pb2 as pb
from feed_service.core.reference import reference_tables, reference_timelines
from feed_service.ops.provision import provision
from feed_service.settings import Settings
from feed_service.workload.generator import generate

from .pipeline import StreamProcess, grpc_server, publish, read_all_home_timelines, read_table, running

THRESHOLD = 4


def _isolated(settings: Settings, unique: str) -> Settings:
    from dataclasses import replace

    isolated = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}", pull_threshold=THRESHOLD)
    provision(isolated)
    return isolated


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


def _history(prefix: str) -> list[dict[str, Any]]:
    return list(generate(users=40, events=500, seed=5, mean_following=6, prefix=prefix))


def _users(events: list[dict[str, Any]]) -> list[str]:
    return sorted({e["follower_id"] for e in events if e["type"] == "follow"})


def test_home_timelines_through_grpc_equal_the_reference_with_pull_authors(
        settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = _isolated(settings, unique)
    prefix = f"h{unique[-6:]}-"
    events = _history(prefix) + _crossing(prefix, up=True, version=1)
    publish(pipeline, events)
    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log")) as stream:
        stream.wait_caught_up()
        pulls = {a for f, a in read_table(pipeline, "SELECT follower_id, author_id FROM pull_follows")}
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


def test_kill_while_an_author_crosses_the_threshold(settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = _isolated(settings, unique)
    prefix = f"k{unique[-6:]}-"
    base = _history(prefix)
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


VIEW_TABLES = {
    "home_timeline": "SELECT timeline_id, created_at, tweet_id, author_id, version, text, profile_version FROM home_timeline",
    "author_timeline": "SELECT author_id, created_at, tweet_id, version, text, profile_version FROM author_timeline",
    "pull_follows": "SELECT follower_id, author_id FROM pull_follows",
    "tweets": "SELECT tweet_id, author_id, created_at, version, text, profile_version FROM tweets",
    "profiles": "SELECT user_id, version, display_name, avatar_url, bio FROM profiles",
}


def _view(pipeline: Settings) -> dict[str, list[tuple]]:
    return {table: sorted(map(tuple, read_table(pipeline, query))) for table, query in VIEW_TABLES.items()}


def test_backfill_lays_out_the_hybrid_view_and_bootstraps_the_stream(
        settings: Settings, unique: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    pipeline = _isolated(settings, unique)
    prefix = f"b{unique[-6:]}-"
    events = _history(prefix) + _crossing(prefix, up=True, version=1)
    publish(pipeline, events)
    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log")) as stream:
        stream.wait_caught_up()
    streamed = _view(pipeline)
    assert streamed["pull_follows"] and streamed["author_timeline"]
    for table in VIEW_TABLES:
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
