"""The read cache on the per-reader rows, by example and against random histories with fills racing
the changes (a scripted feed, as in test_read_cache.py): a home head holds the reader's extras beside
its inbox and the memberships of its visible set it was asked about; rows are identified by position,
so an entry that moves (another reposter, an earlier repost) is a delete and an insert, in either
order; a change of an extras row settles a racing fill only when the read shows exactly its content."""

from __future__ import annotations

import asyncio
import random

import pytest

from feed_service.core.rows import Entry
from feed_service.core.view_changes import (
    ExtrasChange,
    PullFollowChange,
    PullReposterChange,
    TimelineChange,
    UserRepostChange,
    VisibleChange,
)
from feed_service.server.read_cache import HomeSlice, ReadCache, TimelineHead
from feed_service.store.ports import InboxSlice

from tests.support.model import ScriptedFeed, seeds, settle


def repost(n: int, at: int, by: str = "pat", version: int = 1, pv: int = 1) -> Entry:
    return Entry(f"t{n:03d}", "bob", 100 + n, version, f"text {n} v{version}", 1, None, None, by, at, pv)


def ids(rows: list[Entry]) -> list[tuple[str, int]]:
    return [(r.tweet_id, r.at) for r in rows]


def test_a_head_moves_a_row_by_delete_and_insert_in_either_order() -> None:
    head = TimelineHead([repost(1, 50), repost(2, 40)], depth=5)
    head.apply("insert", repost(2, 60, by="zoe"))  # the insert at the new position first
    assert ids(head.newest_first()) == [("t002", 60), ("t001", 50), ("t002", 40)]
    head.apply("delete", repost(2, 40))
    assert ids(head.newest_first()) == [("t002", 60), ("t001", 50)]
    head.apply("delete", repost(1, 50))  # then the other order
    head.apply("insert", repost(1, 30))
    assert ids(head.newest_first()) == [("t002", 60), ("t001", 30)]
    head.apply("delete", repost(2, 99))  # a row not held: nothing
    assert ids(head.first(5)) == [("t002", 60), ("t001", 30)]


def test_a_head_counts_the_replies_it_holds() -> None:
    reply = Entry("r1", "bob", 70, 1, "re", 1, "t0", "dan")
    head = TimelineHead([reply, repost(1, 50)], depth=2)
    assert head.replies == 1
    head.apply("update", reply._replace(version=2))
    head.apply("insert", reply._replace(tweet_id="r2", created_at=80))  # pushes the repost out
    assert head.replies == 2 and len(head.rows) == 2
    head.apply("insert", repost(3, 90))  # pushes a reply out
    head.apply("delete", reply._replace(tweet_id="r2", created_at=80))
    assert head.replies == 0 and ids(head.rows) == [("t003", 90)]


def test_an_extras_change_racing_a_fill_settles_only_on_the_same_content() -> None:
    head = TimelineHead([repost(1, 50)], depth=5)
    assert head.settles("insert", repost(1, 50), versioned=False)
    assert not head.settles("update", repost(1, 50, pv=2), versioned=False)  # same version, other content
    assert head.settles("update", repost(1, 50, pv=2))  # an inbox row's content changes with its version only
    assert head.settles("delete", repost(1, 40), versioned=False)  # a row the read does not hold
    assert not head.settles("delete", repost(1, 50), versioned=False)


def home_read(inbox: list[Entry], extras: list[Entry], pull: list[str] | None = None):
    async def read(n: int) -> HomeSlice:
        return HomeSlice(InboxSlice(inbox[:n], pull if pull is not None else []), extras[:n])
    return read


def test_extras_and_visible_changes_keep_a_home_head() -> None:
    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=5)
        inbox = [Entry("i1", "cat", 45, 1, "x", 1)]
        read = home_read(inbox, [repost(1, 50)])
        for _ in range(2):  # the second read fills
            got = await cache.home("u", 3, None, read)
            await settle(cache)
        assert ids(got.extras) == [("t001", 50)] and cache.cached("home", "u")
        feed.publish(ExtrasChange("delete", repost(1, 50), "u", 5, None))
        feed.publish(ExtrasChange("insert", repost(1, 30, by="zoe"), "u", 5, None))
        feed.publish(ExtrasChange("insert", repost(2, 70), "other", 5, None))  # another reader's
        feed.deliver()
        got = await cache.home("u", 3, None, read)
        assert ids(got.extras) == [("t001", 30)] and got.extras[0].reposted_by == "zoe"
        assert cache._data[("home", "u")].extras is not None
        rows, _, _ = cache.home_rows("u", 3, None)
        assert [ids(r) for r in rows] == [[("i1", 45)], [("t001", 30)]]

        asked = []

        async def visible(users):
            asked.append(sorted(users))
            return {u for u in users if u == "dan"}

        assert await cache.sees("u", ["dan", "eve"], visible) == {"dan"}
        assert await cache.sees("u", ["dan", "eve"], visible) == {"dan"} and asked == [["dan", "eve"]]
        feed.publish(VisibleChange("delete", "u", "dan", 6, None))
        feed.publish(VisibleChange("insert", "u", "eve", 6, None))
        feed.deliver()
        assert await cache.sees("u", ["dan", "eve"], visible) == {"eve"} and len(asked) == 1

    asyncio.run(scenario())


