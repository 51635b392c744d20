"""Reposts and replies end to end on the real stack: Kafka -> the stream (author operator, then the
per-reader stage in its driver) -> Cassandra, compared entry for entry with the batch
reference (docs/reposts-and-replies.md). A home timeline is its inbox (``home_timeline``, written
by author keys) and its per-reader entries (``home_extras``, written by its per-reader stage); a user
timeline is the user's tweets (``author_timeline``) and reposts (``user_reposts``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from feed_service.core.reference import reference_entries, reference_tables, reference_user_timelines
from feed_service.core.rows import Entry
from feed_service.ops.provision import provision
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from spark_jobs.state_stats import last_committed_batch

from tests.support.pipeline import StreamProcess, publish, running, stop_cleanly

COLUMNS = ("tweet_id, author_id, created_at, version, text, profile_version, in_reply_to_tweet_id, "
           "in_reply_to_author_id")
EXTRA_COLUMNS = COLUMNS + ", reposted_by, reposted_at, reposter_profile_version"


def _isolated(settings: Settings, unique: str) -> Settings:
    isolated = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}")
    provision(isolated)
    return isolated


def _entry(r: Any) -> Entry:
    reply = (r.in_reply_to_tweet_id or None, r.in_reply_to_author_id or None)
    repost: tuple = (None, None, None)
    if getattr(r, "reposted_by", None):
        repost = (r.reposted_by, r.reposted_at, r.reposter_profile_version)
    return Entry(r.tweet_id, r.author_id, r.created_at, r.version, r.text, r.profile_version, *reply, *repost)


def _partitions(session: Any, cql: str, key: str) -> dict[str, list[Entry]]:
    out: dict[str, list[Entry]] = {}
    for r in session.execute(cql):
        if r.tweet_id is not None:  # not a partition holding only static columns
            out.setdefault(getattr(r, key), []).append(_entry(r))
    return out


def _merged(*tables: dict[str, list[Entry]]) -> dict[str, list[Entry]]:
    out: dict[str, list[Entry]] = {}
    for table in tables:
        for uid, entries in table.items():
            out.setdefault(uid, []).extend(entries)
    return {uid: sorted(entries, key=lambda e: (e.at, e.tweet_id), reverse=True) for uid, entries in out.items()}


def read_views(settings: Settings) -> tuple[dict[str, list[Entry]], dict[str, list[Entry]]]:
    """(home timelines, user timelines) as Cassandra holds them, each its two tables merged."""
    from feed_service.store.session import connect

    cluster, session = connect(settings.as_role("server"), keyspace=settings.keyspace)
    try:
        home = _merged(
            _partitions(session, f"SELECT timeline_id, {COLUMNS} FROM home_timeline", "timeline_id"),
            _partitions(session, f"SELECT timeline_id, {EXTRA_COLUMNS} FROM home_extras", "timeline_id"))
        users = _merged(
            _partitions(session, f"SELECT author_id, {COLUMNS} FROM author_timeline", "author_id"),
            _partitions(session, f"SELECT user_id, {EXTRA_COLUMNS} FROM user_reposts", "user_id"))
        return home, users
    finally:
        cluster.shutdown()


def _history(seed: int, events: int = 900) -> list[dict]:
    return list(generate(users=40, events=events, seed=seed, mean_following=6, prefix=f"r{seed}-",
                         repost_share=0.15, reply_share=0.3, hide_share=0.05))


def _reference(settings: Settings, events: list[dict]) -> tuple[dict[str, list[Entry]], dict[str, list[Entry]]]:
    tables = reference_tables(events)
    home = reference_entries(tables, inbox_cap=settings.inbox_cap)
    assert home and all(len(v) < settings.inbox_cap for v in home.values())  # below the cap: exact
    return home, reference_user_timelines(tables, inbox_cap=settings.inbox_cap)


def test_stream_with_reposts_and_replies_equals_the_reference_through_a_restart_and_a_kill(
        settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = _isolated(settings, unique)
    events = _history(seed=3)
    kinds = {(e["type"], e.get("op")) for e in events}
    assert {("repost", "repost"), ("repost", "unrepost")} <= kinds
    assert any(e.get("in_reply_to_author_id") for e in events)
    first, second = events[: len(events) * 2 // 3], events[len(events) * 2 // 3:]
    publish(pipeline, first)
    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log")) as stream:
        stream.wait_caught_up()
        home, users = _reference(pipeline, first)
        got_home, got_users = read_views(pipeline)
        assert any(e.reposted_by for entries in got_home.values() for e in entries)
        assert any(e.in_reply_to_author_id for entries in got_home.values() for e in entries)
        assert got_home == home
        assert got_users == users
        # a restart from the checkpoint restores the per-reader stage from its inputs
        stop_cleanly(stream)
    publish(pipeline, second)
    # The second run is a new driver: its stage is restored from the inputs the first one saved. In
    # small batches, it is killed (-9) in the middle of the rest of the history, wherever a batch then
    # is (writing rows, stepping or saving the stage); the third restores the stage as it was before
    # the batch the kill interrupted, replays it, and ends exactly at the reference.
    checkpoint = tmp_path / "ckpt"
    done = last_committed_batch(checkpoint / "join")
    killed = StreamProcess(pipeline, checkpoint, log_file=tmp_path / "stream2.log",
                           extra_args=["--max-offsets-per-trigger", "40"]).start()
    try:
        killed.wait_for_batch(done + 2)
    finally:
        killed.kill()
    assert read_views(pipeline) != _reference(pipeline, events)  # the kill landed mid-history
    with running(StreamProcess(pipeline, checkpoint, log_file=tmp_path / "stream3.log")) as stream:
        stream.wait_caught_up()
        assert read_views(pipeline) == _reference(pipeline, events)
