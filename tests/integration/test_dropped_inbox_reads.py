"""Reads of readers whose inbox is not kept, on the real stack (docs/activity.md).

A workload with replies, reposts, pull authors (a small threshold) and blocks and mutes is streamed;
then some readers' inboxes are dropped the way the stream's driver drops them, by CQL writes that
stand in for it: every inbox row deleted (some left behind: stale rows, one of them newer than
anything, a tweet that never was) and the static ``inbox_dropped`` set. Every page of
GetHomeTimeline of every reader, at several page sizes, paged through with tokens, must equal the
batch reference (the read cache on: each reader read twice), kept readers' too; a watch resumed at a
position sends the entries above it, and pushed watches of dropped readers (their clients seeded
from pages) end equal to the reference after the rest of the history streams in (the stream, which
knows nothing of the flag here, writes those readers' inbox rows again: reads ignore them while the
flag is set).

Also the Cassandra reader alone: the flag comes with the inbox slice (also below a cursor with rows),
the statics alone, and a reader's whole visible set.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from feed_service.api import timeline_pb2 as pb
from feed_service.core.per_reader.messages import VisibleDelta
from feed_service.core.reference import reference_entries, reference_tables
from feed_service.core.rows import Entry, TimelineWrite
from feed_service.ops.provision import provision
from feed_service.server.page_token import KIND_WATCH, PageCursor, PageTokenCodec
from feed_service.server.testing import TEST_SECRET
from feed_service.settings import Settings
from feed_service.workload.generator import generate

from tests.support.pipeline import StreamProcess, grpc_server, publish, read_table, running
from .test_reposts_replies_reads import _Client, _key, _pages, _subscribed

#: Authors with this many followers or more are pull authors: a few of the most followed, so readers
#: have both kinds (most of a dropped reader's timeline comes from its push authors).
THRESHOLD = 9


def _isolated(settings: Settings, unique: str, **changes: Any) -> Settings:
    isolated = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}", **changes)
    provision(isolated)
    return isolated


def test_the_reader_returns_the_flag_with_the_slice_the_statics_and_the_visible_set(
        settings: Settings, unique: str) -> None:
    from feed_service.store.cassandra_reader import CassandraReader
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.session import connect

    pipeline = _isolated(settings, unique)
    rows = [Entry(f"t{n}", "bob", 10 * n, 1, "x", 1) for n in range(1, 4)]
    seen = [f"u{i:04d}" for i in range(6000)]  # more than the driver's default page of 5,000 rows
    cluster, session = connect(pipeline)
    try:
        writer = CassandraWriter(session, pipeline.keyspace)
        writer.write(timeline=[TimelineWrite("insert", t, e, 5) for t in ("ann", "cat") for e in rows],
                     visible=[VisibleDelta("insert", "ann", u, 5) for u in seen])
        session.execute(f"UPDATE {pipeline.keyspace}.home_timeline SET inbox_dropped = true WHERE timeline_id = 'ann'")
        session.execute(f"UPDATE {pipeline.keyspace}.home_timeline SET inbox_dropped = true WHERE timeline_id = 'eve'")

        async def reads() -> tuple:
            reader = CassandraReader(session, pipeline.keyspace)
            return (await reader.inbox("ann", before=None, limit=2, timeout=10),
                    await reader.inbox("ann", before=(30, "t3"), limit=5, timeout=10),
                    await reader.inbox("ann", before=(10, "t1"), limit=5, timeout=10),
                    await reader.inbox("cat", before=None, limit=2, timeout=10),
                    await reader.inbox("eve", before=None, limit=2, timeout=10),  # the static alone
                    await reader.inbox("nobody", before=None, limit=2, timeout=10),
                    await reader.statics("ann", timeout=10), await reader.statics("cat", timeout=10),
                    await reader.statics("nobody", timeout=10),
                    await reader.visible_users("ann", timeout=10), await reader.visible_users("nobody", timeout=10))

        ann, below, empty, cat, eve, nobody, s_ann, s_cat, s_nobody, visible, no_visible = asyncio.run(reads())
    finally:
        cluster.shutdown()
    assert ann.inbox_dropped is True and [e.tweet_id for e in ann.entries] == ["t3", "t2"]
    assert below.inbox_dropped is True and [e.tweet_id for e in below.entries] == ["t2", "t1"]
    assert empty.inbox_dropped is None and empty.pull_authors is None  # nothing below: cannot tell
    assert cat.inbox_dropped is False and eve.inbox_dropped is True and eve.entries == []
    assert nobody.inbox_dropped is False
    assert (s_ann.inbox_dropped, s_cat.inbox_dropped, s_nobody.inbox_dropped) == (True, False, False)
    assert visible == seen and no_visible == []


def _drop(pipeline: Settings, readers: list[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Drop the readers' inboxes as the driver does (a stand-in): rows deleted above their write
    time, every third left behind (stale), a stale row newer than anything added, the flag set.
    Returns the tweet ids of the rows deleted and of the stale rows, per reader."""
    from feed_service.store.session import connect

    ks = pipeline.keyspace
    stale: dict[str, list[str]] = {}
    deleted: dict[str, list[str]] = {}
    cluster, session = connect(pipeline)
    try:
        for r in readers:
            rows = list(session.execute(
                f"SELECT created_at, tweet_id, author_id, writetime(version) FROM {ks}.home_timeline"
                " WHERE timeline_id = %s", (r,)))
            left = []
            for i, (created_at, tweet_id, author_id, written) in enumerate(rows):
                if created_at is None:
                    continue  # the partition's statics alone
                if i % 3 == 1:
                    left.append(tweet_id)
                    continue
                deleted.setdefault(r, []).append(tweet_id)
                session.execute(f"DELETE FROM {ks}.home_timeline USING TIMESTAMP %s"
                                " WHERE timeline_id = %s AND created_at = %s AND tweet_id = %s",
                                (written + 1, r, created_at, tweet_id))
            ghost = f"stale-{r}"
            session.execute(f"INSERT INTO {ks}.home_timeline (timeline_id, created_at, tweet_id, author_id, version,"
                            " text, profile_version, in_reply_to_tweet_id, in_reply_to_author_id)"
                            " VALUES (%s, %s, %s, %s, 1, 'stale', 1, '', '')",
                            (r, 4_000_000_000_000, ghost, rows[0][2] if rows and rows[0][2] else r))
            session.execute(f"UPDATE {ks}.home_timeline SET inbox_dropped = true WHERE timeline_id = %s", (r,))
            stale[r] = [*left, ghost]
    finally:
        cluster.shutdown()
    return deleted, stale


