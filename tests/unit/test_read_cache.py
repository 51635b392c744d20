"""The read cache's rules, by example, against a scripted change feed (no Kafka here: the cache on the
real topic is tested in tests/integration/test_push_watch.py).

The feed is a stand-in with the three things the cache uses: ``position``, ``high_watermarks_after``
and ``wait_reached``; a test decides which changes were published before, during and after a fill's
Cassandra read and checks the cache never serves what the read could not have shown.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from feed_service.core.rows import Entry
from feed_service.core.list_readers import list_reader
from feed_service.core.per_reader.pull_reposts import ListRule
from feed_service.core.view_changes import AuthorChange, ListChange, PullFollowChange, TimelineChange
from feed_service.server.read_cache import HomeSlice, ReadCache, TimelineHead
from feed_service.store.ports import InboxSlice
from tests.support.model import ScriptedFeed, seeds, settle


def e(n: int, version: int = 1, author: str = "a") -> Entry:
    return Entry(f"t{n:03d}", author, 1000 + n, version, f"text {n} v{version}", 0)


def tl(op: str, entry: Entry, *timelines: str, ts: int = 1) -> TimelineChange:
    return TimelineChange(op, entry, timelines or ("u",), ts, None)


def newest(rows: list[Entry]) -> list[str]:
    return [r.tweet_id for r in rows]


def test_head_pages_inserts_and_deletes_within_what_it_knows() -> None:
    head = TimelineHead([e(n) for n in range(10, 0, -1)], depth=5)
    assert not head.complete and newest(head.first(3)) == ["t010", "t009", "t008"]
    assert head.first(6) is None  # deeper than the head: the store answers
    assert newest(head.first(2, before=e(8).cursor)) == ["t007", "t006"]
    head.apply("insert", e(11))
    head.apply("insert", e(1))  # older than the oldest row held: outside the head
    head.apply("delete", e(9))
    assert newest(head.newest_first()) == ["t011", "t010", "t008", "t007"]
    head.apply("update", e(8, version=2))
    assert head.first(4)[2].version == 2
    whole = TimelineHead([e(3), e(2)], depth=5)
    assert whole.complete and newest(whole.first(5)) == ["t003", "t002"]


def run(coro):
    return asyncio.run(coro)


def test_a_cached_head_follows_the_changes_and_serves_without_reads() -> None:
    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=5)
        store = {"u": [e(3), e(2), e(1)]}
        reads = []

        async def read(n: int) -> list[Entry]:
            reads.append(n)
            return store["u"][:n]

        assert newest(await cache.rows("home", "u", 2, None, read)) == ["t003", "t002"]
        await settle(cache)
        feed.publish(tl("insert", e(4)))
        feed.publish(tl("delete", e(3)))
        feed.publish(tl("update", e(2, version=2)))
        feed.deliver()
        rows = await cache.rows("home", "u", 3, None, read)
        assert newest(rows) == ["t004", "t002", "t001"] and rows[1].version == 2
        assert reads == [5] and cache.hits == 1 and cache.misses == 1

    run(scenario())


def test_a_change_published_during_the_fill_that_could_be_older_drops_the_fill() -> None:
    """The read shows t5 deleted; the insert of t5 published before that delete arrives only after
    the read: applying it would resurrect a deleted tweet, so the fill is dropped."""

    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=5)
        feed.publish(tl("insert", e(5)))  # published before the delete the read already reflects
        feed.publish(tl("delete", e(5)))
        feed.highs_after_read = {0: 2}

        async def read(n: int) -> list[Entry]:
            return [e(3)]  # Cassandra after the delete

        assert newest(await cache.rows("home", "u", 1, None, read)) == ["t003"]
        await settle(cache)
        assert not cache.cached("home", "u")  # ambiguous: not cached, the next read goes to Cassandra

    run(scenario())


def test_changes_published_after_the_read_are_applied_to_the_fill() -> None:
    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=5)
        feed.highs_after_read = {0: 0}

        async def read(n: int) -> list[Entry]:
            feed.publish(tl("insert", e(9)))  # written after the read: only the change has it
            return [e(3)]

        await cache.rows("home", "u", 1, None, read)
        await settle(cache)
        feed.deliver()
        assert newest(await cache.rows("home", "u", 2, None, read)) == ["t009", "t003"]
        assert cache.hits == 1

    run(scenario())


def test_a_newer_version_during_the_fill_is_kept_and_an_older_one_ignored() -> None:
    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=5)
        feed.publish(tl("update", e(3, version=1)))  # older than what the read shows
        feed.publish(tl("update", e(3, version=3)))  # newer
        feed.highs_after_read = {0: 2}

        async def read(n: int) -> list[Entry]:
            return [e(3, version=2)]

        await cache.rows("home", "u", 1, None, read)
        await settle(cache)
        assert [r.version for r in await cache.rows("home", "u", 1, None, read)] == [3]
        assert cache.hits == 1

    run(scenario())


def test_pull_authors_and_author_heads_are_kept_by_their_changes() -> None:
    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=5)
        reads = []

        async def inbox(n: int) -> HomeSlice:  # the inbox slice with its static pull authors, and the extras
            reads.append(n)
            return HomeSlice(InboxSlice([e(3)], ["star"]), [])

        async def authors() -> list[str]:
            raise AssertionError("the pull authors came with the inbox head")

        async def star(n: int) -> list[Entry]:
            return [e(1, author="star")]

        assert await cache.home("u", 2, None, inbox) == HomeSlice(InboxSlice([e(3)], ["star"]), [])
        await settle(cache)
        assert not cache.cached("home", "u")  # a user's first read is not cached: most are read once
        assert await cache.home("u", 2, None, inbox) == HomeSlice(InboxSlice([e(3)], ["star"]), [])  # the second fills
        await cache.rows("author", "star", 2, None, star)
        await settle(cache)
        assert await cache.pull_authors("u", authors) == ["star"] and reads == [2, 2]  # the rows the page needs
        feed.publish(PullFollowChange("insert", "moon", ("u", "v"), 5, None))
        feed.publish(AuthorChange("insert", e(2, author="star"), 5, None))
        feed.deliver()
        assert await cache.pull_authors("u", authors) == ["moon", "star"]
        assert (await cache.home("u", 2, None, inbox)).inbox.pull_authors == ["moon", "star"]
        assert newest(await cache.rows("author", "star", 2, None, star)) == ["t002", "t001"]
        feed.publish(PullFollowChange("delete", "star", ("u",), 6, None))
        feed.deliver()
        assert await cache.pull_authors("u", authors) == ["moon"] and reads == [2, 2]

    run(scenario())


def test_a_lists_rule_is_read_once_then_kept_by_its_changes() -> None:
    """A list's owner check reads its reader's statics once; its changes (a new policy, a move, a
    delete) keep the cached rule; a read during which a list's change arrived is not kept."""
    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=5)
        stored: dict[str, ListRule | None] = {"L": ListRule("own", "list"), "M": ListRule("own", "none")}
        reads: list[str] = []

        def reader_of(list_id: str):
            async def read() -> ListRule | None:
                reads.append(list_id)
                if list_id == "M":  # the list changes while its statics are read
                    feed.publish(ListChange("upsert", "M", "own", "followed", 7, None))
                    feed.deliver()
                return stored[list_id]
            return read

        L, M = list_reader("L"), list_reader("M")
        assert await cache.list_rule(L, reader_of("L")) == ListRule("own", "list")
        assert await cache.list_rule(L, reader_of("L")) == ListRule("own", "list") and reads == ["L"]
        feed.publish(ListChange("upsert", "L", "own", "followed", 5, None))
        feed.deliver()
        assert await cache.list_rule(L, reader_of("L")) == ListRule("own", "followed") and reads == ["L"]
        feed.publish(ListChange("delete", "L", "own", None, 6, None))
        feed.publish(ListChange("upsert", "L", "eve", "list", 6, None))  # moved to eve
        feed.deliver()
        assert await cache.list_rule(L, reader_of("L")) == ListRule("eve", "list")
        feed.publish(ListChange("delete", "L", "eve", None, 8, None))
        feed.deliver()
        assert await cache.list_rule(L, reader_of("L")) is None and reads == ["L"]
        await cache.list_rule(M, reader_of("M"))
        await cache.list_rule(M, reader_of("M"))
        assert reads == ["L", "M", "M"]  # the first read raced a change: not kept
        cache.drop_all("test")
        await cache.list_rule(L, reader_of("L"))
        assert reads == ["L", "M", "M", "L"]

    run(scenario())


