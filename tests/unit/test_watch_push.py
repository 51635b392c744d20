"""Pushed WatchHomeTimeline on an in-memory store, with changes handed to the server as its change feed
would (the real topic: tests/integration/test_push_watch.py).

What a watch sends for each kind of change (new entry, edit, delete, an older entry coming in, a pull
author's tweet, a pull follow and unfollow), that replays are dropped by write timestamp, that a
resumed watch sends what it read from the store once, that a gap makes it catch up, and that a pushed
watch ends at its deadline (DEADLINE_EXCEEDED) and with OK when the server shuts down.
"""

from __future__ import annotations

import queue
import threading
import time

import grpc

from feed_service.api import timeline_pb2 as pb
from feed_service.core.rows import Entry, ProfileRow
from feed_service.core.view_changes import AuthorChange, PullFollowChange, TimelineChange
from feed_service.kafka.view_change_consumer import Consumed
from feed_service.server.config import ServerConfig
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.server.watch_hub import Subscription, WatchHub
from feed_service.store.memory import MemoryStore


class StubFeed:
    """Stands in for the change topic: live, at a fixed position (no read cache in these tests)."""

    live = True
    position: dict[int, int] = {0: 0}


def entry(n: int, author: str = "bob", version: int = 1) -> Entry:
    return Entry(f"t{n:03d}", author, 1_000 + n, version, f"text {n} v{version}", 1)


def tl(op: str, e: Entry, ts: int, *timelines: str) -> TimelineChange:
    return TimelineChange(op, e, timelines or ("ann",), ts, None)


class PushedServer:
    def __init__(self, store: MemoryStore) -> None:
        config = ServerConfig(auth_secret=TEST_SECRET, metrics_port=None, shutdown_grace_s=1.0, change_feed=False)
        self.thread = ServerThread(config, store=store).start()
        self.hub = WatchHub()
        self.thread.server.servicer.attach_changes(StubFeed(), None, self.hub)

    def publish(self, *changes: object) -> None:
        batch = [Consumed(0, i, c) for i, c in enumerate(changes)]
        self.thread.loop.call_soon_threadsafe(self.hub.route, batch)

    def gap(self) -> None:
        self.thread.loop.call_soon_threadsafe(self.hub.gap)

    def watch(self, user: str, token: str = "") -> "Watch":
        return Watch(self.thread, user, token, self.hub)

    def stop(self) -> None:
        self.thread.stop()


class Watch:
    def __init__(self, server: ServerThread, user: str, token: str, hub: WatchHub) -> None:
        self.messages: queue.Queue = queue.Queue()
        before = {s for subs in hub._by_user.values() for s in subs}  # an ending watch may linger
        self.call = server.stub().WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user, resume_token=token),
                                                    metadata=server.auth(user), timeout=30)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 10
        while not any(s not in before for subs in hub._by_user.values() for s in subs) or not all(
                s.early_follows is None for subs in hub._by_user.values() for s in subs):
            assert time.monotonic() < deadline, "the watch did not subscribe"
            time.sleep(0.01)

    def _read(self) -> None:
        try:
            for m in self.call:
                self.messages.put(m)
        except grpc.RpcError:
            pass

    def next(self, timeout: float = 5.0) -> pb.WatchHomeTimelineResponse:
        return self.messages.get(timeout=timeout)

    def quiet(self, seconds: float = 0.3) -> bool:
        try:
            self.messages.get(timeout=seconds)
            return False
        except queue.Empty:
            return True


def ids(entries) -> list[str]:
    return [e.tweet_id for e in entries]


def store_with_head() -> MemoryStore:
    store = MemoryStore()
    store.add_profile(ProfileRow("bob", 1, "Bob", None, None))
    for n in (1, 2, 3):
        store.add_entry("ann", entry(n))
    return store


def test_each_kind_of_change_is_pushed_in_its_part_of_the_message() -> None:
    store = store_with_head()
    server = PushedServer(store)
    try:
        watch = server.watch("ann")
        server.publish(tl("insert", entry(4), 10))
        m = watch.next()
        assert ids(m.entries) == ["t004"] and m.entries[0].author_display_name == "Bob" and m.resume_token
        server.publish(tl("update", entry(2, version=2), 11))
        m = watch.next()
        assert ids(m.changed) == ["t002"] and m.changed[0].version == 2 and not m.entries
        store.timelines["ann"].pop(entry(3).cursor)  # the stream deletes the row, then publishes
        server.publish(tl("delete", entry(3), 12))
        assert list(watch.next().removed_tweet_ids) == ["t003"]
        server.publish(tl("insert", entry(0, author="cat"), 13))  # older than the position: a follow's backfill
        assert ids(watch.next().changed) == ["t000"]
        server.publish(tl("insert", entry(9), 14, "someone-else"))  # another timeline: nothing
        server.publish(tl("insert", entry(4), 10))  # a replay (same write timestamp): nothing
        assert watch.quiet()
    finally:
        server.stop()


