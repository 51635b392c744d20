"""The read side of the hybrid fan-out over loopback gRPC with an in-memory store: home pages merge
the inbox with the pull authors a user follows, GetUserTimeline pages an author's own tweets, and a
watch delivers pull authors' new tweets too. The same against Cassandra and the stream:
tests/integration/test_hybrid_fanout.py."""

from __future__ import annotations

import random
import threading

import grpc
import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.core.rows import Entry, ProfileRow
from feed_service.server.testing import ServerThread
from feed_service.store.memory import MemoryStore
from tests.support.loopback import loopback_config

Code = grpc.StatusCode


def tweet(author: str, n: int, created_at: int) -> Entry:
    return Entry(f"{author}-{n:04d}", author, created_at, 1, f"{author} says {n}", 1)


def populated(seed: int = 7) -> MemoryStore:
    rnd = random.Random(seed)
    store = MemoryStore()  # GetUserTimeline with a user token reads blocks
    for n in range(60):  # push authors, in ann's inbox
        store.add_entry("ann", tweet(rnd.choice(["bob", "cat"]), n, rnd.randrange(10_000)))
    for author in ("star", "idol"):  # pull authors: only in their author timelines
        for n in range(40):
            store.add_author_entry(tweet(author, n, rnd.randrange(10_000)))
        store.add_pull_follow("ann", author)
    store.add_profile(ProfileRow("star", 1, "Star", None, None))
    return store


def expected(store: MemoryStore, user: str) -> list[str]:
    entries = list(store.timelines.get(user, {}).values())
    for author in store.follows_pull.get(user, ()):
        entries += store.author_timelines[author].values()
    entries.sort(key=lambda e: (e.created_at, e.tweet_id, e.author_id), reverse=True)
    return [e.tweet_id for e in entries]


def all_pages(stub, server, user: str, size: int, rpc: str = "GetHomeTimeline", on_page=None) -> list[str]:
    request_type = pb.GetHomeTimelineRequest if rpc == "GetHomeTimeline" else pb.GetUserTimelineRequest
    ids, token = [], ""
    while True:
        page = getattr(stub, rpc)(request_type(user_id=user, page_size=size, page_token=token),
                                  metadata=server.auth("ann"), timeout=5)
        ids += [e.tweet_id for e in page.entries]
        if on_page:
            on_page()
        token = page.next_page_token
        if not token:
            return ids


@pytest.mark.parametrize("ttl", [0.0, 30.0])
@pytest.mark.parametrize("size", [1, 7, 50, 200])
def test_home_pages_merge_the_inbox_and_the_pull_authors(size: int, ttl: float) -> None:
    store = populated()
    with ServerThread(loopback_config(pull_cache_ttl_s=ttl), store=store) as server:
        assert all_pages(server.stub(), server, "ann", size) == expected(store, "ann")


def test_merge_under_inserts_between_pages_has_no_duplicates_and_no_gaps() -> None:
    store = populated()
    before = expected(store, "ann")
    counter = iter(range(10**6))

    def insert_newer() -> None:  # new tweets at the head, from both kinds of source
        n = next(counter)
        store.add_entry("ann", tweet("bob", 5000 + n, 20_000 + n))
        store.add_author_entry(tweet("star", 5000 + n, 20_000 + n))

    with ServerThread(loopback_config(), store=store) as server:
        seen = all_pages(server.stub(), server, "ann", 9, on_page=insert_newer)
    assert len(seen) == len(set(seen))
    assert seen == before  # the pages continue below the first page's cursor: every entry once, in order


def test_paging_stops_at_the_inbox_cap_across_sources() -> None:
    from feed_service.settings import Settings

    store = populated()
    with ServerThread(loopback_config(settings=Settings(inbox_cap=50)), store=store) as server:
        assert all_pages(server.stub(), server, "ann", 7) == expected(store, "ann")[:50]


def test_user_timeline_pages_an_authors_tweets_with_any_token() -> None:
    store = populated()
    with ServerThread(loopback_config(), store=store) as server:
        ids = all_pages(server.stub(), server, "star", 6, rpc="GetUserTimeline")  # read with ann's token
        first = server.stub().GetUserTimeline(pb.GetUserTimelineRequest(user_id="star"), metadata=server.auth("zed"),
                                              timeout=5)
    authored = sorted(store.author_timelines["star"].values(), key=lambda e: (e.created_at, e.tweet_id), reverse=True)
    assert ids == [e.tweet_id for e in authored]
    assert first.entries[0].author_display_name == "Star"


