"""Encoded pages of the read cache, raced against random histories, and the reads a page costs.

A server with the read cache (fed by a scripted change feed, applied on the server's loop) and a
server without it read the same in-memory store over loopback gRPC; once every change is applied,
both must answer every page with the same response, whether the cached server merged it from its
heads, served it encoded from a head's memo or read the store. Changes are also applied *while* the
cached server hydrates a page (its profile read delivers them): a page built from the heads before
those changes must never be served after them. The cache on the real topic:
tests/integration/test_push_watch.py.
"""

from __future__ import annotations

import random

import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.core.rows import Entry, ProfileRow
from feed_service.core.view_changes import AuthorChange, PullFollowChange, TimelineChange
from feed_service.server.read_cache import ReadCache
from feed_service.server.testing import ServerThread
from feed_service.server.watch_hub import WatchHub
from feed_service.store.memory import MemoryStore
from tests.support.loopback import loopback_config
from tests.support.page_races import DeliveringStore, PendingFeed

USER = "ann"
PULL = ("star", "idol")
PUSH = ("bob", "cat")


class History:
    """Random changes of ann's inbox, of the pull authors' timelines and of whom she pulls, written
    to the store (as the stream writes Cassandra) and published (as the stream publishes them)."""

    def __init__(self, rnd: random.Random, store: MemoryStore, feed: PendingFeed) -> None:
        self.rnd, self.store, self.feed = rnd, store, feed
        self.n = 0
        self.ts = 0

    def _entry(self, author: str) -> Entry:
        self.n += 1
        pv = self.n  # a profile version the server has not cached yet: the page that shows it reads it
        self.store.add_profile(ProfileRow(author, pv, f"{author} v{pv}", None, None))
        created_at = 1_000 + 3 * self.n - self.rnd.randrange(30)  # mostly the newest: on the first pages
        return Entry(f"t{self.n:04d}", author, created_at, 1, f"text {self.n}", pv)

    def step(self) -> None:
        rnd, store = self.rnd, self.store
        self.ts += 1
        kind = rnd.random()
        inbox = store.timelines.setdefault(USER, {})
        if kind < 0.35 or not inbox:
            e = self._entry(rnd.choice(PUSH))
            inbox[e.cursor] = e
            change: object = TimelineChange("insert", e, (USER,), self.ts, None)
        elif kind < 0.45:
            old = rnd.choice(list(inbox.values()))
            e = old._replace(version=old.version + 1, text=old.text + "'")
            inbox[e.cursor] = e
            change = TimelineChange("update", e, (USER,), self.ts, None)
        elif kind < 0.55:
            e = inbox.pop(rnd.choice(list(inbox)))
            change = TimelineChange("delete", e, (USER,), self.ts, None)
        elif kind < 0.8:
            author = rnd.choice(PULL)
            rows = store.author_timelines.setdefault(author, {})
            if rows and rnd.random() < 0.3:
                e = rows.pop(rnd.choice(list(rows)))
                change = AuthorChange("delete", e, self.ts, None)
            else:
                e = self._entry(author)
                rows[e.cursor] = e
                change = AuthorChange("insert", e, self.ts, None)
        else:
            author = rnd.choice(PULL)
            follows = store.follows_pull.setdefault(USER, set())
            op = "delete" if author in follows else "insert"
            (follows.discard if op == "delete" else follows.add)(author)
            change = PullFollowChange(op, author, (USER,), self.ts, None)
        self.feed.topic.append(change)


def pages(server: ServerThread, size: int, limit: int = 3) -> list[pb.GetHomeTimelineResponse]:
    """The first ``limit`` pages of ann's home timeline, as decoded responses."""
    stub, out, token = server.stub(), [], ""
    for _ in range(limit):
        page = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=USER, page_size=size, page_token=token),
                                    metadata=server.auth(USER), timeout=5)
        out.append(page)
        token = page.next_page_token
        if not token:
            break
    return out


@pytest.mark.parametrize("seed", range(4))
def test_cached_and_encoded_pages_equal_the_uncached_ones_under_random_histories(seed: int) -> None:
    rnd = random.Random(seed)
    store = DeliveringStore()
    feed = PendingFeed()
    store.feed = feed
    history = History(rnd, store, feed)
    for _ in range(30):
        history.step()
    with ServerThread(loopback_config(), store=store) as cached, ServerThread(loopback_config(), store=store) as plain:
        async def attach() -> ReadCache:
            cache = ReadCache(feed, depth=9)
            feed.cache = cache
            cached.server.servicer.attach_changes(feed, cache, WatchHub())
            feed.deliver()
            return cache

        cache = cached.run(attach())
        served = {"memo": 0}
        page_memo = cache.page_memo

        def counting(user_id, key):
            found = page_memo(user_id, key)
            served["memo"] += found is not None
            return found

        cache.page_memo = counting
        compared = 0
        for _ in range(120):
            for _ in range(rnd.choice((0, 0, 1, 3))):
                history.step()
            if feed.pending and rnd.random() < 0.5:
                store.armed = True  # deliver them while the next page is hydrated
            size = rnd.choice((2, 4, 4, 4))
            # with changes pending, the read races them (a fill's settling, or the armed profile
            # read, applies them meanwhile): it may show either side, so only the reads after count
            exact = not feed.pending
            got = pages(cached, size)
            store.fired = store.armed = False
            if not exact:
                cached.run(_deliver(feed))
                continue
            assert got == pages(plain, size)
            compared += 1
        cached.run(_deliver(feed))
        for size in (2, 4):
            assert pages(cached, size, limit=50) == pages(plain, size, limit=50)
            assert pages(cached, size, limit=50) == pages(plain, size, limit=50)  # encoded now
    assert compared > 30 and served["memo"] > 0


async def _deliver(feed: PendingFeed) -> None:
    feed.deliver()


def test_an_uncached_first_page_without_pull_authors_reads_the_inbox_and_the_extras_only() -> None:
    store = MemoryStore()
    for n in range(30):
        store.add_entry(USER, Entry(f"t{n:04d}", "bob", 1_000 + n, 1, f"text {n}", 1))
    store.add_profile(ProfileRow("bob", 1, "Bob", None, None))
    with ServerThread(loopback_config(), store=store) as server:
        pages(server, 20, limit=1)  # profiles are read once, then cached
        store.calls.clear()
        first, second = pages(server, 20, limit=2)
        assert [e.tweet_id for e in first.entries][:2] == ["t0029", "t0028"] and len(second.entries) == 10
        # one inbox slice per page (it reads through page: counted there too) and, beside it, one
        # slice of the reader's home_extras; no pull_follows read, no visible set (no pull author)
        assert store.calls == {"inbox": 2, "page": 2, "extras_page": 2}


def test_a_first_page_with_pull_authors_reads_the_list_with_the_inbox() -> None:
    store = MemoryStore()
    store.add_entry(USER, Entry("t1", "bob", 1_000, 1, "hi", 1))
    store.add_author_entry(Entry("s1", "star", 1_001, 1, "star", 1))
    store.add_pull_follow(USER, "star")
    with ServerThread(loopback_config(), store=store) as server:
        (page,) = pages(server, 20, limit=1)
        assert [e.tweet_id for e in page.entries] == ["s1", "t1"]
        assert store.calls["pull_authors"] == 0 and store.calls["inbox"] == 1 and store.calls["author_page"] == 1
