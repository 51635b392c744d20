"""Inactive readers in the engine's model (docs/activity.md): an inactive reader's inbox is dropped
and gets no writes, its reads merge its push authors' timelines, and a returning reader's inbox is
rebuilt by refills from the top. None of it may show in a read: with activity flipping back and forth
between batches, under trimming, reposts, replies, blocks, mutes, pull authors and pull reposters,
shuffles, duplicates and batch sizes, every timeline reads as the always-active untrimmed view's
after every batch, and as the reference at the end. The view stays strict, so a delta that
contradicts the stored rows fails the test, not only a wrong read."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feed_service.core.events import (BlockChange, FollowChange, ListChange, ListMemberChange, MuteChange, RefillRequest,
                                      TweetDelete, TweetUpsert)
from feed_service.core.list_readers import list_of, list_reader
from feed_service.core.reference import reference_lists, reference_timelines
from feed_service.core.view import Materializer, TimelineView

from tests.support.list_runs import LIST_IDS, list_history, list_runs
from tests.support.repost_runs import USERS, Run, random_event, runs
from tests.support.repost_runs import Run as ListRun
from tests.support.sizes import examples

#: Fewer examples than the other property tests: each runs two engines and reads every timeline
#: after every batch.
SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _engine(*, inbox_cap: int, pull_threshold: int, encode_states: bool, trim_slack: int | None) -> Materializer:
    return Materializer(inbox_cap=inbox_cap, pull_threshold=pull_threshold, encode_states=encode_states,
                        pull_reposters=pull_threshold < 1000, trim_slack=trim_slack)


@SETTINGS
@given(run=runs(), flips=st.randoms(use_true_random=False), inbox_cap=st.integers(1, 3),
       trim_slack=st.sampled_from([None, 0, 2]), pull_threshold=st.sampled_from([1, 2, 1000]),
       encode_states=st.booleans())
def test_activity_flipping_between_batches_never_shows_in_a_read(
        run: Run, flips: random.Random, inbox_cap: int, trim_slack: int | None, pull_threshold: int,
        encode_states: bool) -> None:
    flipping = _engine(inbox_cap=inbox_cap, pull_threshold=pull_threshold, encode_states=encode_states,
                       trim_slack=trim_slack)
    always = _engine(inbox_cap=inbox_cap, pull_threshold=pull_threshold, encode_states=encode_states, trim_slack=None)
    flipping.set_active(USERS, False)  # nobody has read yet
    for batch in run.batches:
        readers = [u for u in USERS if flips.random() < 0.4]
        flipping.set_active(readers, flips.random() < 0.5)
        flipping.process_batch(batch)
        always.process_batch(batch)
        assert flipping.view.snapshot() == always.view.snapshot()
    if inbox_cap == 3:  # below the cap for these histories' few tweets: the definition itself
        assert flipping.view.snapshot() == reference_timelines(run.history, inbox_cap=3)


@SETTINGS
@given(run=runs(), inbox_cap=st.integers(1, 3), trim_slack=st.sampled_from([None, 0]))
def test_a_returning_reader_reads_exactly_before_and_after_its_rebuild(
        run: Run, inbox_cap: int, trim_slack: int | None) -> None:
    engine = _engine(inbox_cap=inbox_cap, pull_threshold=1000, encode_states=False, trim_slack=trim_slack)
    always = _engine(inbox_cap=inbox_cap, pull_threshold=1000, encode_states=False, trim_slack=None)
    half = len(run.batches) // 2
    engine.set_active(USERS, False)
    for batch in run.batches[:half]:
        engine.process_batch(batch)
        always.process_batch(batch)
    engine.set_active(USERS, True)
    assert engine.view.snapshot() == always.view.snapshot()  # asked, not yet rebuilt: merged
    for batch in run.batches[half:] or [[]]:
        engine.process_batch(batch)
        always.process_batch(batch)
        assert engine.view.snapshot() == always.view.snapshot()
        assert not engine.view.returning  # rebuilt at the end of the batch
    for uid in USERS:  # the rebuilt inboxes hold what the always-active ones hold, trim aside
        rebuilt, kept = engine.view.timelines.get(uid, {}), always.view.timelines.get(uid, {})
        newest = sorted(kept, reverse=True)[:inbox_cap]
        assert sorted(rebuilt, reverse=True)[:inbox_cap] == newest


def test_inactive_readers_get_no_inbox_writes_and_cost_no_rows() -> None:
    engine = Materializer(inbox_cap=5)
    follows = [FollowChange(f"r{i}", "a", 0, "follow") for i in range(10)]
    engine.process_batch(follows)
    engine.set_active([f"r{i}" for i in range(7)], False)  # 70 % never read
    engine.process_batch([TweetUpsert(f"t{i}", "a", 0, i, "x", 0) for i in range(4)])
    view = engine.view
    assert view.skipped_rows == 4 * 7
    assert sorted(uid for uid, rows in view.timelines.items() if rows) == ["r7", "r8", "r9"]
    assert [e.tweet_id for e in view.entries("r0")] == ["t3", "t2", "t1", "t0"]  # merged, exact
    engine.set_active(["r0"], True)
    engine.process_batch([TweetDelete("t1", "a", 1)])
    assert [e.tweet_id for e in view.entries("r0")] == ["t3", "t2", "t0"]
    assert sorted(view.timelines["r0"]) == sorted(view.timelines["r9"])  # rebuilt
    assert view.rebuilds == 1 and view.dropped_rows == 0  # nothing was stored when they went


def test_random_histories_flip_activity_for_real() -> None:
    """The property tests above are not vacuous: rows are skipped, inboxes dropped and rebuilt."""
    rnd = random.Random(5)
    skipped = dropped = rebuilds = 0
    for _ in range(40):
        engine = Materializer(inbox_cap=2, trim_slack=0)
        history = [random_event(rnd) for _ in range(60)]
        for i in range(0, len(history), 5):
            engine.set_active([u for u in USERS if rnd.random() < 0.4], rnd.random() < 0.5)
            engine.process_batch(history[i:i + 5])
        skipped += engine.view.skipped_rows
        dropped += engine.view.dropped_rows
        rebuilds += engine.view.rebuilds
    assert skipped > 20 and dropped > 20 and rebuilds > 20


# -- lists' readers: inactive as any reader (docs/lists.md#in-the-engine, docs/activity.md) --------


class RebuildLog(TimelineView):
    """A :class:`TimelineView` that keeps the rebuild requests it made."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rebuild_asked: list[RefillRequest] = []

    def rebuild_requests(self) -> list[RefillRequest]:
        out = super().rebuild_requests()
        self.rebuild_asked += out
        return out