def test_a_membership_read_overtaken_by_a_change_is_not_kept() -> None:
    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=5)
        read = home_read([], [])
        for _ in range(2):
            await cache.home("u", 3, None, read)
            await settle(cache)

        async def visible(users):  # the read runs while the reader unfollows dan
            feed.publish(VisibleChange("delete", "u", "dan", 6, None))
            feed.deliver()
            return {"dan"}

        assert await cache.sees("u", ["dan"], visible) == {"dan"}  # what the store said, for this read

        async def again(users):
            return set()

        assert await cache.sees("u", ["dan"], again) == set()  # not kept: read again

    asyncio.run(scenario())


def test_user_reposts_heads_follow_their_changes() -> None:
    async def scenario() -> None:
        feed = ScriptedFeed()
        cache = feed.cache = ReadCache(feed, depth=5)

        async def read(n: int) -> list[Entry]:
            return [repost(1, 50)]

        await cache.rows("reposts", "pat", 2, None, read)
        await settle(cache)
        feed.publish(UserRepostChange("insert", repost(2, 60), 3, None))
        feed.publish(UserRepostChange("delete", repost(1, 50), 3, None))
        feed.deliver()

        async def fail(n: int) -> list[Entry]:
            raise AssertionError("served from the head")

        assert ids(await cache.rows("reposts", "pat", 2, None, fail)) == [("t002", 60)]

    asyncio.run(scenario())


