"""The read side of lists on the real stack (docs/api.md#lists): a list written straight to Cassandra
(its reader's inbox rows, statics, visible set and pull author through the project's CassandraWriter,
its ``lists`` row by CQL; no stream) read page by page through the real gRPC server, its owner check,
ListLists, and a WatchListTimeline receiving a change published on the view's change topic.
Ids carry ``unique`` so tests never see each other. The same with an in-memory store:
tests/unit/test_server_lists.py."""

from __future__ import annotations

import itertools
import time

import grpc
import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.core.list_readers import list_reader
from feed_service.core.per_reader.messages import VisibleDelta
from feed_service.core.rows import AuthorTimelineWrite, Entry, PullFollowWrite, TimelineWrite
from feed_service.core.view_changes import TimelineChange
from feed_service.kafka.stream_publisher import publish_view_changes
from feed_service.server.config import ServerConfig
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.settings import Settings
from feed_service.store.cassandra_writer import CassandraWriter

Code = grpc.StatusCode
_clock = itertools.count(int(time.time() * 1000) * 1000)
T0 = 1_767_225_600_000


def ts() -> int:
    return next(_clock)


@pytest.fixture(scope="module")
def cassandra(settings: Settings):
    from feed_service.store.session import connect

    cluster, session = connect(settings)
    yield session
    cluster.shutdown()


@pytest.fixture(scope="module")
def server(settings: Settings):
    # with the view's change topic: pushed watches and the read cache; no TTL'd pull heads (rows are
    # read right after they are written)
    config = ServerConfig(auth_secret=TEST_SECRET, metrics_port=None, settings=settings, pull_cache_ttl_s=0.0)
    with ServerThread(config) as running:
        deadline = time.monotonic() + 60
        while not running.server.store_connected():
            assert time.monotonic() < deadline, "the server did not connect to Cassandra"
            time.sleep(0.1)
        running.feed_live(60)
        yield running


def failure(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()


def test_a_list_is_read_by_its_owner_page_by_page_and_watched(cassandra, settings: Settings, server: ServerThread,
                                                              unique: str) -> None:
    ks = settings.keyspace
    writer = CassandraWriter(cassandra, ks)
    own, bob, cat, star, dan = (f"{u}-{unique}" for u in ("own", "bob", "cat", "star", "dan"))
    list_id, other = f"L-{unique}", f"M-{unique}"
    reader = list_reader(list_id)
    # the list's reader: bob's 25 tweets in its inbox, pull author star merged in, bob, cat, star seen
    inbox = [Entry(f"b{n:02d}-{unique}", bob, T0 + 10 * n, 1, f"bob {n}", 1) for n in range(25)]
    pulled = [Entry(f"s1-{unique}", star, T0 + 5, 1, "star", 1),
              Entry(f"s2-{unique}", star, T0 + 15, 1, "to cat", 1, f"c-{unique}", cat),  # a member: shown
              Entry(f"s3-{unique}", star, T0 + 25, 1, "to dan", 1, f"d-{unique}", dan),  # "list": not shown
              Entry(f"s4-{unique}", star, T0 + 35, 1, "to own", 1, f"o-{unique}", own)]  # the owner: shown
    writer.write(timeline=[TimelineWrite("insert", reader, e, ts()) for e in inbox],
                 author_timeline=[AuthorTimelineWrite("insert", e, ts()) for e in pulled],
                 pull_follows=[PullFollowWrite("insert", reader, star, ts())],
                 visible=[VisibleDelta("insert", reader, u, ts()) for u in (bob, cat, star)])
    # the list's facts: its reader's statics and its owner's lists (as the stream's list facts write them)
    for lid, name in ((list_id, "friends"), (other, "others")):
        cassandra.execute(f"UPDATE {ks}.home_timeline SET list_owner = %s, list_policy = %s WHERE timeline_id = %s",
                          (own, "list", list_reader(lid)))
        cassandra.execute(f"INSERT INTO {ks}.lists (owner_id, list_id, name, replies_policy, exclusive)"
                          " VALUES (%s, %s, %s, %s, %s)", (own, lid, name, "list", lid == other))
    stub, auth = server.stub(), server.auth(own)

    expected = sorted([*inbox, *(e for e in pulled if e.in_reply_to_author_id != dan)],
                      key=lambda e: (e.created_at, e.tweet_id), reverse=True)
    ids, token, pages = [], "", 0
    while True:
        page = stub.GetListTimeline(pb.GetListTimelineRequest(user_id=own, list_id=list_id, page_size=7,
                                                              page_token=token), metadata=auth, timeout=10)
        ids += [e.tweet_id for e in page.entries]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert ids == [e.tweet_id for e in expected] and pages == 4

    assert failure(lambda: stub.GetListTimeline(pb.GetListTimelineRequest(user_id=bob, list_id=list_id),
                                                metadata=server.auth(bob), timeout=10)) == Code.PERMISSION_DENIED
    assert failure(lambda: stub.GetListTimeline(pb.GetListTimelineRequest(user_id=own, list_id=f"none-{unique}"),
                                                metadata=auth, timeout=10)) == Code.NOT_FOUND
    assert failure(lambda: stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=reader),
                                                metadata=server.auth("svc", "service"), timeout=10)) == Code.INVALID_ARGUMENT
    lists = stub.ListLists(pb.ListListsRequest(owner_id=own), metadata=auth, timeout=10).lists
    assert [(i.list_id, i.name, i.replies_policy, i.exclusive) for i in lists] == [
        (list_id, "friends", "list", False), (other, "others", "list", True)]

    watch = stub.WatchListTimeline(pb.WatchListTimelineRequest(user_id=own, list_id=list_id), metadata=auth,
                                   timeout=60)
    assert dict(watch.initial_metadata())["feed-resume-token"]  # subscribed, at the head
    new = Entry(f"b99-{unique}", bob, T0 + 10_000, 1, "bob, new", 1)
    at = ts()
    writer.write(timeline=[TimelineWrite("insert", reader, new, at)])
    publish_view_changes(settings, [TimelineChange("insert", new, (reader,), at, None)])
    message = next(watch)
    assert [e.tweet_id for e in message.entries] == [new.tweet_id] and message.resume_token
    watch.cancel()