def test_pull_author_changes_reach_the_watches_of_its_followers_only() -> None:
    store = store_with_head()
    store.add_pull_follow("ann", "star")
    for n in (5, 6):
        store.add_author_entry(entry(n, author="star"))
    server = PushedServer(store)
    try:
        watch = server.watch("ann")
        server.publish(AuthorChange("insert", entry(7, author="star"), 20, None))
        assert ids(watch.next().entries) == ["t007"]
        server.publish(AuthorChange("insert", entry(8, author="moon"), 21, None))
        assert watch.quiet()
        store.add_author_entry(entry(7, author="star"))
        server.publish(PullFollowChange("delete", "star", ("ann",), 22, None))  # unfollow: its tweets leave
        assert sorted(watch.next().removed_tweet_ids) == ["t005", "t006", "t007"]
        server.publish(AuthorChange("insert", entry(9, author="star"), 23, None))  # no longer followed
        assert watch.quiet()
        store.add_author_entry(entry(9, author="moon"))
        server.publish(PullFollowChange("insert", "moon", ("ann",), 24, None))  # follow: its tweets come in
        m = watch.next()
        assert ids(m.entries) == ["t009"]  # newer than the position
    finally:
        server.stop()


def test_a_resumed_watch_sends_the_store_catch_up_once_and_a_gap_catches_up_again() -> None:
    store = store_with_head()
    server = PushedServer(store)
    try:
        first = server.watch("ann")
        server.publish(tl("insert", entry(4), 10))
        token = first.next().resume_token
        first.call.cancel()
        for n in (5, 6):
            store.add_entry("ann", entry(n))
        resumed = server.watch("ann", token)
        assert ids(resumed.next().entries) == ["t005", "t006"]  # from the store
        server.publish(tl("insert", entry(5), 30), tl("insert", entry(6), 31))  # the same, as changes: dropped
        assert resumed.quiet()
        store.add_entry("ann", entry(7))  # written while the changes were lost
        server.gap()
        assert ids(resumed.next().entries) == ["t007"]
    finally:
        server.stop()


def test_pull_follow_changes_before_the_first_read_apply_on_top_of_it() -> None:
    hub = WatchHub()
    sub = hub.subscribe("ann")
    hub.route([Consumed(0, 0, PullFollowChange("delete", "star", ("ann",), 5, None)),
               Consumed(0, 1, PullFollowChange("insert", "moon", ("ann",), 6, None))])
    hub.start(sub, ["star"])  # a read that did not see those changes yet
    assert sub.authors == {"moon"}
    hub.route([Consumed(0, 2, AuthorChange("insert", entry(1, author="star"), 7, None))])
    assert [type(i).__name__ for i in sub.drain()] == ["PullFollowChange", "PullFollowChange"]
    hub.unsubscribe(sub)
    assert len(hub) == 0 and not isinstance(sub, type(None)) and isinstance(sub, Subscription)


def test_a_pull_authors_tweet_arriving_before_the_watch_knows_its_authors_is_not_lost() -> None:
    hub = WatchHub()
    sub = hub.subscribe("ann")
    early = AuthorChange("insert", entry(1, author="star"), 5, None)
    other = AuthorChange("insert", entry(2, author="moon"), 6, None)
    hub.route([Consumed(0, 0, early), Consumed(0, 1, other)])  # while the watch reads its head
    assert sub.drain() == []
    hub.start(sub, ["star"])
    assert sub.drain() == [early]  # moon is not followed: dropped
    hub.route([Consumed(0, 2, other)])
    assert sub.drain() == []


def test_a_pushed_watch_ends_at_its_deadline_and_with_ok_at_shutdown() -> None:
    server = PushedServer(store_with_head())
    try:
        short = server.thread.stub().WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id="ann"),
                                                       metadata=server.thread.auth("ann"), timeout=1.0)
        deadline = time.monotonic() + 10
        while len(server.hub) == 0 or len(server.hub._starting):
            assert time.monotonic() < deadline, "the watch did not subscribe"
            time.sleep(0.01)
        server.publish(tl("insert", entry(4), 10))
        assert ids(next(short).entries) == ["t004"]
        started = time.monotonic()
        try:
            next(short)
            raise AssertionError("the stream outlived its deadline")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() - started < 5
        long = server.watch("ann")
        server.publish(tl("insert", entry(5), 11))
        assert ids(long.next().entries) == ["t005"]
        server.thread.run(server.thread.server.stop(2.0))
        assert long.call.code() == grpc.StatusCode.OK
    finally:
        server.stop()
