"""A follow's ``show_reposts`` option by example (docs/lists.md#per-follow-options): the property
tests over :mod:`tests.support.repost_runs` flip it at random against the reference."""

from __future__ import annotations

from feed_service.core.events import FollowChange, RepostChange, TweetUpsert
from feed_service.core.reference import reference_entries, reference_tables
from feed_service.core.view import Materializer


def _shown(engine: Materializer, reader: str) -> list[tuple[str, int, str | None]]:
    return [(e.tweet_id, e.at, e.reposted_by) for e in engine.view.entries(reader)]


def test_turning_a_followees_reposts_off_takes_its_repost_entries_out_and_back_in() -> None:
    history = [FollowChange("ann", "pat", 1, "follow"), FollowChange("ann", "zoe", 1, "follow"),
               TweetUpsert("t1", "bob", 1, 5, "x", 1), TweetUpsert("p1", "pat", 1, 7, "own", 1),
               RepostChange("pat", "t1", "bob", 1, "repost", 20, 1), RepostChange("zoe", "t1", "bob", 1, "repost", 50, 1)]
    engine = Materializer(inbox_cap=100)
    engine.process_batch(history)
    assert _shown(engine, "ann") == [("t1", 20, "pat"), ("p1", 7, None)]
    off = FollowChange("ann", "pat", 2, "follow", show_reposts=False)
    engine.process_batch([off])  # pat's own tweet stays; the next reposter ann sees takes t1
    assert _shown(engine, "ann") == [("t1", 50, "zoe"), ("p1", 7, None)]
    engine.process_batch([FollowChange("ann", "pat", 1, "follow")])  # a lower version: no change
    assert _shown(engine, "ann") == [("t1", 50, "zoe"), ("p1", 7, None)]
    engine.process_batch([FollowChange("ann", "zoe", 2, "follow", show_reposts=False)])
    assert _shown(engine, "ann") == [("p1", 7, None)]
    on = FollowChange("ann", "pat", 3, "follow")
    engine.process_batch([on])
    assert _shown(engine, "ann") == [("t1", 20, "pat"), ("p1", 7, None)]
    tables = reference_tables([*history, off, FollowChange("ann", "zoe", 2, "follow", show_reposts=False), on])
    assert [(e.tweet_id, e.at, e.reposted_by) for e in reference_entries(tables)["ann"]] == _shown(engine, "ann")


def test_reposts_on_wins_a_version_tie_between_two_follows_and_an_unfollow_wins_both() -> None:
    base = [TweetUpsert("t1", "bob", 1, 5, "x", 1), RepostChange("pat", "t1", "bob", 1, "repost", 20, 1)]
    for order in ([FollowChange("ann", "pat", 1, "follow"), FollowChange("ann", "pat", 1, "follow", show_reposts=False)],
                  [FollowChange("ann", "pat", 1, "follow", show_reposts=False), FollowChange("ann", "pat", 1, "follow")]):
        one, apart = Materializer(inbox_cap=100), Materializer(inbox_cap=100)
        one.process_batch([*base, *order])
        apart.process_batch(base)
        for change in order:
            apart.process_batch([change])
        assert _shown(one, "ann") == _shown(apart, "ann") == [("t1", 20, "pat")]
    engine = Materializer(inbox_cap=100)
    engine.process_batch([*base, FollowChange("ann", "pat", 1, "follow", show_reposts=False),
                          FollowChange("ann", "pat", 1, "unfollow")])
    assert engine.view.entries("ann") == []


def test_a_pull_reposter_whose_reposts_a_reader_turned_off_is_not_merged_in_for_that_reader() -> None:
    engine = Materializer(inbox_cap=100, pull_threshold=2, pull_reposters=True)
    engine.process_batch([FollowChange("ann", "pat", 1, "follow"), FollowChange("bea", "pat", 1, "follow"),
                          TweetUpsert("t1", "cat", 1, 5, "x", 1), RepostChange("pat", "t1", "cat", 1, "repost", 20, 1)])
    assert engine.view.pull_reposters == {"ann": {"pat"}, "bea": {"pat"}}
    engine.process_batch([FollowChange("ann", "pat", 2, "follow", show_reposts=False)])
    assert engine.view.pull_reposters == {"bea": {"pat"}}  # pat stays pull: seen by 2
    assert engine.view.entries("ann") == [] and _shown(engine, "bea") == [("t1", 20, "pat")]
    engine.process_batch([FollowChange("ann", "pat", 3, "follow")])
    assert _shown(engine, "ann") == [("t1", 20, "pat")]
