"""The read service on reposts and replies, on the real stack (docs/api.md#reposts-and-replies).

First the Cassandra reader alone: ``home_extras`` and ``user_reposts`` slices by ``(at, tweet_id)``
and the reader's visible set, as the writer leaves them. Then end to end on the session's streamed world
(tests/support/world.py: reposts, replies and hides, a small pull threshold, so pull authors' replies
are filtered at read by ``reader_visible``), every home and user timeline read page by page through gRPC (the read
cache on: each read twice, the second filled or hit) equal to the batch reference; and pushed
watches of a history of the test's own, whose clients end equal to the reference too.
"""

from __future__ import annotations

import asyncio

from feed_service.core.per_reader.messages import ExtrasDelta, VisibleDelta
from feed_service.core.reference import reference_entries, reference_user_timelines
from feed_service.core.rows import AuthorTimelineWrite, Entry
from feed_service.settings import Settings

from tests.support.history import followers, history, split
from tests.support.isolation import isolated
from tests.support.pipeline import read_table
from tests.support.reads import WatchClient, entry_key, pages, wait_subscribed
from tests.support.world import SHARES, World

#: The watched history's seed (its users ``wr-``, the module's own).
WATCHED_SEED = 7


def test_the_reader_reads_extras_user_reposts_and_the_visible_set(settings: Settings, unique: str) -> None:
    from feed_service.store.cassandra_reader import CassandraReader
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.session import connect

    pipeline = isolated(settings, unique)
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


def test_home_and_user_timelines_and_watches_through_grpc_equal_the_reference(world: World) -> None:
    """On the streamed world's phase 1 (tests/support/world.py): every home and user timeline's pages;
    then pushed watches of kept readers on a history of their own (users ``wr-``: reposts, replies,
    hides, edits, deletes, unfollows), opened after its first half and kept open while the second half
    lands, whose clients end equal to the reference. (Watches of readers whose inbox is not kept:
    test_dropped_inbox_reads.py.)"""
    pipeline = world.settings
    users = world.readers
    pulls = read_table(pipeline, "SELECT follower_id, author_id FROM pull_follows")
    tables = world.tables()
    visible = tables.visible()
    own_all = reference_user_timelines(tables, inbox_cap=None)
    hidden_replies = [(r, e.tweet_id) for r, a in pulls for e in own_all.get(a, [])
                      if e.reposted_by is None and e.in_reply_to_author_id not in (None, a, r)
                      and e.in_reply_to_author_id not in visible.get(r, set())]
    assert hidden_replies  # pull authors' replies that the read must filter out
    with world.server() as server:
        server.changes_applied()
        home = reference_entries(tables, inbox_cap=pipeline.inbox_cap)
        own = reference_user_timelines(tables, inbox_cap=pipeline.inbox_cap)
        assert any(e.reposted_by for t in home.values() for e in t)
        for user in users:
            for _ in range(2):  # the second read fills the cache (or hits it)
                assert pages(server, "GetHomeTimeline", user, 3) == [entry_key(e) for e in home.get(user, [])], user
            assert pages(server, "GetUserTimeline", user, 4) == [entry_key(e) for e in own.get(user, [])], user

        first, second = split(history(WATCHED_SEED, "wr-", users=20, events=500, **SHARES), 0.5)
        world.publish(first)
        server.changes_applied()
        watched = followers(first)[:6]
        clients = [WatchClient(server, u, cap=pipeline.inbox_cap) for u in watched]
        wait_subscribed(server, watched)
        for client in clients:
            client.seed(server)
        world.publish(second)
        server.changes_applied()
        home = reference_entries(world.tables(), inbox_cap=pipeline.inbox_cap)
        assert any(e.reposted_by for u in watched for e in home.get(u, []))
        assert any(e.in_reply_to_author_id for u in watched for e in home.get(u, []))
        for client in clients:
            expected = [entry_key(e) for e in home.get(client.user, [])]
            assert client.wait_for(expected) == expected, client.user
        assert sum(c.messages for c in clients) > len(clients)
        for client in clients:
            client.call.cancel()
