"""The read service on reposts and replies, on the real stack (docs/api.md#reposts-and-replies).

First the Cassandra reader alone: ``home_extras`` and ``user_reposts`` slices by ``(at, tweet_id)``
and the reader's visible set, as the writer leaves them. Then end to end: a workload with reposts,
replies and hides streamed with a small pull threshold (so pull authors' replies are filtered at
read by ``reader_visible``), every home and user timeline read page by page through gRPC (the read
cache on: each read twice, the second filled or hit) equal to the batch reference; and pushed
watches opened before the rest of the history lands, whose clients end equal to the reference too.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from feed_service.api import timeline_pb2 as pb
from feed_service.core.per_reader.messages import ExtrasDelta, VisibleDelta
from feed_service.core.reference import reference_entries, reference_tables, reference_user_timelines
from feed_service.core.rows import AuthorTimelineWrite, Entry
from feed_service.ops.provision import provision
from feed_service.settings import Settings
from feed_service.workload.generator import generate

from tests.support.pipeline import StreamProcess, grpc_server, publish, read_table, running

THRESHOLD = 4


def _isolated(settings: Settings, unique: str, **changes: Any) -> Settings:
    isolated = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}", **changes)
    provision(isolated)
    return isolated


def test_the_reader_reads_extras_user_reposts_and_the_visible_set(settings: Settings, unique: str) -> None:
    from feed_service.store.cassandra_reader import CassandraReader
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.session import connect

    pipeline = _isolated(settings, unique)
    repost = Entry("t1", "bob", 10, 2, "hi", 1, None, None, "pat", 50, 4)
    reply = Entry("t2", "bob", 30, 1, "re", 1, "t0", "dan")
    later = Entry("t3", "eve", 40, 1, "x", 1, "t9", "cat", "pat", 60, 4)
    seen = [f"u{i:03d}" for i in range(150)]  # more than one IN list
    cluster, session = connect(pipeline)
    try:
        writer = CassandraWriter(session, pipeline.keyspace)
        writer.write(extras=[ExtrasDelta("insert", "ann", e, 5) for e in (repost, reply, later)],
                     user_reposts=[AuthorTimelineWrite("insert", e, 5) for e in (repost, later)],
                     visible=[VisibleDelta("insert", "ann", u, 5) for u in seen])
        writer.write(visible=[VisibleDelta("delete", "ann", "u007", 6)])

        async def reads() -> tuple:
            reader = CassandraReader(session, pipeline.keyspace)
            return (await reader.extras_page("ann", before=None, limit=10, timeout=10),
                    await reader.extras_page("ann", before=(50, "t1"), limit=10, timeout=10),
                    await reader.extras_newer("ann", after=(30, "t2"), limit=1, timeout=10),
                    await reader.extras_newer("ann", after=None, limit=10, timeout=10),
                    await reader.user_reposts_page("pat", before=None, limit=10, timeout=10),
                    await reader.visible_among("ann", ["u001", "u007", "u149", "zed", *seen[20:140]], timeout=10),
                    await reader.visible_among("nobody", ["u001"], timeout=10),
                    await reader.extras_page("nobody", before=None, limit=10, timeout=10))

        page, below, newer, oldest, reposts, sees, nobody, empty = asyncio.run(reads())
    finally:
        cluster.shutdown()
    assert page == [later, repost, reply]  # by at: 60, 50 (a repost of a tweet of 10), 30
    assert below == [reply] and newer == [repost] and oldest == [reply, repost, later]
    assert reposts == [later, repost]
    assert sees == {"u001", "u149", *seen[20:140]} and nobody == set() and empty == []


def _key(e: Any) -> tuple:
    """An entry as a response carries it, or a reference entry in the same shape."""
    if isinstance(e, Entry):
        return (e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.reposted_by or "", e.reposted_at or 0,
                e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or "")
    return (e.tweet_id, e.author_id, e.created_at_ms, e.version, e.text, e.reposted_by, e.reposted_at_ms,
            e.in_reply_to_tweet_id, e.in_reply_to_author_id)


def _pages(server: Any, rpc: str, user: str, size: int) -> list[tuple]:
    request = pb.GetHomeTimelineRequest if rpc == "GetHomeTimeline" else pb.GetUserTimelineRequest
    out, token = [], ""
    while True:
        page = getattr(server.stub(), rpc)(request(user_id=user, page_size=size, page_token=token),
                                           metadata=server.auth("checker", "service"), timeout=10)
        out += [_key(e) for e in page.entries]
        token = page.next_page_token
        if not token:
            return out


class _Client:
    """A watch client on a thread of its own: its timeline read in full once the watch is open, then
    every message applied (upsert by tweet id, remove)."""

    def __init__(self, server: Any, user: str) -> None:
        self.user = user
        self.state: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.messages = 0
        self.call = server.stub().WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user),
                                                    metadata=server.auth(user), timeout=600)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for message in self.call:
                with self.lock:
                    self.messages += 1
                    for e in (*message.entries, *message.changed):
                        self.state[e.tweet_id] = e
                    for tid in message.removed_tweet_ids:
                        self.state.pop(tid, None)
        except Exception:  # noqa: BLE001 - cancelled at the end
            pass

    def seed(self, entries: list[Any]) -> None:
        """The timeline read after the watch subscribed; the messages since then apply on top."""
        with self.lock:
            for e in entries:
                self.state.setdefault(e.tweet_id, e)

    def timeline(self) -> list[tuple]:
        with self.lock:
            return sorted((_key(e) for e in self.state.values()), key=lambda k: (k[6] or k[2], k[0]), reverse=True)


def test_home_and_user_timelines_and_watches_through_grpc_equal_the_reference(
        settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = _isolated(settings, unique, pull_threshold=THRESHOLD)
    events = list(generate(users=30, events=700, seed=11, mean_following=6, prefix=f"w{unique[-6:]}-",
                           repost_share=0.15, reply_share=0.3, hide_share=0.05))
    first, second = events[:len(events) // 2], events[len(events) // 2:]
    users = sorted({e["follower_id"] for e in events if e["type"] == "follow"})
    publish(pipeline, first)
    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log")) as stream:
        stream.wait_caught_up()
        pulls = read_table(pipeline, "SELECT follower_id, author_id FROM pull_follows")
        visible = reference_tables(first).visible()
        hidden_replies = [(r, e.tweet_id) for r, a in pulls
                          for e in reference_user_timelines(reference_tables(first), inbox_cap=None).get(a, [])
                          if e.reposted_by is None and e.in_reply_to_author_id not in (None, a, r)
                          and e.in_reply_to_author_id not in visible.get(r, set())]
        assert hidden_replies  # pull authors' replies that the read must filter out
        with grpc_server(pipeline) as server:
            server.changes_applied()
            tables = reference_tables(first)
            home = reference_entries(tables, inbox_cap=pipeline.inbox_cap)
            own = reference_user_timelines(tables, inbox_cap=pipeline.inbox_cap)
            assert any(e.reposted_by for t in home.values() for e in t)
            for user in users:
                for _ in range(2):  # the second read fills the cache (or hits it)
                    assert _pages(server, "GetHomeTimeline", user, 3) == [_key(e) for e in home.get(user, [])], user
                assert _pages(server, "GetUserTimeline", user, 4) == [_key(e) for e in own.get(user, [])], user

            watched = users[:6]
            clients = [_Client(server, u) for u in watched]
            hub = server.server.servicer.hub
            for _ in range(200):  # subscribed
                if all(server.run(_subscribed(hub, u)) for u in watched):
                    break
                threading.Event().wait(0.05)
            else:
                raise AssertionError("the watches did not subscribe")
            for client in clients:
                entries = []
                token = ""
                while True:
                    page = server.stub().GetHomeTimeline(
                        pb.GetHomeTimelineRequest(user_id=client.user, page_size=50, page_token=token),
                        metadata=server.auth(client.user), timeout=10)
                    entries += page.entries
                    token = page.next_page_token
                    if not token:
                        break
                client.seed(entries)
            publish(pipeline, second)
            stream.wait_caught_up()
            server.changes_applied()
            tables = reference_tables(events)
            home = reference_entries(tables, inbox_cap=pipeline.inbox_cap)
            for user in users:
                assert _pages(server, "GetHomeTimeline", user, 5) == [_key(e) for e in home.get(user, [])], user
            deadline = threading.Event()
            for client in clients:
                expected = [_key(e) for e in home.get(client.user, [])]
                for _ in range(100):  # the last messages may still be on their way
                    if client.timeline() == expected:
                        break
                    deadline.wait(0.1)
                assert client.timeline() == expected, client.user
            assert sum(c.messages for c in clients) > len(clients)
            for client in clients:
                client.call.cancel()


async def _subscribed(hub: Any, user: str) -> bool:
    subs = hub._by_user.get(user)
    return bool(subs) and all(s.early_from is None for s in subs)
