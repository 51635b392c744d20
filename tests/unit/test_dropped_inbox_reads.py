"""Reads of a reader whose inbox is not kept (``home_timeline.inbox_dropped``, docs/activity.md),
against the model and the reference.

Random histories run through the pure core's :class:`~feed_service.core.view.Materializer`; its
tables are loaded into a :class:`MemoryStore`, and then some readers' inboxes are dropped as the
stream's driver drops them: the flag set, the rows deleted, or some of them left behind (stale: the
driver deletes rows at their write time, so rows can survive it). Every read of such a reader (pages,
a watch's catch-up, the read cache, a pushed watch) must still equal the model's
``TimelineView.entries`` and the batch reference, computed from its push authors' timelines; and a
kept reader's reads are unchanged.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feed_service.core.rules import push_authors, shown_in_inbox
from feed_service.core.reference import reference_entries, reference_tables
from feed_service.core.rows import Cursor, Entry
from feed_service.core.view import Materializer
from feed_service.core.view_changes import TimelineChange
from feed_service.server.pull_replies import deciding_user
from feed_service.server.pull_sources import PullSources
from feed_service.server.read_cache import ReadCache
from feed_service.server.timeline_reads import TimelineReads
from feed_service.store.memory import MemoryStore
from tests.support.model import (
    BUDGET,
    CAP,
    USERS,
    LiveFeed,
    WatchedService,
    batches_of,
    changes_between,
    drop,
    home_pages,
    load_all,
    newer_all,
    seeds,
    snapshot,
    written_with_stale,
)
from tests.support.sizes import examples

SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_the_inbox_rule_and_the_push_authors_are_the_cores() -> None:
    """The pull authors' reply rule is the inbox rule's complement: one function decides both."""
    for parent in (None, "ann", "bob", "cat"):
        e = Entry("t", "ann", 1, 1, "x", 1, "p" if parent else None, parent)
        assert (deciding_user(e, "bob") is None) == shown_in_inbox("ann", parent, "bob")
    assert push_authors({"ann", "bob", "star"}, ["star"]) == ["ann", "bob"]


@SETTINGS
@given(rnd=st.randoms(use_true_random=False), pull_threshold=st.sampled_from([1, 2, 1000]),
       pull_reposters=st.booleans(), size=st.integers(1, 3), ttl=st.sampled_from([0.0, 30.0]))
def test_pages_and_catch_up_of_dropped_readers_equal_the_model_and_the_reference(
        rnd: random.Random, pull_threshold: int, pull_reposters: bool, size: int, ttl: float) -> None:
    history, batches = batches_of(rnd, rnd.randint(0, 90))
    engine = Materializer(inbox_cap=CAP, pull_threshold=pull_threshold, pull_reposters=pull_reposters)
    for batch in batches:
        engine.process_batch(batch)
    store = MemoryStore()
    load_all(engine.view, store)
    dropped = {u for u in USERS if rnd.random() < 0.6}
    drop(store, dropped, rnd)
    reads = TimelineReads(PullSources(ttl_s=ttl, head=201))
    reference = reference_entries(reference_tables(history), inbox_cap=CAP)

    async def check() -> None:
        for user in USERS:
            expected = engine.view.entries(user)
            assert expected == reference.get(user, [])
            assert await home_pages(reads, store, user, size) == expected, (user, user in dropped)
            assert await newer_all(reads, store, user, size) == expected[::-1], (user, user in dropped)

    asyncio.run(check())


def test_a_push_authors_replies_to_third_users_are_read_past_and_come_from_the_extras() -> None:
    """bob is ann's push author; his 25 newest tweets reply to dan (in ann's extras only if ann sees
    dan): a page reads bob's timeline on below them. Stale inbox rows are ignored."""
    store = MemoryStore()
    store.visible["ann"] = {"bob", "dan"}
    store.dropped.add("ann")
    for n in range(30):
        reply = ("x", "dan") if n >= 5 else (None, None)
        store.add_author_entry(Entry(f"b{n:02d}", "bob", 100 + n, 1, "t", 1, *reply))
    store.add_author_entry(Entry("b99", "bob", 500, 1, "t", 1, "x", "ann"))  # to the reader: in the inbox
    store.add_author_entry(Entry("b98", "bob", 400, 1, "t", 1, "x", "bob"))  # a thread: in the inbox
    shown_reply = Entry("b29", "bob", 129, 1, "t", 1, "x", "dan")
    store.extras["ann"] = {shown_reply.cursor: shown_reply}  # the reader step showed this one
    store.add_entry("ann", Entry("gone", "bob", 450, 1, "stale", 1))  # a stale inbox row
    reads = TimelineReads(PullSources(ttl_s=0.0, head=201))
    every = asyncio.run(home_pages(reads, store, "ann", 3))
    assert [e.tweet_id for e in every] == ["b99", "b98", "b29", "b04", "b03", "b02", "b01", "b00"]
    assert store.calls["visible_users"] == 3  # one per page: 3, 3 and 2 entries
    store.dropped.clear()  # kept again: the inbox is what is read
    assert [e.tweet_id for e in asyncio.run(home_pages(reads, store, "ann", 3))] == ["gone", "b29"]