def test_user_timeline_rejects_another_authors_page_token() -> None:
    store = populated()
    with ServerThread(loopback_config(), store=store) as server:
        stub = server.stub()
        page = stub.GetUserTimeline(pb.GetUserTimelineRequest(user_id="star", page_size=3), metadata=server.auth("ann"))
        with pytest.raises(grpc.RpcError) as info:
            stub.GetUserTimeline(pb.GetUserTimelineRequest(user_id="idol", page_token=page.next_page_token),
                                 metadata=server.auth("ann"))
        assert info.value.code() == Code.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as info:  # a home-timeline token is not a user-timeline token
            home = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann", page_size=3), metadata=server.auth("ann"))
            stub.GetUserTimeline(pb.GetUserTimelineRequest(user_id="ann", page_token=home.next_page_token),
                                 metadata=server.auth("ann"))
        assert info.value.code() == Code.INVALID_ARGUMENT


def test_a_pull_author_hidden_from_the_user_is_not_merged_in() -> None:
    """The join removes a pull author's ``pull_follows`` row of a user it blocks, or who blocks or
    mutes it (docs/api.md#blocks-and-mutes), and the read merges exactly the authors listed there:
    nothing else on the read path is needed to hide them from the home timeline."""
    store = populated()
    store.follows_pull["ann"].discard("star")  # ann still follows star, but has muted it
    with ServerThread(loopback_config(), store=store) as server:
        ids = all_pages(server.stub(), server, "ann", 25)
    assert ids == expected(store, "ann") and not any(i.startswith("star-") for i in ids)
    assert any(i.startswith("idol-") for i in ids)


def test_watch_delivers_pull_authors_new_tweets() -> None:
    store = populated()
    with ServerThread(loopback_config(pull_cache_ttl_s=0.2), store=store) as server:
        polled = threading.Event()  # the watch took its head and polls: what is added now is new
        newer = store.newer

        async def observed_newer(*args, **kwargs):
            polled.set()
            return await newer(*args, **kwargs)

        store.newer = observed_newer
        stream = server.stub().WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id="ann"),
                                                 metadata=server.auth("ann"), timeout=20)
        assert polled.wait(15), "the watch never polled"
        # star's tweet is the newer: a poll may see it only once its cached head expires, after bob's
        # (a polling watch sends what is newer than its position; docs/api.md#watch)
        store.add_author_entry(tweet("star", 9000, 50_001))
        store.add_entry("ann", tweet("bob", 9001, 50_000))
        got: list[str] = []
        while len(got) < 2:
            got += [e.tweet_id for e in next(stream).entries]
        stream.cancel()
    assert got == ["bob-9001", "star-9000"]


def test_repost_and_reply_entries_carry_their_fields_and_the_reposters_name() -> None:
    """A repost entry sits at its repost time and names its reposter with the display name of the
    repost's profile version; a reply names its parent. The second read is served from cached
    profiles and shows the same."""
    store = MemoryStore()
    store.add_profile(ProfileRow("bob", 1, "Bob", None, None))
    store.add_profile(ProfileRow("cat", 4, "Cat at 4", None, None))
    store.add_profile(ProfileRow("cat", 5, "Cat at 5", None, None))
    store.add_entry("ann", Entry("t1", "bob", 100, 1, "old, reposted late", 1, reposted_by="cat", reposted_at=900,
                                 reposter_profile_version=4))
    store.add_entry("ann", Entry("t2", "bob", 500, 1, "@dan yes", 1, "t0", "dan"))
    store.add_entry("ann", Entry("t3", "bob", 700, 1, "plain", 1))
    with ServerThread(loopback_config(), store=store) as server:
        pages = [server.stub().GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="ann"), metadata=server.auth("ann"),
                                               timeout=5).entries for _ in range(2)]
    assert pages[0] == pages[1]
    repost, plain, reply = pages[0]
    assert [e.tweet_id for e in pages[0]] == ["t1", "t3", "t2"]  # the repost at its repost time
    assert (repost.reposted_by, repost.reposted_by_display_name, repost.reposted_at_ms, repost.created_at_ms) == (
        "cat", "Cat at 4", 900, 100)
    assert repost.author_display_name == "Bob" and not repost.in_reply_to_tweet_id
    assert (reply.in_reply_to_tweet_id, reply.in_reply_to_author_id, reply.reposted_by) == ("t0", "dan", "")
    assert not plain.reposted_by and not plain.in_reply_to_tweet_id and not plain.reposted_at_ms