@pytest.mark.parametrize("seed", seeds(at_least=80))
def test_random_extras_histories_with_fills_racing_the_changes_end_equal_to_cassandra(seed: int) -> None:
    """A reader's extras and inbox changed at random (repost entries moving between positions,
    content changing with and without a new version, deletes, re-inserts), and the pull authors and
    pull reposters its home plan merges followed and unfollowed, written, published and delivered
    interleaved with fills. Whenever every change is applied, the cached head (if any) equals what
    Cassandra holds at its depth, and its home plan merges what Cassandra's statics say."""
    rng = random.Random(seed)

    async def scenario() -> None:
        feed = ScriptedFeed()
        depth = rng.choice([2, 3, 5])
        cache = feed.cache = ReadCache(feed, depth=depth)
        extras: dict[tuple[int, str], Entry] = {}
        inbox: dict[tuple[int, str], Entry] = {}
        pull: set[str] = set()
        reposters: set[str] = set()
        unpublished: list[object] = []
        ts = 0
        checked = 0

        def newest(rows: dict) -> list[Entry]:
            return sorted(rows.values(), key=lambda r: r.cursor, reverse=True)

        async def read(n: int) -> HomeSlice:
            got = HomeSlice(InboxSlice(newest(inbox)[:n], sorted(pull), sorted(reposters)), newest(extras)[:n])
            for _ in range(rng.randrange(3)):
                if unpublished:
                    feed.publish(unpublished.pop(0))
            feed.highs_after_read = {0: len(feed.topic) + (1 if unpublished and rng.random() < 0.5 else 0)}
            if feed.highs_after_read[0] > len(feed.topic):
                feed.publish(unpublished.pop(0))
            return got

        def flush() -> None:
            while unpublished:
                feed.publish(unpublished.pop(0))

        def plan_is_cassandras(head: TimelineHead) -> bool:
            plan = head.home_plan("u")
            return plan is not None and (plan.pull_authors, plan.pull_reposters) == (
                tuple(sorted(pull)), tuple(sorted(reposters)))

        for _ in range(200):
            action = rng.random()
            if action < 0.07:  # a membership of the plan: its next write is in a later micro-batch
                ts += 1
                if any(isinstance(c, (PullFollowChange, PullReposterChange)) for c in unpublished):
                    flush()
                if rng.random() < 0.5:
                    a = rng.choice(["moon", "star"])
                    op = "delete" if a in pull else "insert"
                    (pull.discard if op == "delete" else pull.add)(a)
                    unpublished.append(PullFollowChange(op, a, ("u",), ts, None))
                else:
                    p = rng.choice(["pat", "zoe"])
                    op = "delete" if p in reposters else "insert"
                    (reposters.discard if op == "delete" else reposters.add)(p)
                    unpublished.append(PullReposterChange(op, "u", p, ts, None))
                continue
            if action < 0.45:
                ts += 1
                n = rng.randrange(6)
                tid = f"t{n:03d}"
                if any(getattr(c, "entry", None) is not None and c.entry.tweet_id == tid for c in unpublished):
                    flush()  # a row's next write is in a later micro-batch
                if rng.random() < 0.25:  # the inbox: fixed position per tweet, versions only grow
                    e = Entry(tid, "cat", 10 + n, ts, "x", 1)
                    if e.cursor in inbox and rng.random() < 0.4:
                        del inbox[e.cursor]
                        unpublished.append(TimelineChange("delete", e, ("u",), ts, None))
                    else:
                        unpublished.append(TimelineChange("update" if e.cursor in inbox else "insert", e, ("u",), ts,
                                                          None))
                        inbox[e.cursor] = e
                    continue
                old = next((e for e in extras.values() if e.tweet_id == tid), None)
                changes = []
                if old is not None:
                    del extras[old.cursor]
                    changes.append(ExtrasChange("delete", old, "u", ts, None))
                if old is None or rng.random() < 0.7:
                    at = old.at if old is not None and rng.random() < 0.3 else rng.randrange(20, 40)
                    new = repost(n, at, by=rng.choice(["pat", "zoe"]), version=rng.randint(1, 2), pv=rng.randint(1, 2))
                    if old is not None and old.cursor == new.cursor:
                        changes = [ExtrasChange("update", new, "u", ts, None)]
                    else:
                        changes.append(ExtrasChange("insert", new, "u", ts, None))
                        if rng.random() < 0.5:
                            changes.reverse()  # the insert first: a consumer must not depend on the order
                    extras[new.cursor] = new
                unpublished.extend(changes)
            elif action < 0.65 and unpublished:
                feed.publish(unpublished.pop(0))
            elif action < 0.8:
                feed.deliver(rng.randrange(feed.position[0], len(feed.topic) + 1))
            else:
                await cache.home("u", depth, None, read)
                await settle(cache)
            if not unpublished and feed.position[0] == len(feed.topic) and cache.cached("home", "u"):
                head = cache._data[("home", "u")]
                assert head.newest_first() == newest(inbox)[:len(head.rows)]
                assert head.extras.newest_first() == newest(extras)[:len(head.extras.rows)]
                assert plan_is_cassandras(head)
                checked += 1
        flush()
        feed.deliver()
        for _ in range(2):  # a history that never held a head with nothing pending fills one now
            if not cache.cached("home", "u"):
                await cache.home("u", depth, None, read)
                await settle(cache)
        if cache.cached("home", "u"):
            head = cache._data[("home", "u")]
            assert head.newest_first() == newest(inbox)[:len(head.rows)]
            assert head.extras.newest_first() == newest(extras)[:len(head.extras.rows)]
            assert head.extras.complete is False or len(head.extras.rows) == len(extras)
            assert plan_is_cassandras(head)
            checked += 1
        assert checked > 0  # a cached head with nothing pending was compared

    asyncio.run(scenario())


def test_a_home_heads_plan_follows_its_pull_authors_and_reposters() -> None:
    """An inbox head keeps its reader's home plan (what a hit merges) and makes it again when a
    change of its pull authors or pull reposters arrives; a plan with pull reposters is not served
    from the heads (its repost rows need lookups)."""
    from feed_service.core.view_changes import PullFollowChange, PullReposterChange

    head = TimelineHead([], 5, {"star"}, TimelineHead([], 5), set())
    plan = head.home_plan("ann")
    assert plan is not None and plan.pull_authors == ("star",) and plan.cacheable
    assert head.home_plan("ann") is plan  # kept: no plan per hit
    head.follow(PullFollowChange("insert", "moon", ("ann",), 2, None))
    assert head.home_plan("ann").pull_authors == ("moon", "star")
    head.follow_reposter(PullReposterChange("insert", "ann", "pat", 3, None))
    assert head.home_plan("ann").pull_reposters == ("pat",) and not head.home_plan("ann").cacheable
    assert TimelineHead([], 5).home_plan("ann") is None  # filled without its statics: no plan