def test_a_dropped_readers_page_costs_the_visible_set_and_one_slice_per_push_author() -> None:
    store = MemoryStore()
    authors = [f"a{i:03d}" for i in range(100)]
    store.visible["ann"] = {*authors, "star"}
    store.add_pull_follow("ann", "star")
    store.dropped.add("ann")
    for i, a in enumerate(authors):
        store.add_author_entry(Entry(f"{a}.t", a, i, 1, "t", 1))
    store.add_author_entry(Entry("star.t", "star", 1000, 1, "t", 1))
    reads = TimelineReads(PullSources(ttl_s=30.0, head=201))
    page = asyncio.run(reads.home_page(store, "ann", None, 5, BUDGET))
    assert [e.tweet_id for e in page] == ["star.t", "a099.t", "a098.t", "a097.t", "a096.t"]
    assert (store.calls["inbox"], store.calls["visible_users"], store.calls["author_page"]) == (1, 1, 101)
    asyncio.run(reads.home_page(store, "ann", None, 5, BUDGET))  # the heads are the process's, for their TTL
    assert (store.calls["visible_users"], store.calls["author_page"]) == (2, 101)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_read_cache_keeps_no_head_of_a_dropped_reader_and_reads_the_flag_again_after_a_while() -> None:
    """A dropped reader is never served from a head; a kept reader's head is served for
    FLAG_RECHECK_S after the read that saw the flag, then filled again (the flag is not on the
    change topic: the driver sets it only for readers who have not read for far longer)."""
    clock = Clock()
    store = MemoryStore()
    store.visible["ann"] = {"bob"}
    for n in range(3):
        e = Entry(f"b{n}", "bob", n, 1, "t", 1)
        store.add_author_entry(e)
        store.add_entry("ann", e)
    feed = LiveFeed()
    cache = ReadCache(feed, depth=5, flag_recheck_s=30.0, timer=clock)  # type: ignore[arg-type]
    reads = TimelineReads(PullSources(ttl_s=0.0, head=201))
    reads.attach(feed, cache)  # type: ignore[arg-type]

    async def page() -> list[str]:
        for _ in range(3):
            await asyncio.sleep(0)  # fills settle
        rows = reads.cached_home_page("ann", None, 3)
        got = rows[0] if rows is not None else await reads.home_page(store, "ann", None, 3, BUDGET)
        return [e.tweet_id for e in got]

    async def run() -> None:
        assert await page() == ["b2", "b1", "b0"]
        assert await page() == ["b2", "b1", "b0"]  # the second read fills the head
        await asyncio.sleep(0)
        assert reads.cached_home_page("ann", None, 3) is not None
        # the driver drops ann's inbox (no change published) and bob tweets: no inbox row for ann
        store.dropped.add("ann")
        store.timelines.pop("ann")
        store.add_author_entry(Entry("b3", "bob", 3, 1, "t", 1))
        assert await page() == ["b2", "b1", "b0"]  # within the recheck: the head (see the docstring)
        clock.now += 30.0
        assert reads.cached_home_page("ann", None, 3) is None and cache.page_memo("ann", ("", 3)) is None
        assert await page() == ["b3", "b2", "b1"]  # read again: the flag says dropped
        assert not cache.cached("home", "ann")
        for _ in range(3):
            assert await page() == ["b3", "b2", "b1"]
            assert not cache.cached("home", "ann")  # never kept while dropped
        store.dropped.clear()  # rebuilt and kept again
        store.timelines["ann"] = {e.cursor: e for e in store.author_timelines["bob"].values()}
        assert await page() == ["b3", "b2", "b1"]
        assert await page() == ["b3", "b2", "b1"]
        await asyncio.sleep(0)
        assert cache.cached("home", "ann")

    asyncio.run(run())


@pytest.mark.parametrize("seed", seeds())
def test_the_read_cache_and_a_pushed_watch_of_dropped_readers_follow_the_model_batch_by_batch(seed: int) -> None:
    """Some readers' inboxes are dropped from the start (no inbox row written for them, no inbox
    change published, a few stale rows left); their watches (opened before the first batch, or in
    the middle with the client's first state read page by page) and pages must follow the model,
    and so must the kept readers'. Each batch is written and published stage by stage as the stream
    does (:data:`tests.support.model.STAGES`)."""
    rnd = random.Random(seed)
    _, batches = batches_of(rnd, 120)
    pull_threshold = rnd.choice([1, 2, 1000, 1000])
    pull_reposters = rnd.random() < 0.5
    start_at = 0 if seed % 2 == 0 else len(batches) // 2
    dropped_users = {u for u in USERS if rnd.random() < 0.6} or {USERS[0]}

    async def run() -> None:
        engine = Materializer(inbox_cap=CAP, pull_threshold=pull_threshold, pull_reposters=pull_reposters)
        store = MemoryStore()
        store.dropped = set(dropped_users)
        stale: dict[str, dict[Cursor, Entry]] = {u: {} for u in dropped_users}
        service = WatchedService(rnd, store)
        for i, batch in enumerate(batches):
            if i == start_at:
                await service.open_watches(first_state=True)
            if i == 3:  # rows the driver's deletes missed: stale, and never read
                for u in dropped_users:
                    stale[u] = {c: e._replace(text="stale") for c, e in engine.view.timelines.get(u, {}).items()
                                if rnd.random() < 0.5}
            before = snapshot(engine.view)
            engine.process_batch(batch)
            changes = changes_between(before, snapshot(engine.view), i + 1, reposters=True)
            # the stream writes, and so publishes, no inbox row of a dropped reader
            changes = [c for c in changes if not isinstance(c, TimelineChange)
                       or any(t not in dropped_users for t in c.timeline_ids)]
            await service.publish_staged(changes, written_with_stale(engine, stale))
            for _ in range(80):
                await asyncio.sleep(0)
            for user in USERS:
                _, cached = await service.check(user, engine.view.entries(user), (i, user, user in dropped_users))
                assert not (cached and user in dropped_users)  # no head of an inbox not kept
        service.close()

    asyncio.run(run())
