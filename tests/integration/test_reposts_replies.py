"""Reposts and replies end to end on the real stack: Kafka -> the stream (author operator, then the
per-reader stage in its driver) -> Cassandra, compared entry for entry with the batch
reference (docs/reposts-and-replies.md). A home timeline is its inbox (``home_timeline``, written
by author keys) and its per-reader entries (``home_extras``, written by its per-reader stage); a user
timeline is the user's tweets (``author_timeline``) and reposts (``user_reposts``)."""

from __future__ import annotations

from pathlib import Path

from feed_service.core.reference import reference_entries, reference_tables, reference_user_timelines
from feed_service.core.rows import Entry
from feed_service.settings import Settings

from tests.support.pipeline import StreamProcess, running
from tests.support.views import read_views
from tests.support.world import World

def _reference(settings: Settings, events: list[dict]) -> tuple[dict[str, list[Entry]], dict[str, list[Entry]]]:
    tables = reference_tables(events)
    home = reference_entries(tables, inbox_cap=settings.inbox_cap)
    assert home and all(len(v) < settings.inbox_cap for v in home.values())  # below the cap: exact
    return home, reference_user_timelines(tables, inbox_cap=settings.inbox_cap)


def test_stream_with_reposts_and_replies_equals_the_reference_through_a_kill(world: World, unique: str,
                                                                             tmp_path: Path) -> None:
    """A destructive test on the streamed world's published topics (phase 1, tests/support/world.py),
    with a checkpoint and keyspace of its own and the default cap and threshold (no pull authors, no
    trims: Cassandra's tables alone must equal the reference). In small batches the stream is killed
    (-9) in the middle of the history, wherever a batch then is (writing rows, stepping or saving the
    per-reader stage); the next run restores the stage as it was before the batch the kill
    interrupted, replays it, and ends exactly at the reference. (A clean restart restoring the stage
    from its inputs: the world's own phase 2, test_world.py and test_reposts_replies_reads.py.)"""
    defaults = Settings()
    pipeline = world.topics_for(unique, inbox_cap=defaults.inbox_cap, trim_slack=defaults.trim_slack,
                                pull_threshold=defaults.pull_threshold)
    events = world.events
    kinds = {(e["type"], e.get("op")) for e in events}
    assert {("repost", "repost"), ("repost", "unrepost")} <= kinds
    assert any(e.get("in_reply_to_author_id") for e in events)
    checkpoint = tmp_path / "ckpt"
    killed = StreamProcess(pipeline, checkpoint, log_file=tmp_path / "stream1.log",
                           extra_args=["--max-offsets-per-trigger", "200"]).start()
    try:
        killed.wait_for_batch(2)
    finally:
        killed.kill()
    assert read_views(pipeline) != _reference(pipeline, events)  # the kill landed mid-history
    with running(StreamProcess(pipeline, checkpoint, log_file=tmp_path / "stream2.log")) as stream:
        stream.wait_caught_up()
        got_home, got_users = read_views(pipeline)
    home, users = _reference(pipeline, events)
    assert any(e.reposted_by for entries in got_home.values() for e in entries)
    assert any(e.in_reply_to_author_id for entries in got_home.values() for e in entries)
    assert got_home == home
    assert got_users == users
