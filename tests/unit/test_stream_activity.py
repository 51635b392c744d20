"""The stream driver's side of inactive readers (spark_jobs/stream/activity.py) against fakes of its
store and of the read-activity topic: who goes, who comes back, in which order the flag, the skip set,
the drops and the rebuild requests happen, and when a rebuild counts as answered."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from feed_service.core.events import REBUILD_LINE, REBUILD_NEED
from feed_service.core.list_readers import list_reader
from feed_service.settings import Settings
from spark_jobs.stream.activity import DROPPED, REBUILDING, StreamActivity, refill_offsets


class FakeStore:
    def __init__(self, readers=None, visible=None):
        self.rows = dict(readers or {})
        self.visible = visible or {}
        self.log: list[tuple] = []

    def load(self):
        return dict(self.rows)

    def save(self, readers):
        self.rows.update(readers)

    def set_dropped(self, readers, dropped):
        self.log.append(("flag", tuple(sorted(readers)), dropped))

    def drop_rows(self, readers):
        self.log.append(("drop", tuple(sorted(readers))))
        return 10 * len(list(readers))

    def push_authors(self, readers):
        return {r: tuple(self.visible.get(r, ())) for r in readers}


class FakeReports:
    def __init__(self):
        self.pending: dict[str, int] = {}
        self.commits = 0

    def poll_available(self, timeout=30.0):
        out, self.pending = self.pending, {}
        return out

    def commit(self):
        self.commits += 1


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _activity(tmp_path: Path, store: FakeStore, reports: FakeReports, clock: Clock, published: list,
              marks: dict[int, int]) -> StreamActivity:
    settings = replace(Settings(), inactive_after_s=60, read_report_interval_s=10)
    return StreamActivity(settings, tmp_path, store_factory=lambda: store, reports_factory=lambda: reports,
                          publish=lambda s, reqs: published.extend(reqs) or len(reqs),
                          refill_watermarks=lambda: dict(marks), clock=clock)


def _offsets(tmp_path: Path, batch_id: int, topic: str, offsets: dict[int, int]) -> None:
    (tmp_path / str(batch_id)).write_text("v1\n{}\n" + json.dumps({topic: {str(p): o for p, o in offsets.items()}}) + "\n")


def test_a_reader_first_written_is_kept_for_a_window_then_dropped_flag_first(tmp_path: Path) -> None:
    store, reports, clock, published = FakeStore(), FakeReports(), Clock(), []
    activity = _activity(tmp_path, store, reports, clock, published, {0: 5})
    assert activity.before_batch() == frozenset()
    activity.after_batch(0, ["ann", "bob"])
    clock.now += 30
    reports.pending = {"bob": int(clock.now * 1000)}
    assert activity.before_batch() == frozenset()
    clock.now += 40  # ann: 70 s since first written, bob read 40 s ago
    assert activity.before_batch() == frozenset({"ann"})
    assert store.log == [("flag", ("ann",), True)]  # the flag before any write is skipped
    activity.after_batch(2, [], skipped_rows=3)
    assert store.log[-1] == ("drop", ("ann",))
    record = activity.record()
    assert (record["active_readers"], record["inactive_readers"], record["skipped_rows"], record["dropped_rows"]) == (
        1, 1, 3, 10)
    assert store.rows["ann"][1] == DROPPED and reports.commits == 3


def test_a_returning_reader_is_written_at_once_rebuilt_by_its_push_authors_and_cleared_once_answered(
        tmp_path: Path) -> None:
    settings_topic = Settings().topic("refills")
    store = FakeStore({"ann": (0, DROPPED)}, visible={"ann": ("bob", "cat")})
    reports, clock, published = FakeReports(), Clock(), []
    activity = _activity(tmp_path, store, reports, clock, published, {0: 7, 1: 3})
    assert activity.before_batch() == frozenset({"ann"})
    reports.pending = {"ann": int(clock.now * 1000)}
    assert activity.before_batch() == frozenset()  # written from this batch on
    assert store.rows["ann"][1] == REBUILDING
    _offsets(tmp_path, 4, settings_topic, {0: 7, 1: 0})
    activity.after_batch(4, [])
    assert [(r.reader_id, r.author_id, (r.below_created_at, r.below_tweet_id), r.need) for r in published] == [
        ("ann", "bob", REBUILD_LINE, REBUILD_NEED), ("ann", "cat", REBUILD_LINE, REBUILD_NEED)]
    assert ("flag", ("ann",), False) not in store.log  # the batch that asked did not answer
    _offsets(tmp_path, 5, settings_topic, {0: 7, 1: 2})
    activity.before_batch()
    activity.after_batch(5, [])
    assert ("flag", ("ann",), False) not in store.log  # not yet past every request
    _offsets(tmp_path, 6, settings_topic, {0: 9, 1: 3})
    activity.before_batch()
    activity.after_batch(6, [])
    assert store.log[-1] == ("flag", ("ann",), False)
    assert store.rows["ann"][1] == "active" and activity.record()["rebuilds"] == 1



def test_a_lists_reader_goes_and_comes_back_as_a_user_does(tmp_path: Path) -> None:
    """The driver knows readers by id only: a list's reader is recorded when first written, goes
    after a window without a read of the list, and comes back with a rebuild by its push authors (the
    store's visible set of the list's reader: its members the owner does not hide, less the pulled)."""
    lr = list_reader("L")
    store = FakeStore(visible={lr: ("bob", "own")})
    reports, clock, published = FakeReports(), Clock(), []
    activity = _activity(tmp_path, store, reports, clock, published, {0: 1})
    activity.before_batch()
    activity.after_batch(0, [lr, "ann"])
    clock.now += 70
    assert activity.before_batch() == frozenset({lr, "ann"}) and store.log[0] == ("flag", (lr, "ann"), True)
    activity.after_batch(1, [])
    assert ("drop", (lr, "ann")) in store.log
    reports.pending = {lr: int(clock.now * 1000)}
    assert activity.before_batch() == frozenset({"ann"}) and store.rows[lr][1] == REBUILDING
    activity.after_batch(2, [])
    assert [(r.reader_id, r.author_id, r.need) for r in published] == [(lr, "bob", REBUILD_NEED), (lr, "own", REBUILD_NEED)]

def test_a_restarted_driver_asks_again_for_open_rebuilds(tmp_path: Path) -> None:
    store = FakeStore({"ann": (10**12, REBUILDING)}, visible={"ann": ("bob",)})
    published: list = []
    activity = _activity(tmp_path, store, FakeReports(), Clock(), published, {0: 1})
    activity.before_batch()
    activity.after_batch(0, [])
    assert [r.author_id for r in published] == ["bob"]


def test_nothing_happens_with_the_window_off(tmp_path: Path) -> None:
    activity = StreamActivity(replace(Settings(), inactive_after_s=0), tmp_path,
                              store_factory=lambda: (_ for _ in ()).throw(AssertionError("connected")))
    assert activity.before_batch() == frozenset()
    activity.after_batch(0, ["ann"])


def test_the_offset_log_gives_the_refill_topics_offsets(tmp_path: Path) -> None:
    _offsets(tmp_path, 3, "feed.refills.v1", {0: 4, 2: 1})
    assert refill_offsets(tmp_path / "3", "feed.refills.v1") == {0: 4, 2: 1}
    assert refill_offsets(tmp_path / "3", "other") is None and refill_offsets(tmp_path / "9", "x") is None


def test_the_metrics_show_readers_by_state_and_the_rows_skipping_saved() -> None:
    from prometheus_client import CollectorRegistry

    from spark_jobs.stream.metrics import StreamMetrics

    registry = CollectorRegistry()
    metrics = StreamMetrics(registry=registry)
    metrics.observe_activity({"active_readers": 3, "inactive_readers": 7, "rebuilding_readers": 1, "skipped_rows": 40})
    metrics.observe_activity({"active_readers": 4, "inactive_readers": 6, "rebuilding_readers": 0, "skipped_rows": 50})
    assert registry.get_sample_value("feed_stream_readers", {"state": "inactive"}) == 6
    assert registry.get_sample_value("feed_stream_inbox_rows_skipped_total") == 50
