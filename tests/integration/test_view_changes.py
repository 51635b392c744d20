"""The view's own change stream end to end (docs/view-changes.md): the stream publishes, to the
``timeline_changes`` topic, every change it wrote; applying the home-timeline changes in order, by
row and last-writer-wins on ``ts``, rebuilds exactly the ``home_timeline`` table.

One stream process, two phases (so that edits, deletes, unfollows and blocks change rows written by
an earlier micro-batch instead of being folded into the first one): tweets, follows, profiles and a
pull author; then an edit in place, an edit that moves a tweet, a delete, a follow that brings old
tweets, an unfollow, a block, a new profile version and a pull author's tweet.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from feed_service.core.rows import Entry
from feed_service.core.view_changes import (
    AuthorChange,
    BlockRowChange,
    ProfileChange,
    PullFollowChange,
    TimelineChange,
    decode,
    message_key,
)
from feed_service.kafka.offsets import SOURCE_ROLES, watermarks
from feed_service.ops.provision import provision
from feed_service.settings import Settings

from .pipeline import StreamProcess, publish, read_table, running

T0 = 1_767_225_600_000
#: star has four followers and is merged in at read time (a pull author): its changes are
#: AuthorChange and PullFollowChange, never in inboxes. bob, with three, stays a push author.
THRESHOLD = 4


def _follow(follower: str, followee: str, version: int = 1, op: str = "follow") -> dict[str, Any]:
    return {"type": "follow", "op": op, "follower_id": follower, "followee_id": followee, "version": version}


def _tweet(author: str, n: int, version: int = 1, text: str | None = None, moved: int = 0) -> dict[str, Any]:
    return {"type": "tweet", "op": "upsert", "tweet_id": f"{author}-t{n}", "author_id": author, "version": version,
            "created_at": T0 + n * 1000 + moved, "text": text or f"{author} #{n}", "profile_version": 1}


BASE = [
    {"type": "profile", "user_id": "bob", "version": 1, "display_name": "Bob"},
    _follow("ann", "bob"), _follow("cat", "bob"), _follow("eve", "bob"), _follow("bob", "cat"),
    _follow("ann", "star"), _follow("cat", "star"), _follow("dan", "star"), _follow("eve", "star"),
    *(_tweet("bob", n) for n in range(4)), _tweet("cat", 0), _tweet("star", 0),
]
CHANGES = [
    _tweet("bob", 0, version=2, text="bob #0, edited"),  # update in place (eve's row: she stays)
    _tweet("bob", 1, version=2, moved=5000),  # a new created_at: delete + insert, one ts
    {"type": "tweet", "op": "delete", "tweet_id": "bob-t2", "author_id": "bob", "version": 2},
    _follow("dan", "bob"),  # brings bob's retained tweets
    _follow("cat", "bob", 2, "unfollow"),  # takes them out of cat's inbox
    {"type": "block", "op": "block", "blocker_id": "bob", "blocked_id": "ann", "version": 1},
    {"type": "profile", "user_id": "bob", "version": 2, "display_name": "Bobby"},
    _tweet("star", 1),
]


def _read_to_end(settings: Settings, roles: tuple[str, ...]) -> list[Any]:
    """Every message of the topics of ``roles``, from the start to their high watermarks now."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    _, high = watermarks(settings, roles)
    wanted = {(topic, int(p)): end for topic, parts in high.items() for p, end in parts.items() if end > 0}
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "view-changes-test",
                         "enable.auto.commit": False})
    out: list[Any] = []
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in wanted])
        done: set[tuple[str, int]] = set()
        while len(done) < len(wanted):
            msg = consumer.poll(10)
            assert msg is not None, f"no message within 10 s; read {len(out)}, done {sorted(done)} of {wanted}"
            assert msg.error() is None, msg.error()
            out.append(msg)
            if msg.offset() + 1 >= wanted[(msg.topic(), msg.partition())]:
                done.add((msg.topic(), msg.partition()))
        return out
    finally:
        consumer.close()


def _home_timeline(settings: Settings) -> dict[tuple[str, str], Entry]:
    return {(r[0], r[1]): Entry(r[1], *r[2:]) for r in read_table(
        settings, "SELECT timeline_id, tweet_id, author_id, created_at, version, text, profile_version FROM home_timeline")}


def test_applying_the_timeline_changes_rebuilds_the_home_timelines(
        settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}", pull_threshold=THRESHOLD)
    provision(pipeline)
    assert pipeline.view_changes  # the default
    publish(pipeline, BASE)
    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log")) as stream:
        stream.wait_caught_up()
        publish(pipeline, CHANGES)
        stream.wait_caught_up()
    stored = _home_timeline(pipeline)

    messages = _read_to_end(pipeline, ("timeline_changes",))
    changes = [decode(m.value()) for m in messages]
    assert [m.key().decode() for m in messages] == [message_key(c) for c in changes]

    # Applied per (timeline, tweet) in the order of each partition, a lower ts never overwriting a higher
    # one; an equal ts is the same step (the delete of a moved tweet's old position, then its insert).
    model: dict[tuple[str, str], tuple[int, str, Entry]] = {}
    for c in changes:
        if isinstance(c, TimelineChange):
            for tid in c.timeline_ids:
                old = model.get((tid, c.entry.tweet_id))
                if old is None or c.ts >= old[0]:
                    model[(tid, c.entry.tweet_id)] = (c.ts, c.op, c.entry)
    assert {k: e for k, (_, op, e) in model.items() if op != "delete"} == stored
    # The phases did what they were written for: rows changed in place, moved, left and came.
    ops = {(c.op, c.entry.tweet_id) for c in changes if isinstance(c, TimelineChange)}
    assert {("update", "bob-t0"), ("delete", "bob-t1"), ("insert", "bob-t1"), ("delete", "bob-t2")} <= ops
    assert ("dan", "bob-t3") in stored and ("cat", "bob-t3") not in stored and ("ann", "bob-t3") not in stored
    assert stored[("eve", "bob-t0")].text == "bob #0, edited" and ("eve", "bob-t2") not in stored
    assert all(e.author_id != "star" for e in stored.values())  # a pull author: merged in at read time
    # Every kind but the tweets table's rows, each caused by a record that was published.
    kinds = {type(c) for c in changes}
    assert kinds == {TimelineChange, AuthorChange, PullFollowChange, ProfileChange, BlockRowChange}
    assert [(c.op, c.blocker_id, c.blocked_id) for c in changes if isinstance(c, BlockRowChange)] == [
        ("insert", "bob", "ann")]
    assert {(c.user_id, c.version) for c in changes if isinstance(c, ProfileChange)} == {("bob", 1), ("bob", 2)}
    source_times = {m.timestamp()[1] for m in _read_to_end(pipeline, SOURCE_ROLES)}
    assert all(c.source_ms in source_times for c in changes), sorted(
        {c.source_ms for c in changes} - source_times, key=str)
