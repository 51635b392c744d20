"""Lists end to end on the real stack's stream (docs/lists.md#in-the-engine): list and membership
changes through Kafka to their author keys, on to the stream's driver as messages; the list stage's
derived edges produced to ``feed.list-edges.v1`` and read back by the members' keys at the next
micro-batch; a list's timeline in Cassandra (its reader's inbox and extras) and every home
timeline with exclusive lists compared entry for entry with the batch reference, and the lists'
stores (``reader_excluded``, ``lists``, the statics ``list_owner``, ``list_policy`` of each list's
reader) with the reference's excluded sources and live lists; and read through the read service
(GetListTimeline page by page by the owner, refused to another user; every home through
GetHomeTimeline; ListLists), a WatchListTimeline pushed a member's new tweet."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.core.list_readers import list_of, list_reader
from feed_service.core.reference import (reference_entries, reference_excluded, reference_list_entries, reference_lists,
                                         reference_tables, reference_timelines)
from feed_service.settings import Settings
from feed_service.workload.generator import generate

from tests.support.isolation import isolated
from tests.support.pipeline import (StreamProcess, grpc_server, publish, read_all_home_timelines,
                                    read_all_list_timelines, running)
from tests.support.views import read_list_stores, read_views


def test_streamed_list_timelines_and_exclusive_homes_equal_the_reference(settings: Settings, unique: str,
                                                                         tmp_path: Path) -> None:
    pipeline = isolated(settings, unique)
    events = list(generate(users=40, events=800, seed=5, mean_following=6, prefix=f"{unique}-", repost_share=0.1,
                           reply_share=0.2, list_share=0.1, follow_option_share=0.03))
    assert any(e.get("exclusive") for e in events if e["type"] == "list")
    publish(pipeline, events)
    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "stream.log")) as stream:
        stream.wait_caught_up()
        stream.wait_caught_up()  # the edges the last batch derived, read back by the next
        got, _ = read_views(pipeline)
        excluded, stored_lists, rules = read_list_stores(pipeline)
        tables = reference_tables(events)
        live = tables.live_lists()
        with grpc_server(pipeline, reports=False) as server:
            assert read_all_list_timelines(server, {lid: c.owner_id for lid, c in live.items()}) == reference_lists(
                events, inbox_cap=pipeline.inbox_cap)
            readers = sorted({e["follower_id"] for e in events if e["type"] == "follow"})
            assert read_all_home_timelines(server, readers) == reference_timelines(events, inbox_cap=pipeline.inbox_cap)
            lid, owner = next((lid, c.owner_id) for lid, c in sorted(live.items()) if c.owner_id != readers[0])
            with pytest.raises(grpc.RpcError) as refused:
                server.stub().GetListTimeline(pb.GetListTimelineRequest(user_id=readers[0], list_id=lid),
                                              metadata=server.auth(readers[0]), timeout=10)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            listed = server.stub().ListLists(pb.ListListsRequest(owner_id=owner), metadata=server.auth(owner), timeout=10)
            assert [i.list_id for i in listed.lists] == sorted(k for k, c in live.items() if c.owner_id == owner)
            # a member's new tweet, pushed to a watch of a list it is on (and which its owner does not hide)
            hidden = tables.hidden()
            lid, owner, member = next((lid, live[lid].owner_id, m) for lid, members in sorted(tables.list_members().items())
                                      for m in sorted(members) if (live[lid].owner_id, m) not in hidden)
            watch = server.stub().WatchListTimeline(pb.WatchListTimelineRequest(user_id=owner, list_id=lid),
                                                    metadata=server.auth(owner), timeout=120)
            dict(watch.initial_metadata())  # subscribed
            new = {"type": "tweet", "op": "upsert", "tweet_id": f"{unique}-watched", "author_id": member, "version": 1,
                   "created_at": 4_000_000_000_000, "text": "on the list", "profile_version": 1}
            publish(pipeline, [new])
            assert any(new["tweet_id"] in [e.tweet_id for e in m.entries] for m in watch)
            watch.cancel()
    lists = reference_list_entries(tables, inbox_cap=pipeline.inbox_cap)
    inclusive = [dict(e, exclusive=False) if e["type"] == "list" and e["op"] == "create" else e for e in events]
    home = reference_entries(tables, inbox_cap=pipeline.inbox_cap)
    assert home != reference_entries(reference_tables(inclusive), inbox_cap=pipeline.inbox_cap)  # exclusivity bites
    assert sum(map(len, lists.values())) > 50
    assert {list_of(r): v for r, v in got.items() if list_of(r) is not None} == {k: v for k, v in lists.items() if v}
    assert {r: v for r, v in got.items() if list_of(r) is None} == home
    # the lists' stores: the readers' excluded sources, the live lists and their readers' rules
    assert excluded == reference_excluded(tables) and excluded
    assert len(live) > 1
    rows: dict[str, dict[str, tuple]] = {}
    for lid, c in live.items():
        rows.setdefault(c.owner_id, {})[lid] = (c.name, c.replies_policy, c.exclusive)
    assert stored_lists == rows
    assert rules == {list_reader(lid): (c.owner_id, c.replies_policy) for lid, c in live.items()}
    assert len(live) < len({e["list_id"] for e in events if e["type"] == "list"})  # some deleted: no row, no rule
