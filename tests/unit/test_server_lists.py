"""The read side of lists over loopback gRPC with an in-memory store (docs/api.md#lists): a list's
timeline is the home read of its reader behind the owner check, its rows merged at read decided by
the list's rule; a home reader's excluded sources; reserved ids refused. The same on Cassandra:
tests/integration/test_list_reads.py."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time

import grpc
import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc as pb_grpc
from feed_service.client.watch import ReconnectingWatch
from feed_service.core.list_readers import list_reader
from feed_service.core.rows import Entry
from feed_service.core.view_changes import AuthorChange, ExcludedChange, ListChange, TimelineChange, VisibleChange
from feed_service.kafka.view_change_consumer import Consumed
from feed_service.server.testing import ServerThread
from feed_service.server.watch_hub import WatchHub
from feed_service.settings import Settings
from feed_service.store.memory import MemoryStore
from tests.support.loopback import loopback_config

Code = grpc.StatusCode
L = list_reader("L")


def tweet(tid: str, author: str, at: int, parent: str | None = None) -> Entry:
    return Entry(tid, author, at, 1, f"{author}: {tid}", 1, f"{parent}-t" if parent else None, parent)


def repost(e: Entry, by: str, at: int) -> Entry:
    return e._replace(reposted_by=by, reposted_at=at, reposter_profile_version=1)


def list_store(policy: str = "list") -> MemoryStore:
    """own's list L (members bob, cat: the users its reader sees); pull author star's tweets replying
    to nobody, to a member, to a user only own follows and to own; own follows dan."""
    store = MemoryStore()
    store.add_list("own", "L", L, name="friends", replies_policy=policy)
    store.add_list("own", "A", list_reader("A"), name="all")
    store.add_list("bob", "B", list_reader("B"))
    store.visible[L] = {"bob", "cat", "star"}
    store.visible["own"] = {"dan"}
    store.add_entry(L, tweet("b1", "bob", 10))
    store.add_pull_follow(L, "star")
    for e in (tweet("s1", "star", 20), tweet("s2", "star", 30, "cat"), tweet("s3", "star", 40, "dan"),
              tweet("s4", "star", 50, "own")):
        store.add_author_entry(e)
    return store


def list_pages(server: ServerThread, list_id: str = "L", user: str = "own", size: int = 1) -> list[str]:
    stub, ids, token = server.stub(), [], ""
    while True:
        page = stub.GetListTimeline(pb.GetListTimelineRequest(user_id=user, list_id=list_id, page_size=size,
                                                              page_token=token), metadata=server.auth(user), timeout=5)
        ids += [e.tweet_id for e in page.entries]
        token = page.next_page_token
        if not token:
            return ids


def failure(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()


@pytest.mark.parametrize("policy, shown", [("list", ["s4", "s2", "s1", "b1"]), ("followed", ["s4", "s3", "s1", "b1"]),
                                           ("none", ["s4", "s1", "b1"])])
@pytest.mark.parametrize("size", [1, 2, 20])
def test_a_pull_authors_replies_in_a_list_are_decided_by_its_policy_page_by_page(policy: str, shown: list[str],
                                                                                 size: int) -> None:
    # "list": a reply to a member (the list's reader sees cat); "followed": to a user its owner sees
    # (dan, in own's reader_visible); a reply to the owner always
    with ServerThread(loopback_config(), store=list_store(policy)) as server:
        assert list_pages(server, size=size) == shown


def test_only_the_owner_reads_a_list_and_a_list_that_does_not_exist_is_not_found() -> None:
    store = list_store()
    with ServerThread(loopback_config(), store=store) as server:
        stub = server.stub()

        def read(user: str, list_id: str, token_of: str | None = None, role: str = "user"):  # type: ignore[no-untyped-def]
            return lambda: stub.GetListTimeline(pb.GetListTimelineRequest(user_id=user, list_id=list_id),
                                                metadata=server.auth(token_of or user, role), timeout=5)

        assert failure(read("bob", "L")) == Code.PERMISSION_DENIED  # bob's own token, own's list
        assert failure(read("own", "L", token_of="bob")) == Code.PERMISSION_DENIED  # bob's token names own
        assert failure(read("own", "nope")) == Code.NOT_FOUND
        assert failure(read("own", "")) == Code.INVALID_ARGUMENT
        assert [e.tweet_id for e in read("own", "L", token_of="svc", role="service")().entries][-1] == "b1"
        del store.list_statics[L]  # the list deleted: its statics gone, its rows not yet
        assert failure(read("own", "L")) == Code.NOT_FOUND
        store.list_statics[L] = ("cat", "list")  # given to another owner
        assert failure(read("own", "L")) == Code.PERMISSION_DENIED
        # cat's now: a reply to cat is a reply to the owner, one to own a reply to a non-member
        assert [e.tweet_id for e in read("cat", "L")().entries] == ["s2", "s1", "b1"]


def test_a_page_token_of_one_list_or_of_a_home_is_no_token_of_another() -> None:
    store = list_store()
    store.add_entry("own", tweet("h1", "dan", 5))
    store.add_entry("own", tweet("h2", "dan", 6))
    with ServerThread(loopback_config(), store=store) as server:
        stub, auth = server.stub(), server.auth("own")
        home = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="own", page_size=1), metadata=auth, timeout=5)
        assert home.next_page_token
        assert failure(lambda: stub.GetListTimeline(pb.GetListTimelineRequest(
            user_id="own", list_id="L", page_token=home.next_page_token), metadata=auth, timeout=5)) == Code.INVALID_ARGUMENT


def test_home_reads_refuse_a_reserved_id() -> None:
    with ServerThread(loopback_config(), store=list_store()) as server:
        stub, auth = server.stub(), server.auth("svc", "service")
        assert failure(lambda: stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=L), metadata=auth,
                                                    timeout=5)) == Code.INVALID_ARGUMENT
        watch = stub.WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=L), metadata=auth, timeout=5)
        assert failure(lambda: next(watch)) == Code.INVALID_ARGUMENT
        assert failure(lambda: stub.ListLists(pb.ListListsRequest(owner_id=L), metadata=auth,
                                              timeout=5)) == Code.INVALID_ARGUMENT


def test_list_lists_gives_the_owners_live_lists_by_id_to_the_owner_only() -> None:
    with ServerThread(loopback_config(), store=list_store()) as server:
        stub = server.stub()
        got = stub.ListLists(pb.ListListsRequest(owner_id="own"), metadata=server.auth("own"), timeout=5)
        assert [(i.list_id, i.name, i.replies_policy, i.exclusive) for i in got.lists] == [
            ("A", "all", "list", False), ("L", "friends", "list", False)]
        assert not stub.ListLists(pb.ListListsRequest(owner_id="zed"), metadata=server.auth("zed"), timeout=5).lists
        assert failure(lambda: stub.ListLists(pb.ListListsRequest(owner_id="own"), metadata=server.auth("bob"),
                                              timeout=5)) == Code.PERMISSION_DENIED


def test_a_pull_reposters_rows_in_a_list_are_decided_with_the_owners_hides() -> None:
    """pat, a pull reposter the list's reader merges in, reposts a non-member's tweet (shown: no
    member brings it), a tweet of a user hidden from the owner (not shown; hidden from the list's
    reader itself counts for nothing: a list's reader has no hides of its own) and a member's tweet
    (direct in the list: not shown as a repost)."""
    store = list_store()
    store.reposters_pull[L] = {"pat"}
    store.visible[L].add("pat")
    store.hidden["own"] = {"hid"}
    store.hidden[L] = {"zed"}
    for e, at in ((tweet("z1", "zed", 1), 60), (tweet("x1", "hid", 2), 70), (tweet("b1", "bob", 10), 80)):
        store.user_reposts.setdefault("pat", {})[(at, e.tweet_id)] = repost(e, "pat", at)
    with ServerThread(loopback_config(), store=store) as server:
        for size in (1, 3, 20):
            assert list_pages(server, size=size) == ["z1", "s4", "s2", "s1", "b1"]


def test_a_home_readers_excluded_sources_are_set_aside_in_its_reads() -> None:
    """ann sees ex, a member of one of her exclusive lists: pat's repost of ex's tweet shows (ex is
    no source of ann's home), pat's repost of vis's tweet does not (direct); with the inbox dropped,
    ex is no push author."""
    store = MemoryStore()
    store.visible["ann"] = {"ex", "vis", "pat"}
    store.excluded["ann"] = {"ex"}
    store.reposters_pull["ann"] = {"pat"}
    e1, v1 = tweet("e1", "ex", 1), tweet("v1", "vis", 2)
    store.add_author_entry(e1)
    store.add_author_entry(v1)
    store.add_entry("ann", v1)
    for e, at in ((e1, 30), (v1, 40)):
        store.user_reposts.setdefault("pat", {})[(at, e.tweet_id)] = repost(e, "pat", at)
    with ServerThread(loopback_config(), store=store) as server:
        stub, auth = server.stub(), server.auth("ann")

        def home() -> list[tuple[str, str]]:
            page = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=auth, timeout=5)
            return [(e.tweet_id, e.reposted_by) for e in page.entries]

        assert home() == [("e1", "pat"), ("v1", "")]
        store.excluded["ann"] = set()
        assert home() == [("v1", "")]  # e1 direct again: its author's own row is ann's inbox's to hold
        store.excluded["ann"] = {"ex"}
        store.dropped.add("ann")
        store.reposters_pull["ann"] = set()
        assert home() == [("v1", "")]  # the dropped inbox: vis's rows, not ex's


def test_a_list_read_and_watch_record_read_activity_for_the_lists_reader() -> None:
    produced: list[str] = []
    config = loopback_config(settings=Settings())
    with ServerThread(config, store=list_store(), report_reads=lambda r, v: produced.append(json.loads(v)["reader_id"])
                      ) as server:
        stub = server.stub()
        assert failure(lambda: stub.GetListTimeline(pb.GetListTimelineRequest(user_id="bob", list_id="L"),
                                                    metadata=server.auth("bob"), timeout=5)) == Code.PERMISSION_DENIED
        stub.GetListTimeline(pb.GetListTimelineRequest(user_id="own", list_id="L"), metadata=server.auth("own"),
                             timeout=5)
        assert produced == [L]  # the refused read reports nothing


def test_a_list_watch_sends_new_entries_and_ends_when_the_list_is_deleted() -> None:
    store = list_store()
    with ServerThread(loopback_config(), store=store) as server:
        stub = server.stub()
        denied = stub.WatchListTimeline(pb.WatchListTimelineRequest(user_id="bob", list_id="L"),
                                        metadata=server.auth("bob"), timeout=5)
        assert failure(lambda: next(denied)) == Code.PERMISSION_DENIED
        watch = stub.WatchListTimeline(pb.WatchListTimelineRequest(user_id="own", list_id="L"),
                                       metadata=server.auth("own"), timeout=10)
        dict(watch.initial_metadata())  # started: subscribed and at the head
        store.add_entry(L, tweet("b2", "bob", 100))
        store.add_author_entry(tweet("s5", "star", 101, "dan"))  # a reply the "list" policy leaves out
        store.add_author_entry(tweet("s6", "star", 102, "cat"))
        got: list[str] = []
        while len(got) < 2:
            got += [e.tweet_id for e in next(watch).entries]
        assert got == ["b2", "s6"]
        del store.list_statics[L]
        deadline = time.monotonic() + 5
        with pytest.raises(grpc.RpcError) as ended:
            while time.monotonic() < deadline:
                next(watch)
        assert ended.value.code() == Code.NOT_FOUND


def test_the_clients_reconnecting_watch_watches_a_list() -> None:
    store = list_store()
    with ServerThread(loopback_config(), store=store) as server:
        async def body() -> list[str]:
            channel = server.channel(aio=True)
            try:
                watch = ReconnectingWatch(pb_grpc.TimelineServiceStub(channel), "own", list_id="L",
                                          metadata=server.auth("own"), timeout=10)
                messages = watch.messages()
                first = asyncio.ensure_future(messages.__anext__())
                await asyncio.wait_for(watch.started.wait(), 10)
                store.add_entry(L, tweet("b3", "bob", 200))
                message = await asyncio.wait_for(first, 10)
                watch.close()
                return [e.tweet_id for e in message.entries]
            finally:
                await channel.close()

        assert asyncio.run(body()) == ["b3"]


class StubFeed:
    """Stands in for the change topic: live, at a fixed position (no read cache)."""

    live = True
    position: dict[int, int] = {0: 0}


class PushedWatch:
    """A pushed watch (``rpc``: WatchHomeTimeline or WatchListTimeline) on a server whose change feed
    is a :class:`WatchHub` the test routes changes to; messages (or the error that ended it) in ``got``."""

    def __init__(self, server: ServerThread, rpc: str, request: object, user: str) -> None:
        self.server, self.hub, self.got = server, WatchHub(), queue.Queue()
        server.server.servicer.attach_changes(StubFeed(), None, self.hub)
        self.call = getattr(server.stub(), rpc)(request, metadata=server.auth(user), timeout=30)
        threading.Thread(target=self._read, daemon=True).start()
        dict(self.call.initial_metadata())  # subscribed, at the head
        deadline = time.monotonic() + 10
        while not self.hub._by_user or any(sub.early_follows is not None
                                           for subs in self.hub._by_user.values() for sub in subs):
            assert time.monotonic() < deadline, "the watch did not start"  # its plan read, its sources followed
            time.sleep(0.01)

    def _read(self) -> None:
        try:
            for message in self.call:
                self.got.put(message)
        except grpc.RpcError as exc:
            self.got.put(exc)

    def publish(self, *changes: object) -> None:
        self.server.loop.call_soon_threadsafe(self.hub.route, [Consumed(0, i, c) for i, c in enumerate(changes)])

    def next(self):  # type: ignore[no-untyped-def]
        return self.got.get(timeout=5)


def test_a_pushed_list_watch_decides_pull_authors_rows_by_the_lists_rule_and_reads_it_again() -> None:
    """A "followed" list: star's reply to dan (whom own follows) is sent, its reply to cat (a member
    own does not follow) is not; the policy turned to "list" (the statics, then the list's change),
    star's replies are decided again; the list deleted (its change), the watch ends NOT_FOUND."""
    store = list_store("followed")
    with ServerThread(loopback_config(), store=store) as server:
        watch = PushedWatch(server, "WatchListTimeline", pb.WatchListTimelineRequest(user_id="own", list_id="L"), "own")
        s5, s6 = tweet("s5", "star", 101, "dan"), tweet("s6", "star", 102, "cat")
        for e in (s5, s6):
            store.add_author_entry(e)
        watch.publish(AuthorChange("insert", s5, 10, None), AuthorChange("insert", s6, 11, None))
        assert [e.tweet_id for e in watch.next().entries] == ["s5"]
        store.list_statics[L] = ("own", "list")
        b2 = tweet("b2", "bob", 103)
        store.add_entry(L, b2)
        watch.publish(ListChange("upsert", "L", "own", "list", 12, None), TimelineChange("insert", b2, (L,), 12, None))
        message = watch.next()
        # replies to a member, now shown: s6 above the watch's position (new), s2 below it
        assert [e.tweet_id for e in message.entries] == ["s6", "b2"]
        assert [e.tweet_id for e in message.changed] == ["s2"]
        assert sorted(message.removed_tweet_ids) == ["s3", "s5"]  # replies to dan, no member
        del store.list_statics[L]
        watch.publish(ListChange("delete", "L", "own", None, 13, None))
        ended = watch.next()
        assert isinstance(ended, grpc.RpcError) and ended.code() == Code.NOT_FOUND


def test_a_followed_lists_watch_follows_what_its_owner_sees() -> None:
    """A "followed" list: its owner stops following dan, and star's reply to dan leaves the list's
    watch; it follows cat, and star's reply to cat (a member own did not follow) comes."""
    store = list_store("followed")
    with ServerThread(loopback_config(), store=store) as server:
        watch = PushedWatch(server, "WatchListTimeline", pb.WatchListTimelineRequest(user_id="own", list_id="L"), "own")
        store.visible["own"] = {"cat"}
        watch.publish(VisibleChange("delete", "own", "dan", 10, None), VisibleChange("insert", "own", "cat", 11, None))
        shown: set[str] = set()
        removed: set[str] = set()
        while "s2" not in shown or "s3" not in removed:
            message = watch.next()
            shown |= {e.tweet_id for e in (*message.entries, *message.changed)}
            removed |= set(message.removed_tweet_ids)
        assert shown == {"s2"} and removed == {"s3"}


def test_a_pushed_watch_of_a_dropped_inbox_takes_no_excluded_push_author_in() -> None:
    store = MemoryStore()
    store.dropped.add("ann")
    store.visible["ann"] = {"bob"}
    store.excluded["ann"] = {"ex"}
    for e in (tweet("b1", "bob", 1), tweet("e1", "ex", 2), tweet("n1", "new", 3)):
        store.add_author_entry(e)
    with ServerThread(loopback_config(), store=store) as server:
        watch = PushedWatch(server, "WatchHomeTimeline", pb.WatchHomeTimelineRequest(user_id="ann"), "ann")
        store.visible["ann"] |= {"ex", "new"}
        watch.publish(VisibleChange("insert", "ann", "ex", 10, None), VisibleChange("insert", "ann", "new", 11, None))
        assert [e.tweet_id for e in watch.next().entries] == ["n1"]  # new's rows, not ex's
        store.excluded["ann"] = set()  # the exclusive list no longer holds ex: its rows join
        watch.publish(ExcludedChange("delete", "ann", "ex", 12, None))
        assert [e.tweet_id for e in watch.next().changed] == ["e1"]  # below the position: changed
        store.excluded["ann"] = {"ex"}  # and leave again
        watch.publish(ExcludedChange("insert", "ann", "ex", 13, None))
        assert list(watch.next().removed_tweet_ids) == ["e1"]