def test_pages_and_watches_of_dropped_readers_through_grpc_equal_the_reference(
        settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = _isolated(settings, unique, pull_threshold=THRESHOLD)
    events = list(generate(users=30, events=700, seed=23, mean_following=6, prefix=f"d{unique[-6:]}-",
                           repost_share=0.15, reply_share=0.3, hide_share=0.05))
    first, second = events[:len(events) // 2], events[len(events) // 2:]
    users = sorted({e["follower_id"] for e in events if e["type"] == "follow"})
    publish(pipeline, first)
    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log")) as stream:
        stream.wait_caught_up()
        tables = reference_tables(first)
        home = reference_entries(tables, inbox_cap=pipeline.inbox_cap)
        dropped = [u for u in users if home.get(u)][::3]
        assert len(dropped) >= 4
        pulls = read_table(pipeline, "SELECT follower_id, author_id FROM pull_follows")
        assert any(r in dropped for r, _ in pulls)  # dropped readers merging pull authors in too
        deleted, stale = _drop(pipeline, dropped)
        assert sum(map(len, deleted.values())) >= 40 and any(len(ids) > 1 for ids in stale.values())
        kept = [u for u in users if u not in dropped]
        with grpc_server(pipeline) as server:
            server.changes_applied()
            assert any(e.in_reply_to_author_id for u in dropped for e in home.get(u, []))
            assert any(e.reposted_by for u in dropped for e in home.get(u, []))
            for user in users:
                expected = [_key(e) for e in home.get(user, [])]
                for size in ((1, 3, 7, 50) if user in dropped else (3, 50)):
                    for _ in range(2):  # the second read fills the cache (or hits it), for a kept reader
                        assert _pages(server, "GetHomeTimeline", user, size) == expected, (user, size)

            # a watch resumed at a position: its first frames are the entries above it, oldest first
            codec = PageTokenCodec(TEST_SECRET)
            for user in dropped[:3]:
                entries = home[user]
                k = min(len(entries) - 1, 7)
                token = codec.encode(PageCursor(user, (entries[k].at, entries[k].tweet_id), 0, KIND_WATCH))
                call = server.stub().WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user, resume_token=token),
                                                       metadata=server.auth(user), timeout=30)
                sent: list[tuple] = []
                for message in call:
                    sent += [_key(e) for e in message.entries]
                    assert not message.changed and not message.removed_tweet_ids
                    if len(sent) >= k:
                        break
                call.cancel()
                assert sent == [_key(e) for e in reversed(entries[:k])], user

            watched = [*dropped[:4], *kept[:2]]
            clients = [_Client(server, u) for u in watched]
            hub = server.server.servicer.hub
            for _ in range(200):
                if all(server.run(_subscribed(hub, u)) for u in watched):
                    break
                threading.Event().wait(0.05)
            else:
                raise AssertionError("the watches did not subscribe")
            for client in clients:
                entries, token = [], ""
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
            home = reference_entries(reference_tables(events), inbox_cap=pipeline.inbox_cap)
            for user in users:
                assert _pages(server, "GetHomeTimeline", user, 5) == [_key(e) for e in home.get(user, [])], user
            for client in clients:
                expected = [_key(e) for e in home.get(client.user, [])]
                for _ in range(100):  # the last messages may still be on their way
                    if client.timeline() == expected:
                        break
                    threading.Event().wait(0.1)
                assert client.timeline() == expected, (client.user, client.user in dropped)
            assert sum(c.messages for c in clients) > len(clients)
            for client in clients:
                client.call.cancel()
