"""Reads of the per-reader tables (``home_extras``, ``user_reposts``, ``reader_visible``) through the
TimelineStore port: the MemoryStore's slices by ``(Entry.at, tweet_id)`` and the Cassandra reader's
rows as entries ('' and 0 for absent fields read back as None)."""

from __future__ import annotations

import asyncio

from feed_service.core.per_reader.messages import ExtrasDelta, VisibleDelta
from feed_service.core.rows import AuthorTimelineWrite, Entry
from feed_service.store.cassandra_reader import _new_repost_entry
from feed_service.store.memory import MemoryStore

REPOST = Entry("t1", "bob", 10, 2, "hi", 1, None, None, "cat", 50, 4)
REPLY = Entry("t2", "bob", 30, 1, "re", 1, "t0", "dan")
LATER = Entry("t3", "eve", 40, 1, "x", 1, None, None, "cat", 60, 4)


def test_memory_slices_of_extras_and_reposts_go_by_position() -> None:
    store = MemoryStore()
    store.write(extras=[ExtrasDelta("insert", "ann", e, 1) for e in (REPOST, REPLY, LATER)],
                user_reposts=[AuthorTimelineWrite("insert", e, 1) for e in (REPOST, LATER)],
                visible=[VisibleDelta("insert", "ann", u, 1) for u in ("dan", "bob")])

    async def reads() -> tuple:
        return (await store.extras_page("ann", before=None, limit=10, timeout=1),
                await store.extras_page("ann", before=(50, "t1"), limit=10, timeout=1),
                await store.extras_newer("ann", after=(30, "t2"), limit=10, timeout=1),
                await store.extras_newer("ann", after=None, limit=1, timeout=1),
                await store.user_reposts_page("cat", before=None, limit=1, timeout=1),
                await store.visible_among("ann", ["dan", "eve", "bob"], timeout=1),
                await store.visible_among("nobody", ["dan"], timeout=1))

    page, below, newer, oldest, reposts, sees, nobody = asyncio.run(reads())
    assert [e.tweet_id for e in page] == ["t3", "t1", "t2"]  # at 60, 50 (a repost of a tweet of 10), 30
    assert [e.tweet_id for e in below] == ["t2"]
    assert [e.tweet_id for e in newer] == ["t1", "t3"] and [e.tweet_id for e in oldest] == ["t2"]
    assert reposts == [LATER]
    assert sees == {"dan", "bob"} and nobody == set()
    assert store.calls["visible_among"] == 2


def test_cassandra_rows_of_the_per_reader_tables_read_back_as_entries() -> None:
    plain = ("t2", "bob", 30, 1, "re", 1, "t0", "dan", "", 0, 0)
    assert _new_repost_entry(Entry, plain) == REPLY
    assert _new_repost_entry(Entry, ("t1", "bob", 10, 2, "hi", 1, "", "", "cat", 50, 4)) == REPOST
    assert _new_repost_entry(Entry, ("t1", "bob", 10, 2, "hi", 1, None, None, None, None, None)) == REPOST._replace(
        reposted_by=None, reposted_at=None, reposter_profile_version=None)
    assert _new_repost_entry(Entry, ("t1", "bob", 10, 2, "hi", 1, "", "", "cat", 50, 4)).at == 50