#: Every reader of the list histories: the users and the lists' readers (of a list never created too).
LIST_HISTORY_READERS = USERS + [list_reader(lid) for lid in LIST_IDS]


@SETTINGS
@given(run=list_runs(), flips=st.randoms(use_true_random=False), inbox_cap=st.integers(1, 3),
       trim_slack=st.sampled_from([None, 0, 2]), pull_threshold=st.sampled_from([1, 2, 1000]),
       encode_states=st.booleans())
def test_lists_readers_going_and_coming_back_never_show_in_a_read(
        run: ListRun, flips: random.Random, inbox_cap: int, trim_slack: int | None, pull_threshold: int,
        encode_states: bool) -> None:
    # A list's reader goes and comes back as a user does: its inbox dropped, its reads merged from
    # its push authors (its members the owner does not hide, less the pulled ones), its inbox rebuilt,
    # under trimming, member and owner changes, the owner's hides and exclusive lists.
    flipping = _engine(inbox_cap=inbox_cap, pull_threshold=pull_threshold, encode_states=encode_states,
                       trim_slack=trim_slack)
    always = _engine(inbox_cap=inbox_cap, pull_threshold=pull_threshold, encode_states=encode_states, trim_slack=None)
    flipping.set_active(LIST_HISTORY_READERS, False)  # nobody has read yet
    for batch in run.batches:
        readers = [u for u in LIST_HISTORY_READERS if flips.random() < 0.4]
        flipping.set_active(readers, flips.random() < 0.5)
        flipping.process_batch(batch)
        always.process_batch(batch)
        assert flipping.view.list_snapshot() == always.view.list_snapshot()
        assert flipping.view.snapshot() == always.view.snapshot()
    if inbox_cap == 3:  # every author's few tweets retained: the definition itself, at the cap
        assert flipping.view.list_snapshot() == reference_lists(run.history, inbox_cap=3)
        assert flipping.view.snapshot() == reference_timelines(run.history, inbox_cap=3)


