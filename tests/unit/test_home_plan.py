"""The home plan (feed_service/core/home_plan.py): the sources a reader's statics decide, the one
merge, and the read-time rules every reader of a home timeline uses (the model, pages, the read
cache, pushed watches)."""

from __future__ import annotations

import random

from feed_service.core.home_plan import (
    DROPPED_INBOX,
    EXTRAS,
    INBOX,
    PULL_AUTHOR,
    PULL_REPOSTER,
    HomeStatics,
    home_plan,
    merge_home,
    shown_repost,
    shows_row,
)
from feed_service.core.rules import shown_in_inbox
from feed_service.core.per_reader.pull_reposts import RepostFacts, shows_extras_row, shows_pulled_row
from feed_service.core.rows import Entry
from feed_service.core.timeline_merge import merge_newest, merge_oldest
from feed_service.core.view import Materializer
from feed_service.server.pull_replies import deciding_user
from tests.support.model import CAP, USERS, batches_of


def test_the_statics_decide_the_sources_in_merge_order() -> None:
    plain = home_plan("ann", HomeStatics())
    assert [tuple(s) for s in plain.sources] == [(INBOX, "ann"), (EXTRAS, "ann")]
    assert plain.cacheable and not plain.decides_reposts
    every = home_plan("ann", HomeStatics(("star", "zed"), ("pat",), True))
    assert [tuple(s) for s in every.sources] == [(DROPPED_INBOX, "ann"), (EXTRAS, "ann"), (PULL_AUTHOR, "star"),
                                                (PULL_AUTHOR, "zed"), (PULL_REPOSTER, "pat")]
    assert every.decides_reposts and not every.cacheable
    assert not home_plan("ann", HomeStatics((), ("pat",))).cacheable  # repost rows need lookups
    assert not home_plan("ann", HomeStatics(("star",), (), True)).cacheable  # no head of an inbox not kept


def test_the_one_merge_is_the_timeline_merge_in_either_direction() -> None:
    """Sources hold a tweet once each (two sources may both hold it, briefly: the first one's shows)."""
    rnd = random.Random(5)
    for _ in range(200):
        slices = [sorted((Entry(f"t{n}", "a", rnd.randrange(10), 1, "", 1)  # one row per tweet per source
                          for n in rnd.sample(range(30), rnd.randrange(5))), key=lambda e: (e.at, e.tweet_id),
                         reverse=True)
                  for _ in range(rnd.randrange(4))]
        limit = rnd.randint(1, 6)
        assert merge_home(slices, limit) == merge_newest(slices, limit)
        oldest = [rows[::-1] for rows in slices]
        assert merge_home(oldest, limit, oldest_first=True) == merge_oldest(oldest, limit)


def test_a_pull_authors_rows_and_a_dropped_inboxs_rows_follow_one_rule() -> None:
    for parent in (None, "ann", "bob", "cat"):
        e = Entry("t", "ann", 1, 1, "x", 1, "p" if parent else None, parent)
        assert shows_row(DROPPED_INBOX, e, "bob") == shown_in_inbox("ann", parent, "bob")
        assert shows_row(PULL_AUTHOR, e, "bob", ()) == (deciding_user(e, "bob") is None)
        assert shows_row(PULL_AUTHOR, e, "bob", {"cat"})  # a reply to a user the reader sees
        assert shows_row(INBOX, e, "bob") and shows_row(EXTRAS, e, "bob")  # the stream decided those


def test_shown_repost_agrees_with_the_rows_rules() -> None:
    """For every tweet the one repost row the plan shows is the row the model's read shows."""
    rnd = random.Random(11)
    for _ in range(300):
        sample = Entry("t", rnd.choice(["ann", "bob"]), 5, 1, "x", 1,
                       *(("p", rnd.choice(["cat", "bob", "dan"])) if rnd.random() < 0.5 else (None, None)))
        pulled = {(sample.author_id, "t"): sorted({(rnd.randrange(4), p) for p in rnd.sample(["p", "q", "r"], 2)})}
        pushed = {(sample.author_id, "t"): (rnd.randrange(4), "s")} if rnd.random() < 0.6 else {}
        facts = RepostFacts(pulled, pushed, set(rnd.sample(["ann", "bob", "cat", "dan"], 2)),
                            {"bob"} if rnd.random() < 0.2 else set())
        shown = shown_repost(sample, "rdr", facts)
        rows = [(EXTRAS, *pushed[k]) for k in pushed
                if shows_extras_row(sample._replace(reposted_at=pushed[k][0], reposted_by=pushed[k][1]), facts)]
        rows += [(PULL_REPOSTER, at, p) for at, p in pulled[(sample.author_id, "t")]
                 if shows_pulled_row(sample._replace(reposted_at=at, reposted_by=p), "rdr", facts)]
        assert len(rows) <= 1
        assert shown == (rows[0] if rows else None)


def test_the_models_read_is_its_plans_merge() -> None:
    """The model's plan says what its read merged: a reader's entries come only from its plan's sources."""
    rnd = random.Random(3)
    for _ in range(5):
        _, batches = batches_of(rnd, 80)
        engine = Materializer(inbox_cap=CAP, pull_threshold=rnd.choice([1, 2]), pull_reposters=True)
        for batch in batches:
            engine.process_batch(batch)
        view = engine.view
        for user in USERS:
            plan = view.plan(user)
            assert plan.pull_authors == tuple(sorted(view.pull_follows.get(user, ())))
            assert plan.pull_reposters == tuple(sorted(view.pull_reposters.get(user, ())))
            owners = {e.author_id for e in view.entries(user) if e.reposted_by is None}
            reposters = {e.reposted_by for e in view.entries(user) if e.reposted_by is not None}
            assert owners <= set(view.author_timelines) and reposters <= set(USERS)