def test_a_gap_drops_everything() -> None:
    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=5)

        async def read(n: int) -> list[Entry]:
            return [e(1)]

        await cache.rows("home", "u", 1, None, read)
        await settle(cache)
        assert cache.cached("home", "u")
        cache.drop_all("test")
        assert not cache.cached("home", "u") and len(cache) == 0

    run(scenario())


def test_evictions_are_counted_and_bound_the_cache() -> None:
    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=3, max_keys=2)

        async def read(n: int) -> list[Entry]:
            return [e(1)]

        for user in ("a", "b", "c"):
            await cache.rows("home", user, 1, None, read)
            await settle(cache)
        assert len(cache) == 2 and cache.evictions == 1 and not cache.cached("home", "a")

    run(scenario())


@pytest.mark.parametrize("seed", seeds(at_least=80))
def test_random_histories_with_fills_racing_the_changes_never_serve_a_row_older_than_the_feed(seed: int) -> None:
    """A timeline changed at random (inserts, edits, deletes, re-inserts) with Cassandra writes, their
    publication and their delivery interleaved with fills at random. After every step, each row the
    cached head covers shows a state of that row no older than the last change the feed applied to
    it, nor than what the read that filled the head saw (never a deleted row back, never an edit
    undone), and once every change is applied the
    cache equals Cassandra."""
    rng = random.Random(seed)

    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=4)
        cassandra: dict[str, Entry] = {}
        history: dict[str, list[tuple[int, Entry | None]]] = {f"t{n:03d}": [(0, None)] for n in range(8)}
        unpublished: list[TimelineChange] = []
        ts = 0
        checked = 0
        read_floor: dict[str, int] = {}  # per row, the write the fill's read saw
        last_read: dict[str, int] = {}

        def page(n: int) -> list[Entry]:
            return sorted(cassandra.values(), key=lambda r: r.cursor, reverse=True)[:n]

        async def read(n: int) -> list[Entry]:
            rows = page(n)
            last_read.clear()
            last_read.update({tid: states[-1][0] for tid, states in history.items()})
            for _ in range(rng.randrange(3)):  # publications landing while the read runs
                if unpublished:
                    feed.publish(unpublished.pop(0))
            feed.highs_after_read = {0: len(feed.topic) + (1 if unpublished and rng.random() < 0.5 else 0)}
            if feed.highs_after_read[0] > len(feed.topic):
                feed.publish(unpublished.pop(0))
            return rows

        def check_no_older_than_the_feed() -> None:
            nonlocal checked
            if not cache.cached("home", "u"):
                return
            head = cache._data[("home", "u")]
            applied: dict[str, int] = {}
            for change in feed.topic[:feed.position[0]]:
                applied[change.entry.tweet_id] = change.ts
            for n in range(8):
                tid = f"t{n:03d}"
                if not head.complete and (not head.cursors or e(n).cursor < head.cursors[0]):
                    continue
                floor = max(applied.get(tid, 0), read_floor.get(tid, 0))
                allowed = [state for t, state in history[tid] if t >= floor]
                held = next((r for r in head.rows if r.tweet_id == tid), None)
                assert held in allowed, f"{tid}: cached {held}, allowed {allowed}"
                checked += 1

        for _ in range(200):
            action = rng.random()
            if action < 0.45:  # the stream writes one row, publishes later
                ts += 1
                n = rng.randrange(8)
                if any(c.entry.tweet_id == f"t{n:03d}" for c in unpublished):
                    # a row's next write is in a later micro-batch, which starts only once the
                    # previous batch's changes are published
                    while unpublished:
                        feed.publish(unpublished.pop(0))
                old = cassandra.get(f"t{n:03d}")
                if old is not None and rng.random() < 0.5:
                    cassandra.pop(old.tweet_id)
                    unpublished.append(tl("delete", old, ts=ts))
                    history[old.tweet_id].append((ts, None))
                else:
                    # a tweet's version never goes back: a re-insert (a re-follow) shows the latest
                    # version, an edit a newer one
                    latest = max((st.version for _, st in history[f"t{n:03d}"] if st is not None), default=1)
                    entry = e(n, version=latest + 1 if old or rng.random() < 0.3 else latest)
                    cassandra[entry.tweet_id] = entry
                    unpublished.append(tl("update" if old else "insert", entry, ts=ts))
                    history[entry.tweet_id].append((ts, entry))
            elif action < 0.7 and unpublished:
                feed.publish(unpublished.pop(0))
            elif action < 0.85:
                feed.deliver(rng.randrange(feed.position[0], len(feed.topic) + 1))
            else:
                was_cached = cache.cached("home", "u")
                await cache.rows("home", "u", 2, None, read)
                await settle(cache)
                if cache.cached("home", "u") and not was_cached:
                    read_floor = dict(last_read)
            check_no_older_than_the_feed()
        while unpublished:
            feed.publish(unpublished.pop(0))
        feed.deliver()
        check_no_older_than_the_feed()

        async def fail(n: int) -> list[Entry]:
            raise AssertionError("a settled cache must not read")

        if cache.cached("home", "u"):
            head = cache._data[("home", "u")]
            assert head.newest_first() == page(len(head.rows)), "cache differs from Cassandra after all changes"
            assert await cache.rows("home", "u", min(2, len(head.rows)), None, fail) == page(min(2, len(head.rows)))
        assert checked > 0

    run(scenario())