def test_a_dropped_lists_readers_push_authors_are_its_members_the_owner_does_not_hide() -> None:
    """The inbox of an inactive list is what its push authors write: the members not hidden from the
    owner (not the owner's muted ``cat``, nor ``dan`` who blocks the owner), less the pulled
    ``zed``; the owner's exclusive list sets ``bob`` aside from the owner's home, not from the list.
    Its reads merge exactly those, and its rebuild asks exactly those."""
    lr = list_reader("L")
    setup = [ListChange("L", "own", 1, "create", "n", "list", False), ListChange("M", "own", 1, "create", "m", "list", True),
             *(ListMemberChange("L", m, 1, "add") for m in ("bob", "cat", "dan", "own", "zed")),
             ListMemberChange("M", "bob", 1, "add"), FollowChange("own", "bob", 1, "follow"),
             MuteChange("own", "cat", 1, "mute"), BlockChange("dan", "own", 1, "block"),
             *(FollowChange(u, "zed", 1, "follow") for u in ("ann", "pat", "sue"))]
    tweets = [TweetUpsert(f"t{i}", a, 1, 10 + i, "x", 1) for i, a in enumerate(["bob", "cat", "dan", "own", "zed", "bob"])]
    engine = Materializer(inbox_cap=10, pull_threshold=4, view=RebuildLog(inbox_cap=10))
    always = Materializer(inbox_cap=10, pull_threshold=4)  # zed: three followers and the list, pulled
    for m in (engine, always):
        m.process_batch(setup)
    view = engine.view
    assert view.visible[lr] == {"bob", "own", "zed"} and view.pull_follows[lr] == {"zed"}
    assert view.excluded == {"own": {"bob"}} and view.inbox_authors(lr) == ["bob", "own"]
    engine.set_active([lr], False)
    for m in (engine, always):
        m.process_batch(tweets)
    assert lr not in view.timelines and view.skipped_rows == 3  # bob's two tweets and own's: not written
    assert [e.tweet_id for e in view.entries(lr)] == ["t5", "t4", "t3", "t0"] == [e.tweet_id for e in always.view.entries(lr)]
    engine.set_active([lr], True)
    engine.process_batch([])
    assert sorted((r.reader_id, r.author_id) for r in view.rebuild_asked) == [(lr, "bob"), (lr, "own")]  # type: ignore[attr-defined]
    assert view.timelines[lr] == always.view.timelines[lr] and not view.returning
    assert view.list_snapshot() == always.view.list_snapshot() == reference_lists(setup + tweets, inbox_cap=10)


def test_random_list_histories_drop_and_rebuild_lists_readers() -> None:
    """The list test above is not vacuous: lists' readers' rows are skipped, their inboxes dropped
    and rebuilt."""
    rnd = random.Random(9)
    dropped = rebuilt = 0
    for _ in range(40):
        engine = Materializer(inbox_cap=2, trim_slack=0, view=RebuildLog(inbox_cap=2, trim_slack=0))
        history = list_history(rnd, 80)
        lists = [list_reader(lid) for lid in LIST_IDS]
        for i in range(0, len(history), 5):
            before = {uid: len(engine.view.timelines.get(uid, ())) for uid in lists}
            going = [uid for uid in lists if rnd.random() < 0.4]
            back = rnd.random() < 0.5
            engine.set_active(going, back)
            if not back:
                dropped += sum(before[uid] for uid in going)
            engine.process_batch(history[i:i + 5])
        rebuilt += sum(1 for r in engine.view.rebuild_asked if list_of(r.reader_id) is not None)  # type: ignore[attr-defined]
    assert dropped > 20 and rebuilt > 20
