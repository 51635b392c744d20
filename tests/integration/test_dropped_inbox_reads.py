"""Reads of readers whose inbox is not kept, on the real stack (docs/activity.md).

On the session's streamed world (tests/support/world.py: replies, reposts, pull authors, blocks and
mutes), in phase 2, whose restarted stream dropped the inboxes of the readers nobody read since phase 1
(the real drop of the stream's driver); a stale row newer than anything, of a tweet that never was, is
added to some of them. Every page of GetHomeTimeline of every reader, at several page sizes, paged
through with tokens, must equal the batch reference (the read cache on: each reader read twice), kept
readers' too; a watch resumed at a position sends the entries above it, and pushed watches of dropped
readers (their clients seeded from pages) end equal to the reference after their followees
tweet (the stream skips the dropped readers' inbox rows; reads merge the author timelines).

Also the Cassandra reader alone: the flag comes with the inbox slice (also below a cursor with rows),
the statics alone, and a reader's whole visible set.
"""

from __future__ import annotations

import asyncio

from feed_service.api import timeline_pb2 as pb
from feed_service.core.per_reader.messages import VisibleDelta
from feed_service.core.reference import reference_entries
from feed_service.core.rows import Entry, TimelineWrite
from feed_service.server.page_token import KIND_WATCH, PageCursor, PageTokenCodec
from feed_service.server.testing import TEST_SECRET
from feed_service.settings import Settings

from tests.support.isolation import isolated
from tests.support.pipeline import read_table
from tests.support.reads import WatchClient, entry_key, pages, wait_subscribed
from tests.support.world import World

#: Where the stale rows go: newer than anything of the world.
STALE_AT = 4_000_000_000_000

def test_the_reader_returns_the_flag_with_the_slice_the_statics_and_the_visible_set(
        settings: Settings, unique: str) -> None:
    from feed_service.store.cassandra_reader import CassandraReader
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.session import connect

    pipeline = isolated(settings, unique)
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


def _add_stale_rows(pipeline: Settings, readers: list[str]) -> list[tuple[str, str]]:
    """A stale inbox row, newer than anything and of a tweet that never was, in each dropped reader's
    partition (what a write racing the drop could leave): reads must ignore it while the flag is set.
    Returns (reader, tweet id) of each."""
    from feed_service.store.session import connect

    ks = pipeline.keyspace
    cluster, session = connect(pipeline)
    try:
        for r in readers:
            session.execute(f"INSERT INTO {ks}.home_timeline (timeline_id, created_at, tweet_id, author_id, version,"
                            " text, profile_version, in_reply_to_tweet_id, in_reply_to_author_id)"
                            " VALUES (%s, %s, %s, %s, 1, 'stale', 1, '', '')", (r, STALE_AT, f"stale-{r}", r))
    finally:
        cluster.shutdown()
    return [(r, f"stale-{r}") for r in readers]


def _remove_stale_rows(pipeline: Settings, stale: list[tuple[str, str]]) -> None:
    from feed_service.store.session import connect

    cluster, session = connect(pipeline)
    try:
        for r, tweet_id in stale:
            session.execute(f"DELETE FROM {pipeline.keyspace}.home_timeline WHERE timeline_id = %s AND created_at = %s"
                            " AND tweet_id = %s", (r, STALE_AT, tweet_id))
    finally:
        cluster.shutdown()


def test_pages_and_watches_of_dropped_readers_through_grpc_equal_the_reference(world_phase2: World) -> None:
    """On the streamed world's phase 2 (tests/support/world.py), whose restarted stream dropped the
    inboxes of the readers nobody read since phase 1. The server here reports no reads
    (:meth:`World.server`), so that those readers stay dropped while the test reads them."""
    world = world_phase2
    pipeline = world.settings
    users = world.readers
    home = reference_entries(world.tables(), inbox_cap=pipeline.inbox_cap)
    flags = {r[0]: r[1] for r in read_table(pipeline, "SELECT DISTINCT timeline_id, inbox_dropped FROM home_timeline")}
    dropped = [u for u in users if home.get(u) and flags.get(u) is True]
    assert len(dropped) >= 4
    pulls = read_table(pipeline, "SELECT follower_id, author_id FROM pull_follows")
    assert any(r in dropped for r, _ in pulls)  # dropped readers merging pull authors in too
    assert any(e.in_reply_to_author_id for u in dropped for e in home.get(u, []))
    assert any(e.reposted_by for u in dropped for e in home.get(u, []))
    stale = _add_stale_rows(pipeline, dropped[:3])
    try:
        with world.server() as server:
            server.changes_applied()
            for user in users:
                expected = [entry_key(e) for e in home.get(user, [])]
                for size in ((1, 3, 7, 50) if user in dropped else (3, 50)):
                    for _ in range(2):  # the second read fills the cache (or hits it), for a kept reader
                        assert pages(server, "GetHomeTimeline", user, size) == expected, (user, size)

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
                    sent += [entry_key(e) for e in message.entries]
                    assert not message.changed and not message.removed_tweet_ids
                    if len(sent) >= k:
                        break
                call.cancel()
                assert sent == [entry_key(e) for e in reversed(entries[:k])], user

            # pushed watches of dropped readers while their followees tweet (the stream skips their
            # inbox rows); kept readers' watches: test_reposts_replies_reads.py (here a batch may drop
            # them, as nobody reports their reads)
            watched = dropped[:4]
            clients = [WatchClient(server, u, cap=pipeline.inbox_cap) for u in watched]
            wait_subscribed(server, watched)
            for client in clients:
                client.seed(server)
            world.publish(_live_changes(world, watched))
            server.changes_applied()
            home = reference_entries(world.tables(), inbox_cap=pipeline.inbox_cap)
            for user in users:
                assert pages(server, "GetHomeTimeline", user, 5) == [entry_key(e) for e in home.get(user, [])], user
            for client in clients:
                expected = [entry_key(e) for e in home.get(client.user, [])]
                assert client.wait_for(expected) == expected, (client.user, client.user in dropped)
            assert all(c.messages >= 1 for c in clients)  # pushed: one new tweet each
            for client in clients:
                client.call.cancel()
    finally:
        _remove_stale_rows(pipeline, stale)


def _live_changes(world: World, readers: list[str]) -> list[dict]:
    """A new tweet by a followee of each of ``readers``, newer than anything of the world."""
    tables = world.tables()
    now = max(e.get("created_at", 0) for e in world.events) + 1000
    version = max(e["version"] for e in world.events if "version" in e) + 1
    out: list[dict] = []
    for n, reader in enumerate(readers):
        followees = sorted(a for (f, a), edge in tables.follows.items() if f == reader and edge[1])
        author = followees[0] if followees else reader
        out.append({"type": "tweet", "op": "upsert", "tweet_id": f"w-live{n}", "author_id": author,
                    "version": version + n, "created_at": now + n, "text": f"live {n}", "profile_version": 1})
    return out
