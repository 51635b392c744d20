"""The read service with pull reposters merged at read, against the model and the reference
(docs/reposts-and-replies.md, hybrid fan-out).

Random histories run through ``Materializer(pull_reposters=True)`` at thresholds of 1-3 readers, so
reposters cross between push and pull; its tables (and the readers' pull reposters and hidden sets)
are loaded into a :class:`MemoryStore`. Home pages read page by page at small sizes, and a watch's
catch-up from the start, must equal the model's ``TimelineView.entries`` and the batch reference;
then batch by batch as view changes, through the read cache and a pushed watch.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feed_service.core.reference import reference_entries, reference_tables
from feed_service.core.rows import Entry
from feed_service.core.view import Materializer
from feed_service.server.pull_sources import PullSources
from feed_service.server.timeline_reads import TimelineReads
from feed_service.store.memory import MemoryStore
from tests.support.model import (
    CAP,
    USERS,
    WatchedService,
    batches_of,
    changes_between,
    home_pages,
    load_all,
    newer_all,
    seeds,
    snapshot,
)
from tests.support.sizes import examples


SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(rnd=st.randoms(use_true_random=False), pull_threshold=st.sampled_from([1, 2, 3]), size=st.integers(1, 3))
def test_home_pages_and_catch_up_with_pull_reposters_equal_the_model_and_the_reference(
        rnd: random.Random, pull_threshold: int, size: int) -> None:
    history, batches = batches_of(rnd, rnd.randint(0, 90))
    engine = Materializer(inbox_cap=CAP, pull_threshold=pull_threshold, pull_reposters=True)
    for batch in batches:
        engine.process_batch(batch)
    store = MemoryStore()
    load_all(engine.view, store)
    reads = TimelineReads(PullSources(ttl_s=0.0, head=201))
    reference = reference_entries(reference_tables(history), inbox_cap=CAP)

    async def check() -> None:
        for user in USERS:
            expected = engine.view.entries(user)
            assert expected == reference.get(user, [])
            assert await home_pages(reads, store, user, size) == expected
            assert await newer_all(reads, store, user, size) == expected[::-1]

    asyncio.run(check())


def test_a_pull_reposters_earlier_repost_hides_the_pushed_entry_and_is_read_past_when_hidden() -> None:
    """ann sees pat (a pull reposter) and zoe (a push reposter); pat's 6 newest reposts are of tweets
    direct for ann or reposted earlier by zoe, so a page reads past them."""
    store = MemoryStore()
    store.reposters_pull["ann"] = {"pat"}
    store.visible["ann"] = {"pat", "zoe", "bob"}
    for n in range(8):  # pat reposts cat's c0..c7 at 100+n; bob's tweets are direct for ann
        author = "bob" if n >= 5 else "cat"
        store.user_reposts.setdefault("pat", {})[(100 + n, f"c{n}")] = Entry(
            f"c{n}", author, n, 1, "t", 1, None, None, "pat", 100 + n, 1)
    # zoe reposted c4 at 50 (earlier than pat's 104): ann's pushed entry of c4
    store.extras["ann"] = {(50, "c4"): Entry("c4", "cat", 4, 1, "t", 1, None, None, "zoe", 50, 1),
                           # zoe reposted c0 at 150, after pat's 100: pat's row shows, this one does not
                           (150, "c0"): Entry("c0", "cat", 0, 1, "t", 1, None, None, "zoe", 150, 1)}
    reads = TimelineReads(PullSources(ttl_s=0.0, head=201))
    page = asyncio.run(home_pages(reads, store, "ann", 2))
    assert [(e.tweet_id, e.at, e.reposted_by) for e in page] == [
        ("c3", 103, "pat"), ("c2", 102, "pat"), ("c1", 101, "pat"), ("c0", 100, "pat"), ("c4", 50, "zoe")]
    store.hidden["ann"] = {"cat"}  # ann mutes cat: no repost of cat's tweets shows, pushed or pulled
    store.extras["ann"] = {}
    assert asyncio.run(home_pages(reads, store, "ann", 2)) == []


@pytest.mark.parametrize("seed", seeds())
def test_the_read_cache_and_a_pushed_watch_follow_pull_reposters_batch_by_batch(seed: int) -> None:
    """Watches open before the first batch, or (odd seeds) in the middle of the history with the
    client's first state read page by page after subscribing, as a client does: rows the watch
    never heard of must still change and leave. Each batch is written and published stage by stage
    as the stream does, so a watch may act on one stage's changes while the next stage's tables
    (the visible sets, the extras) are still the previous batch's."""
    rnd = random.Random(seed)
    _, batches = batches_of(rnd, 120)
    pull_threshold = rnd.choice([1, 2, 3])
    start_at = 0 if seed % 2 == 0 else len(batches) // 2

    async def run() -> None:
        engine = Materializer(inbox_cap=CAP, pull_threshold=pull_threshold, pull_reposters=True)
        service = WatchedService(rnd)
        for i, batch in enumerate(batches):
            if i == start_at:
                await service.open_watches(first_state=True)
            before = snapshot(engine.view)
            engine.process_batch(batch)
            changes = changes_between(before, snapshot(engine.view), i + 1, reposters=True)
            written = MemoryStore()
            load_all(engine.view, written)
            await service.publish_staged(changes, written)
            for _ in range(80):
                await asyncio.sleep(0)
            for user in USERS:
                await service.check(user, engine.view.entries(user), (i, user))
        assert service.cache.hits > 0
        service.close()

    asyncio.run(run())
