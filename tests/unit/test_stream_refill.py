"""The refill of trimmed inboxes (docs/trimming.md#refill): the author key's answer to a request, and
the driver's check and requests (with a stand-in store: the real check is
tests/integration/test_refill_check.py, the whole path tests/integration/test_trimming.py)."""

from __future__ import annotations

import json

from feed_service.core.events import Exclusion, FollowChange, ListFollow, RefillRequest, TweetUpsert, event_to_json, join_keys, parse_event
from feed_service.core.join import step
from feed_service.core.list_readers import list_reader
from feed_service.settings import Settings
from feed_service.store.ports import ShortInbox
from spark_jobs.stream.activity import rebuild_requests
from spark_jobs.stream.refill import StreamRefill
from spark_jobs.stream.sink import PartitionReport, merge_reports


def _tweets(n: int, parent: str | None = None) -> list[TweetUpsert]:
    return [TweetUpsert(f"t{i}", "bob", 1, 100 + i, f"#{i}", 1, *((f"p{i}", parent) if parent else (None, None)))
            for i in range(n)]


def test_an_author_answers_with_its_newest_rows_below_the_line_at_a_new_clock() -> None:
    first = step(None, [FollowChange("ann", "bob", 1, "follow"), FollowChange("cat", "bob", 1, "follow"),
                        *_tweets(6), *[TweetUpsert(f"r{i}", "bob", 1, 90 + i, "re", 1, "x", "dan") for i in range(3)]])
    answer = step(first.state, [RefillRequest("ann", "bob", 104, "t4", 3)])
    assert answer.ts == first.ts + 1  # above every write the trims' tombstones carry
    # the row on the line is written again too, uncounted (its (created_at, tweet_id) may be another
    # author's row in a model where tweet ids repeat across authors)
    assert [(d.op, d.entry.tweet_id, d.timeline_ids) for d in answer.deltas] == [
        ("update", "t4", ("ann",)), ("update", "t3", ("ann",)), ("update", "t2", ("ann",)), ("update", "t1", ("ann",))]
    # replies to a third user are not ann's inbox rows; a reader who does not follow gets nothing
    nothing = step(first.state, [RefillRequest("eve", "bob", 104, "t4", 3)])
    assert nothing.deltas == () and nothing.ts == first.ts


def test_duplicate_and_overlapping_requests_write_each_row_once() -> None:
    first = step(None, [FollowChange("ann", "bob", 1, "follow"), *_tweets(6)])
    answer = step(first.state, [RefillRequest("ann", "bob", 104, "t4", 2), RefillRequest("ann", "bob", 104, "t4", 2),
                                RefillRequest("ann", "bob", 103, "t3", 3)])
    assert [d.entry.tweet_id for d in answer.deltas] == ["t4", "t3", "t2", "t1", "t0"]



def test_a_members_key_answers_a_lists_readers_refill_as_a_followers() -> None:
    """A list follow is a follow at the member's key (docs/lists.md#in-the-engine): the key answers the
    list's reader with its inbox rows (no reply, a self-reply; a reply to the owner is the per-reader
    stage's), and the request crosses the stream's refill topic as any reader's does (the reserved
    reader id is the stream's own, docs/event-kinds.md)."""
    lr = list_reader("L")
    first = step(None, [ListFollow(lr, "bob", "own", "L", 1, "follow"), *_tweets(4),
                        TweetUpsert("r0", "bob", 1, 90, "re", 1, "x", "own"), TweetUpsert("r1", "bob", 1, 91, "re", 1, "x", "bob")])
    request = RefillRequest(lr, "bob", 102, "t2", 2)
    record = json.dumps(event_to_json(request), separators=(",", ":"))
    assert parse_event(record) == request and join_keys(request) == ("bob",)
    answer = step(first.state, [parse_event(record)])
    assert [(d.op, d.entry.tweet_id, d.timeline_ids) for d in answer.deltas] == [
        ("update", "t2", (lr,)), ("update", "t1", (lr,)), ("update", "t0", (lr,))]
    rebuild = step(first.state, rebuild_requests({lr: ("bob",)}))
    assert [d.entry.tweet_id for d in rebuild.deltas] == ["t3", "t2", "t1", "t0", "r1"]


def test_a_key_answers_nothing_to_an_owner_that_sets_its_author_aside() -> None:
    """The store's push authors of a home reader are its visible users less its pull authors
    (``CassandraRefillCheck``, ``CassandraActivity``): a member of the reader's exclusive list is
    asked too, and its key, which withholds the owner's inbox rows, answers nothing."""
    first = step(None, [FollowChange("own", "bob", 1, "follow"), Exclusion("own", "bob", 1, "exclude"), *_tweets(3)])
    assert [d.timeline_ids for d in first.deltas] == []
    for request in (RefillRequest("own", "bob", 102, "t2", 2), *rebuild_requests({"own": ("bob",)})):
        assert step(first.state, [request]).deltas == ()

class FakeCheck:
    def __init__(self, shorts: list[ShortInbox]) -> None:
        self.shorts, self.asked = shorts, []

    def short_inboxes(self, timeline_ids):
        ids = list(timeline_ids)
        self.asked.append(ids)
        return [s for s in self.shorts if s.timeline_id in ids]


def test_the_driver_asks_each_push_author_of_a_short_inbox_it_deleted_rows_from() -> None:
    check = FakeCheck([ShortInbox("ann", (10, "t9"), 2, ("bob", "cat")), ShortInbox("zed", (5, "t1"), 1, ("bob",))])
    published: list = []
    refill = StreamRefill(Settings(), check_factory=lambda: check,
                          publish=lambda settings, requests: published.extend(requests) or len(requests))
    assert refill.after_batch({}) == 0 and check.asked == []  # nothing deleted: no read
    assert refill.after_batch({"ann": 3, "bob": 0, "cat": 1}) == 2
    assert check.asked == [["ann", "cat"]]
    assert published == [RefillRequest("ann", "bob", 10, "t9", 2), RefillRequest("ann", "cat", 10, "t9", 2)]
    record = refill.record()
    assert (record["refill_checked_timelines"], record["refill_short_timelines"], record["refill_requests"]) == (2, 1, 2)


def test_partition_reports_count_deleted_rows_per_timeline() -> None:
    merged = merge_reports([PartitionReport({"ann": 1}, deletes={"ann": 2}), PartitionReport(deletes={"ann": 1, "cat": 4})])
    assert merged.deletes == {"ann": 3, "cat": 4} and merged.upserts == {"ann": 1}
