"""The backfill job on the real stack: Kafka changelogs -> Spark batch join -> Cassandra, and the
stream bootstrapped from it. Every test compares with the engine's batch reference.

One round trip serves the first three tests (a stream start and a backfill are the slow parts), over
a history rich in every rule: reposts (by pull reposters too), replies, blocks and mutes (by the
reader and by the author, lifted, tied at one version), lists (exclusive ones among them, of readers
over users they follow, a member the owner mutes), edits, deletes, garbage records, pull authors
(a pull threshold of 6) and an author crossing it up. The stream runs over it, its view is recorded
and wiped and the ``feedctl backfill`` command rebuilds it (``rebuilt``): the first test checks the
rebuild table for table and through gRPC; the second bootstraps a stream from that backfill and
continues it (the rest of the history with its unreposts, edits, deletes, unfollows, follows, lifted
and new hides, and the author falling back under the threshold); the third runs a backfill at a cap of
2 without writes over the same topics (a second history added) for the DataFrame join against the
engine states. The tombstone test has a small pipeline of its own.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from feed_service.core.events import parse_event
from feed_service.core.list_readers import list_of, list_reader
from feed_service.core.reference import (
    reference_entries, reference_list_entries, reference_tables, reference_timelines, reference_user_timelines,
)
from feed_service.core.state import decode_state
from feed_service.kafka.client_config import client_config
from feed_service.kafka.keys import ROLE_OF_TYPE
from feed_service.security.roles import PRODUCER
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from spark_jobs.backfill import BackfillOptions, run_backfill
from spark_jobs.backfill.join import author_timeline_rows, join_timelines_batch, retained_tweets
from spark_jobs.backfill.lists import list_stage
from spark_jobs.backfill.read import classify, read_snapshot, valid_events
from spark_jobs.backfill.snapshot import Snapshot
from spark_jobs.backfill.states import state_timeline_rows
from spark_jobs.backfill.winners import winning_changes
from spark_jobs.envelope import parse_changes

from tests.support.history import crossing, followers
from tests.support.isolation import isolated
from tests.support.pipeline import (
    GARBAGE, StreamProcess, grpc_server, publish, read_all_home_timelines, read_table, read_timelines, running,
)
from tests.support.views import read_views, stored_view

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: cwd of the CLI runs below
#: The rich history's pull threshold: about half of its authors are pull authors (docs/fan-out.md).
THRESHOLD = 6
RICH_PREFIX = "bf7-"
#: The (subject, object) fields of a block and of a mute edge.
HIDE_ENDS = {"block": ("blocker_id", "blocked_id"), "mute": ("muter_id", "muted_id")}
#: The view as Cassandra holds it, table by table (``pull_authors``: the inbox partitions' static copy
#: of pull_follows). Every table but that one is wiped before the rebuild.
VIEW_TABLES = {
    "home_timeline": "SELECT timeline_id, created_at, tweet_id, author_id, version, text, profile_version,"
                     " in_reply_to_tweet_id, in_reply_to_author_id FROM home_timeline",
    "pull_authors": "SELECT DISTINCT timeline_id, pull_authors FROM home_timeline",
    "author_timeline": "SELECT author_id, created_at, tweet_id, version, text, profile_version, in_reply_to_tweet_id,"
                       " in_reply_to_author_id FROM author_timeline",
    "pull_follows": "SELECT follower_id, author_id FROM pull_follows",
    "tweets": "SELECT tweet_id, author_id, created_at, version, text, profile_version, in_reply_to_tweet_id,"
              " in_reply_to_author_id FROM tweets",
    "profiles": "SELECT user_id, version, display_name, avatar_url, bio FROM profiles",
    "blocks": "SELECT blocker_id, blocked_id FROM blocks",
    "home_extras": "SELECT * FROM home_extras",
    "user_reposts": "SELECT * FROM user_reposts",
    "reader_visible": "SELECT reader_id, user_id FROM reader_visible",
    "reader_hidden": "SELECT reader_id, user_id FROM reader_hidden",
    "reader_excluded": "SELECT reader_id, user_id FROM reader_excluded",
    "lists": "SELECT owner_id, list_id, name, replies_policy, exclusive FROM lists",
    "list_statics": "SELECT DISTINCT timeline_id, list_owner, list_policy FROM home_timeline",
}


def _history(seed: int, events: int = 600) -> list[dict]:
    return list(generate(users=30, events=events, seed=seed, mean_following=6, prefix=f"b{seed}-"))


def _rich_history(seed: int, events: int = 900, prefix: str = RICH_PREFIX, list_share: float = 0.05) -> list[dict]:
    """The generator's history with 15 % reposts, 30 % replies, 5 % hides, 4 % follows turning
    reposts off or on and ``list_share`` list changes."""
    return list(generate(users=40, events=events, seed=seed, mean_following=6, prefix=prefix,
                         repost_share=0.15, reply_share=0.3, hide_share=0.05, follow_option_share=0.04,
                         list_share=list_share))


def _list(list_id: str, owner: str, version: int, *, policy: str = "list", exclusive: bool = True,
          op: str = "create") -> dict:
    """A list envelope (a delete carries neither name nor options)."""
    if op == "delete":
        return {"type": "list", "op": "delete", "list_id": list_id, "owner_id": owner, "version": version}
    return {"type": "list", "op": "create", "list_id": list_id, "owner_id": owner, "version": version,
            "name": f"name of {list_id}", "replies_policy": policy, "exclusive": exclusive}


def _member(list_id: str, member: str, version: int, op: str = "add") -> dict:
    return {"type": "list_member", "op": op, "list_id": list_id, "member_id": member, "version": version}


def _exclusive_lists(events: list[dict], seed: int) -> list[dict]:
    """Exclusive lists of three readers over users they follow, one per reply policy, so that
    exclusivity takes entries out of their home timelines; the first owner mutes one of its members
    (the list does not see it: no list follow); and a membership of a list no change creates."""
    rnd = random.Random(seed)
    following: dict[str, list[str]] = {}
    for (follower, followee), edge in sorted(reference_tables(events).follows.items()):
        if edge[1]:
            following.setdefault(follower, []).append(followee)
    top = max(e["version"] for e in events) + 1
    out = []
    for i, owner in enumerate(rnd.sample([r for r in sorted(following) if len(following[r]) >= 3], 3)):
        lid = f"{RICH_PREFIX}x{i}"
        members = rnd.sample(following[owner], 2)
        out += [_list(lid, owner, top, policy=("list", "followed", "none")[i])]
        out += [_member(lid, m, top) for m in members]
        if i == 0:
            out.append(_hide("mute", "mute", owner, members[1], top))
    return out + [_member(f"{RICH_PREFIX}never", following[sorted(following)[0]][0], top)]


def _list_continuation(events: list[dict]) -> list[dict]:
    """Later changes of the exclusive lists: the first deleted (its members back in its owner's home),
    the second no longer exclusive, a member of the third removed."""
    top = max(e["version"] for e in events) + 1
    owners = {e["list_id"]: e["owner_id"] for e in events if e["type"] == "list"}
    third = sorted(e["member_id"] for e in events if e["type"] == "list_member" and e["list_id"] == f"{RICH_PREFIX}x2")
    return [_list(f"{RICH_PREFIX}x0", owners[f"{RICH_PREFIX}x0"], top, op="delete"),
            _list(f"{RICH_PREFIX}x1", owners[f"{RICH_PREFIX}x1"], top, policy="followed", exclusive=False),
            _member(f"{RICH_PREFIX}x2", third[0], top, op="remove")]


def _list_rules(events: list[dict]) -> dict[str, tuple[str, str]]:
    """list id -> owner and replies policy of every live list: what its reader's statics hold."""
    return {lid: (c.owner_id, c.replies_policy) for lid, c in reference_tables(events).live_lists().items()}


def _shown(entries: list) -> list[tuple]:
    """A timeline's entries as (tweet, author, time, reposter), newest first."""
    return [(e.tweet_id, e.author_id, e.at, e.reposted_by) for e in entries]


def _stored_reads(pipeline: Settings, events: list[dict]) -> tuple[dict[str, list], dict[str, list]]:
    """(home timelines, list timelines), the non-empty ones, read from what Cassandra holds by the
    core's read (:func:`tests.support.views.stored_view`: inbox, extras, pull authors and pull
    reposters merged, a list's by the rule its statics hold, a home without its excluded sources)."""
    rules = _list_rules(events)
    view = stored_view(pipeline, pipeline.inbox_cap)
    readers = {*view.timelines, *view.extras, *view.pull_follows, *view.pull_reposters}
    homes = {r: got for r in readers if list_of(r) is None and (got := _shown(view.entries(r)))}
    lists = {lid: got for lid in rules if (got := _shown(view.entries(list_reader(lid))))}
    return homes, lists


def _reference_reads(events: list[dict], inbox_cap: int) -> tuple[dict[str, list], dict[str, list]]:
    """The reference's non-empty (home timelines, list timelines), as :func:`_stored_reads` gives them."""
    tables = reference_tables(events)
    return ({r: _shown(v) for r, v in reference_entries(tables, inbox_cap=inbox_cap).items() if v},
            {lid: _shown(v) for lid, v in reference_list_entries(tables, inbox_cap=inbox_cap).items() if v})


def _exclusivity_bites(events: list[dict], inbox_cap: int) -> bool:
    """Whether the exclusive lists change some home timeline of the reference."""
    inclusive = [dict(e, exclusive=False) if e["type"] == "list" and e["op"] == "create" else e for e in events]
    return (reference_entries(reference_tables(events), inbox_cap=inbox_cap)
            != reference_entries(reference_tables(inclusive), inbox_cap=inbox_cap))


def _hide(kind: str, op: str, subject: str, target: str, version: int) -> dict:
    """A block or mute envelope."""
    return {"type": kind, "op": op, HIDE_ENDS[kind][0]: subject, HIDE_ENDS[kind][1]: target, "version": version}


def _hides(events: list[dict], seed: int, count: int = 24) -> list[dict]:
    """Blocks and mutes over follow edges of ``events``, so that they hide rows: mutes, blocks by the
    reader and by the author; some lifted later (unblock, unmute), some lifted at the same version (a
    tie: the hiding op wins); and a block of a user with no other change (a key of blocks only)."""
    rnd = random.Random(seed)
    follows = sorted({(e["follower_id"], e["followee_id"]) for e in events if e["type"] == "follow"})
    top = max(e["version"] for e in events) + 1
    out = []
    for i, (reader, author) in enumerate(rnd.sample(follows, count)):
        kind, subject, target = [("mute", reader, author), ("block", reader, author), ("block", author, reader)][i % 3]
        out.append(_hide(kind, kind, subject, target, top + i))
        if i % 4 == 1:
            out.append(_hide(kind, "un" + kind, subject, target, top + i + 1))
        elif i % 4 == 2:
            out.append(_hide(kind, "un" + kind, subject, target, top + i))
    return out + [_hide("block", "block", follows[0][0], f"loner-{seed}", top)]


def _blocks_in_force(events: list[dict]) -> list[tuple[str, str]]:
    """``(blocker_id, blocked_id)`` of the reference's blocks in force: the rows of the blocks table."""
    return sorted(edge for edge, (_, on) in reference_tables(events).blocks.items() if on)


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def _tables(settings: Settings) -> dict[str, list[tuple]]:
    return {
        "tweets": sorted(read_table(settings, "SELECT tweet_id, author_id, created_at, version, text, profile_version"
                                              " FROM tweets")),
        "profiles": sorted(read_table(settings, "SELECT user_id, version, display_name, avatar_url, bio FROM profiles")),
        "blocks": sorted(read_table(settings, "SELECT blocker_id, blocked_id FROM blocks")),
    }


def _view(pipeline: Settings) -> dict[str, list[tuple]]:
    """Every table of :data:`VIEW_TABLES`, as sorted tuples ('' read as None: no reply, no repost)."""
    rows = {table: read_table(pipeline, query) for table, query in VIEW_TABLES.items()}
    # the static copy as sorted tuples; and the inbox rows alone (a partition holding only statics
    # reads as one row without a clustering key)
    rows["pull_authors"] = [(t, tuple(sorted(a))) for t, a in rows["pull_authors"] if a]
    rows["list_statics"] = [r for r in rows["list_statics"] if r[1] is not None or r[2] is not None]
    rows["home_timeline"] = [r for r in rows["home_timeline"] if r[1] is not None]
    return {table: sorted(tuple(None if v == "" else v for v in r) for r in found) for table, found in rows.items()}


def _differences(got: dict[str, list[tuple]], want: dict[str, list[tuple]]) -> dict[str, tuple]:
    """Per table that differs: (row count, rows only in ``got``, rows only in ``want``; a few of each)."""
    out = {}
    for table in sorted(set(got) | set(want)):
        a, b = set(got.get(table, [])), set(want.get(table, []))
        if got.get(table) != want.get(table):
            out[table] = (len(got.get(table, [])), len(want.get(table, [])), sorted(a - b)[:3], sorted(b - a)[:3])
    return out


def _reads(pipeline: Settings, users: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Every home timeline of ``users`` through gRPC (a fresh server: its read cache empty)."""
    with grpc_server(pipeline, reports=False) as server:
        return read_all_home_timelines(server, users)


def _backfill_command(pipeline: Settings, out: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "feed_service", "backfill", "--out", str(out)], cwd=REPO_ROOT,
                          env={**os.environ, **pipeline.to_env()}, capture_output=True, text=True, timeout=timeout)


class Rebuilt(NamedTuple):
    """A pipeline the stream ran on, its view wiped and rebuilt by the backfill command, and what was
    read at each step; ``published``: every valid event published into its topics so far (the later
    tests add theirs)."""

    pipeline: Settings
    events: list[dict]
    later: list[dict]
    published: list[dict]
    streamed: dict[str, list[tuple]]
    streamed_reads: dict[str, list[dict[str, Any]]]
    wiped: dict[str, list[tuple]]
    out: Path
    backfill: subprocess.CompletedProcess
    view: dict[str, list[tuple]]
    reads: dict[str, list[dict[str, Any]]]


@pytest.fixture(scope="module")
def rebuilt(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Rebuilt:
    """The stream over three quarters of the rich history with extra hides, the star's crossing up and
    bad records; then its view truncated and rebuilt by ``feedctl backfill``, the real command as an
    operator runs it. The rest of the history is ``later``."""
    pipeline = isolated(settings, pull_threshold=THRESHOLD)
    tmp = tmp_path_factory.mktemp("rebuilt")
    history = _rich_history(seed=7)
    cut = len(history) * 3 // 4
    events = history[:cut]
    events += _hides(events, seed=11) + crossing(RICH_PREFIX, THRESHOLD, up=True, version=1)
    events += _exclusive_lists(events, seed=12)
    publish(pipeline, events, GARBAGE)
    with running(StreamProcess(pipeline, tmp / "ckpt", log_file=tmp / "stream.log")) as stream:
        stream.wait_caught_up()
        stream.wait_caught_up()  # the list edges the last batch derived, read back by the next
    users = followers(history + events)
    streamed, streamed_reads = _view(pipeline), _reads(pipeline, users)

    for table in VIEW_TABLES:
        if table not in ("pull_authors", "list_statics"):  # columns of home_timeline
            read_table(pipeline, f"TRUNCATE {table}")
    wiped = _view(pipeline)

    out = tmp / "backfill"
    proc = _backfill_command(pipeline, out)
    return Rebuilt(pipeline, events, history[cut:], list(events), streamed, streamed_reads, wiped, out, proc,
                   _view(pipeline), _reads(pipeline, users))


def test_backfill_after_wipe_rebuilds_what_the_stream_wrote_table_for_table_and_the_reference(
        rebuilt: Rebuilt) -> None:
    pipeline, events, streamed, out, proc = (rebuilt.pipeline, rebuilt.events, rebuilt.streamed, rebuilt.out,
                                             rebuilt.backfill)
    reference = reference_timelines(events, inbox_cap=pipeline.inbox_cap)
    assert rebuilt.streamed_reads == reference
    assert _exclusivity_bites(events, pipeline.inbox_cap)
    assert streamed["blocks"] == _blocks_in_force(events)
    pulls = {a for _, a in streamed["pull_follows"]}
    assert f"{RICH_PREFIX}star" in pulls and len(pulls) >= 3  # several pull authors, the star among them
    assert streamed["pull_authors"] and streamed["author_timeline"]
    assert all(rows == [] for rows in rebuilt.wiped.values()), rebuilt.wiped

    assert proc.returncode == 0, proc.stderr[-4000:]
    # the same hybrid layout and per-reader tables, table for table, and the same reads
    assert _differences(rebuilt.view, streamed) == {}
    assert rebuilt.reads == reference

    # the rebuilt home timelines (inboxes with per-reader entries) hold reposts and replies to a third
    # user; the user timelines (tweets with reposts) are the reference's
    tables = reference_tables(events)
    got_home, got_users = read_views(pipeline)
    assert any(e.reposted_by for entries in got_home.values() for e in entries)
    assert any(e.in_reply_to_author_id not in (None, e.author_id) for entries in got_home.values() for e in entries)
    assert got_users == reference_user_timelines(tables, inbox_cap=pipeline.inbox_cap)
    # every home, the exclusive lists' owners' too, and every list timeline read from the stored rows
    # are the reference's
    homes, lists = _reference_reads(events, pipeline.inbox_cap)
    assert set(tables.excluded()) & set(homes) and len(lists) >= 3
    assert streamed["reader_excluded"] and streamed["lists"] and streamed["list_statics"]
    assert _stored_reads(pipeline, events) == (homes, lists)
    assert any(list_of(reader) for reader, _ in streamed["reader_visible"])

    manifest = json.loads((out / "manifest.json").read_text())
    summary = manifest["summary"]
    assert summary["records_read"] == len(events) + len(GARBAGE)
    assert summary["invalid"] == len(GARBAGE) and summary["tombstones"] == 0
    assert summary["rows"]["timeline"] == len(streamed["home_timeline"])
    # the timelines the author keys reach: readers with an entry of a push or pull author seen directly
    # (plain, or a reply to the reader; what only the per-reader stage brings is counted in its rows)
    # (a list's reader: a plain tweet of a member it sees)
    assert summary["timelines"] == sum(
        1 for reader, entries in reference.items()
        if any(not e.get("reposted_by") and e.get("in_reply_to_author_id") in (None, reader) for e in entries)
    ) + sum(1 for entries in reference_list_entries(tables, inbox_cap=pipeline.inbox_cap).values()
            if any(not e.reposted_by and e.in_reply_to_author_id in (None, e.author_id) for e in entries))
    for table in ("home_extras", "user_reposts", "reader_visible"):
        assert summary["rows"][table] == len(streamed[table]) > 0, table
    assert summary["per_reader"]["inputs"] > 0 and summary["per_reader"]["extras_rows"] > 0
    assert summary["lists"]["list_follows"] > 0 and summary["lists"]["exclusions"] > 0
    assert manifest["list_inputs"] == "lists" and any((out / "lists").glob("*.parquet"))
    stamps = {r[0] for r in read_table(pipeline, "SELECT writetime(version) FROM home_extras")}
    assert stamps == {manifest["backfill_ts"]}  # the stage's clock started at backfill_ts - 1
    assert "backfill summary" in proc.stderr and "stage write: done" in proc.stderr
    for topic, parts in manifest["end_offsets"].items():  # per partition progress lines
        for p in parts:
            assert f"{topic} p{p}:" in proc.stderr

    # Running it again is a no-op on the data (in place, idempotent), and refuses a used folder.
    again = _backfill_command(pipeline, out, timeout=120)
    assert again.returncode == 2 and "already holds a completed backfill" in again.stderr


def _continuation(events: list[dict], seed: int) -> list[dict]:
    """Later changes that need the stream's state from the backfill to be applied right: deletes and
    edits of old tweets (followers from state), unfollows (retained tweets from state), new follows of
    old authors (their tweets backfilled into the new inbox), blocks and mutes lifted (the hidden rows
    come back) or lifted at the winner's version (a tie: still hidden), new blocks and mutes, follows
    of a user who blocks the follower (still hidden), and fresh tweets."""
    rnd = random.Random(seed)
    parsed = [parse_event(e) for e in events]
    top = max(e["version"] for e in events) + 1
    ups = [e for e in events if e["type"] == "tweet" and e["op"] == "upsert"]
    deleted = {e["tweet_id"] for e in events if e["type"] == "tweet" and e["op"] == "delete"}
    live = [e for e in ups if e["tweet_id"] not in deleted]
    more: list[dict] = []
    for e in rnd.sample(live, 15):
        more.append({**e, "version": top + len(more), "text": "edited later: " + e["text"]})
    for e in rnd.sample([e for e in live if e not in more], 10):
        more.append({"type": "tweet", "op": "delete", "tweet_id": e["tweet_id"], "author_id": e["author_id"],
                     "version": top + len(more)})
    edges = {(ev.follower_id, ev.followee_id) for ev in parsed if type(ev).__name__ == "FollowChange"}
    for follower, followee in rnd.sample(sorted(edges), 10):
        more.append({"type": "follow", "op": rnd.choice(["unfollow", "follow"]), "follower_id": follower,
                     "followee_id": followee, "version": top + len(more)})
    users = sorted({e["author_id"] for e in ups})
    for _ in range(10):
        a, b = rnd.sample(users, 2)
        more.append({"type": "follow", "op": "follow", "follower_id": a, "followee_id": b, "version": top + len(more)})
    tables = reference_tables(events)
    in_force = sorted([("block", *edge, v) for edge, (v, on) in tables.blocks.items() if on]
                      + [("mute", *edge, v) for edge, (v, on) in tables.mutes.items() if on])
    lifted = rnd.sample(in_force, 8)
    for i, (kind, subject, target, version) in enumerate(lifted):
        more.append(_hide(kind, "un" + kind, subject, target, top + len(more) if i % 2 else version))
    for i, (follower, followee) in enumerate(rnd.sample(sorted(edges), 6)):
        kind, subject, target = [("mute", follower, followee), ("block", follower, followee),
                                 ("block", followee, follower)][i % 3]
        more.append(_hide(kind, kind, subject, target, top + len(more)))
    kept = [edge for edge in in_force if edge[0] == "block" and edge not in lifted]
    for _, blocker, blocked, _ in kept[:4]:
        more.append({"type": "follow", "op": "follow", "follower_id": blocked, "followee_id": blocker,
                     "version": top + len(more)})
    more += _history(seed=seed, events=150)[-100:]  # new tweets etc. of another prefix's users
    return more


def _touched_tweets(events: list[dict]) -> set[str]:
    """Tweet ids ``events`` upsert or delete."""
    return {e["tweet_id"] for e in events if e["type"] == "tweet"}


def _list_users(events: list[dict]) -> tuple[set[str], set[str]]:
    """(owners, members) of every list of ``events``: the timelines a list change may rewrite
    (exclusivity) and the authors whose followers a list change or an owner's hide may change (a list
    follow more or less may move a member between push and pull)."""
    return ({e["owner_id"] for e in events if e["type"] == "list"},
            {e["member_id"] for e in events if e["type"] == "list_member"})


def _touched_pairs(events: list[dict]) -> set[tuple[str, str]]:
    """(user, user) pairs, both ways, between which ``events`` follow, unfollow, block or mute."""
    ends = {"follow": ("follower_id", "followee_id"), **HIDE_ENDS}
    return {pair for e in events if e["type"] in ends
            for a, b in [(e[ends[e["type"]][0]], e[ends[e["type"]][1]])] for pair in ((a, b), (b, a))}


def test_stream_bootstrapped_from_backfill_continues_exactly(rebuilt: Rebuilt, spark, tmp_path: Path) -> None:
    pipeline, events, out = rebuilt.pipeline, rebuilt.events, rebuilt.out
    assert rebuilt.backfill.returncode == 0, rebuilt.backfill.stderr[-4000:]
    manifest = json.loads((out / "manifest.json").read_text())
    backfill_ts = manifest["backfill_ts"]
    assert rebuilt.reads == reference_timelines(events, inbox_cap=pipeline.inbox_cap)
    assert rebuilt.view["blocks"] == _blocks_in_force(events)

    # The DataFrame join and the engine's states hold exactly the same rows, the lists' readers'
    # (the list stage's follows as their follow edges, its exclusions withheld) among them; the list
    # stage's facts are the live lists.
    snap = Snapshot(manifest["start_offsets"], manifest["end_offsets"])
    winners = winning_changes(valid_events(classify(parse_changes(read_snapshot(spark, pipeline, snap)))))
    lists = list_stage(spark, winners, backfill_ts)
    winners = winners.with_list_edges(lists.follows, lists.exclusions)
    assert sorted(tuple(r) for r in lists.facts.collect()) == sorted(
        (lid, c.owner_id, c.name, c.replies_policy, c.exclusive) for lid, c in reference_tables(events).live_lists().items())
    joined = _rows(join_timelines_batch(winners, pipeline.inbox_cap, pipeline.pull_threshold))
    from_states = _rows(state_timeline_rows(spark.read.parquet(str(out / "state"))))
    assert joined == from_states and len(joined) == manifest["summary"]["rows"]["timeline"]

    # The continuation needs the stream's state from the backfill, the per-reader stage's included:
    # the rest of the history (unreposts, follows, edits of what the backfill holds), then changes of
    # :func:`_continuation`, then the star falls back below the threshold (pushed again).
    more = (rebuilt.later + _continuation(events, seed=13) + crossing(RICH_PREFIX, THRESHOLD, up=False, version=2)
            + _list_continuation(events))
    everything = events + more
    checkpoint = tmp_path / "ckpt"
    log = tmp_path / "stream.log"
    with running(StreamProcess(pipeline, checkpoint, log_file=log,
                               extra_args=["--bootstrap-from", str(out)])) as stream:
        publish(pipeline, more)
        rebuilt.published.extend(more)
        stream.wait_caught_up()
        stream.wait_caught_up()  # the list edges the last batch derived, read back by the next
        tables = reference_tables(everything)
        assert _reads(pipeline, followers(everything)) == reference_timelines(everything, inbox_cap=pipeline.inbox_cap)
        assert _stored_reads(pipeline, everything) == _reference_reads(everything, pipeline.inbox_cap)
        assert read_views(pipeline)[1] == reference_user_timelines(tables, inbox_cap=pipeline.inbox_cap)
        assert _tables(pipeline)["blocks"] == _blocks_in_force(everything)
        assert f"{RICH_PREFIX}star" not in {a for _, a in read_table(pipeline, "SELECT follower_id, author_id"
                                                                                " FROM pull_follows")}
    assert int((checkpoint / "clock_start").read_text()) == backfill_ts
    assert "per-reader stage inputs seeded" in log.read_text(errors="replace")
    assert "list stage inputs seeded" in log.read_text(errors="replace")

    # Nothing of the backfilled history was applied twice: inbox rows the continuation did not touch
    # (their tweet not edited or deleted, no follow, block or mute between reader and author, no
    # follower gained or lost by the author, a home reader owning no list, an author on no list) keep
    # the backfill's timestamp, everything the stream wrote is above it (inboxes and per-reader entries).
    list_owners, list_members = _list_users(everything)
    stamps = {(t, tid): s for t, tid, s in read_table(pipeline, "SELECT timeline_id, tweet_id, writetime(version)"
                                                                " FROM home_timeline")
              if tid is not None}  # not a partition holding only its statics (a reader of pull authors only)
    untouched = [(t, tid) for t, _, tid, author, *_ in rebuilt.view["home_timeline"]
                 if tid not in _touched_tweets(more) and (t, author) not in _touched_pairs(more)
                 and author not in {e["followee_id"] for e in more if e["type"] == "follow"}
                 and list_of(t) is None and t not in list_owners and author not in list_members]
    assert len(untouched) > 20 and {stamps.get(row) for row in untouched} == {backfill_ts}
    assert min(stamps.values()) == backfill_ts and any(s > backfill_ts for s in stamps.values())
    stamps = [r[0] for r in read_table(pipeline, "SELECT writetime(version) FROM home_extras")]
    assert min(stamps) == backfill_ts and max(stamps) > backfill_ts

    # A second bootstrap into the now used checkpoint is refused before Spark starts.
    again = subprocess.run([sys.executable, "-m", "spark_jobs.stream", "--checkpoint", str(checkpoint),
                            "--bootstrap-from", str(out)], cwd=REPO_ROOT,
                           env={**os.environ, **pipeline.to_env()}, capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "committed batches" in again.stderr


def test_dataframe_join_is_the_engine_states_at_a_small_cap_and_no_write_leaves_cassandra_alone(
        rebuilt: Rebuilt, spark, tmp_path: Path) -> None:
    """At a cap of 2 authors exceed it in every class: the join retains per class and writes a reply
    to X only to X, as the author step does; the winners keep a reply's parent. A backfill without
    writes over the rebuilt pipeline's topics (no stream runs on them now), with a second history of
    users of their own added (and same-version ties between two parents of a reply): Cassandra holds
    what it held before, table for table."""
    from pyspark import StorageLevel

    pipeline = rebuilt.pipeline
    more = _rich_history(seed=8, events=600, prefix="br8-", list_share=0)  # the lists: the first history's
    replies = [e for e in more if e["type"] == "tweet" and e.get("in_reply_to_author_id")]
    more += [{**e, "in_reply_to_author_id": e["author_id"], "in_reply_to_tweet_id": "t-self"} for e in replies[:20]]
    publish(pipeline, more)
    rebuilt.published.extend(more)
    events = list(rebuilt.published)
    before = _view(pipeline)
    small = pipeline.replace(inbox_cap=2)
    out = tmp_path / "backfill-cap2"
    result = run_backfill(spark, small, BackfillOptions(out=out, write=False))
    manifest = result.manifest
    assert result.summary["written"] is False
    assert _differences(_view(pipeline), before) == {}

    snap = Snapshot(manifest["start_offsets"], manifest["end_offsets"])
    persisted = []

    def keep(df):  # type: ignore[no-untyped-def] - the snapshot is read once for the checks below
        persisted.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    winners = winning_changes(valid_events(classify(parse_changes(read_snapshot(spark, small, snap))))).map(keep)
    lists = list_stage(spark, winners, manifest["backfill_ts"])
    winners = winners.with_list_edges(keep(lists.follows), keep(lists.exclusions))
    try:
        tables = reference_tables(events)
        live = {(r.author_id, r.tweet_id): (r.version, r.created_at, r.text, r.profile_version,
                                            *((r.in_reply_to_tweet_id, r.in_reply_to_author_id)
                                              if r.in_reply_to_tweet_id is not None else ()))
                for r in winners.live_tweets.collect()}
        assert live == tables.tweets

        states = spark.read.parquet(str(out / "state"))
        joined = sorted(tuple(r) for r in join_timelines_batch(winners, 2, small.pull_threshold).collect())
        from_states = sorted(tuple(r) for r in state_timeline_rows(states).collect())
        per_timeline: dict[str, list[tuple]] = {}
        for row in from_states:
            per_timeline.setdefault(row[0], []).append(row)
        newest = sorted(r for rows in per_timeline.values()
                        for r in sorted(rows, key=lambda r: (r[3], r[1], r[2]))[-2:])
        assert joined == newest and manifest["summary"]["rows"]["timeline"] == len(joined)
        assert any(r[8] not in (None, r[2]) for r in joined)  # replies to a third user, in that user's inbox

        retained = {(s.key, tid) for s in (decode_state(bytes(r.state)) for r in states.collect())
                    for tid in s.tweets}
        assert {(r.author_id, r.tweet_id) for r in author_timeline_rows(winners, 2).collect()} == retained
        # per class: more than the newest 2 of some author
        assert retained_tweets(winners.live_tweets, 2).groupBy("author_id").count().where("count > 2").count() > 0
        assert json.loads((out / "manifest.json").read_text())["per_reader_inputs"] == "per_reader"
    finally:
        for df in persisted:
            df.unpersist()


def _noisy(events: list[dict], seed: int) -> list[dict]:
    """Duplicates, older versions and same-version ties of every kind, shuffled."""
    rnd = random.Random(seed)
    out = list(events)
    for e in events:
        if rnd.random() > 0.35:
            continue
        out.append(dict(e))  # duplicate
        if e["type"] == "tweet" and e["op"] == "upsert":
            out.append({**e, "text": e["text"] + " (same version, other text)"})
            if e["version"] > 0:
                out.append({**e, "version": e["version"] - 1, "text": "stale"})
        elif e["type"] == "tweet":
            out.append({**e, "version": 0})  # an older delete: still final
        elif e["type"] == "follow":
            out.append({**e, "op": "unfollow" if e["op"] == "follow" else "follow"})  # tie: unfollow wins
            out.append({**e, "op": "follow", "version": max(e["version"] - 1, 0)})  # stale re-follow
        elif e["type"] in HIDE_ENDS:
            other = e["op"][2:] if e["op"].startswith("un") else "un" + e["op"]
            out.append({**e, "op": other})  # tie: block (mute) wins
            out.append({**e, "op": other, "version": max(e["version"] - 1, 0)})  # stale
        else:
            out.append({**e, "display_name": e["display_name"] + " (tie)", "bio": None})
    rnd.shuffle(out)
    return out


def test_backfill_skips_tombstones_and_keeps_each_entitys_winner(
    settings: Settings, spark, unique: str, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    pipeline = isolated(settings, unique)
    history = _history(seed=14, events=400)
    events = _noisy(history + _hides(history, seed=14), seed=14)
    publish(pipeline, events[: len(events) // 2])
    raw = Producer(client_config(pipeline, PRODUCER))
    tombstones = 0
    for e in events[:40]:  # compaction markers (null values) for keys of every topic, mid-log
        raw.produce(pipeline.topic(ROLE_OF_TYPE[e["type"]]), key=f"tombstone-{tombstones}".encode(), value=None)
        tombstones += 1
    assert raw.flush(30) == 0
    publish(pipeline, events[len(events) // 2:])

    cap = 3  # small: authors exceed it, so retention at the cap is exercised too
    result = run_backfill(spark, pipeline.replace(inbox_cap=cap), BackfillOptions(out=tmp_path / "backfill"))
    summary = result.summary
    assert summary["tombstones"] == tombstones and summary["invalid"] == 0
    assert summary["records_read"] == len(events) + tombstones

    # The store is the reference at the cap: the engine states' inbox rows, each timeline's newest
    # `cap` of them (the bound of trimmed inboxes, docs/trimming.md).
    stored = read_timelines(pipeline)
    assert stored == reference_timelines(events, inbox_cap=cap)
    from_states = _rows(state_timeline_rows(spark.read.parquet(str(tmp_path / "backfill" / "state"))))
    per_timeline: dict[str, list[tuple]] = {}
    for row in from_states:
        per_timeline.setdefault(row[0], []).append(row)
    newest = [r for rows in per_timeline.values() for r in sorted(rows, key=lambda r: (r[3], r[1], r[2]))[-cap:]]
    stored_rows = [(*r[:7], r[7] or None, r[8] or None)  # '' is stored for no reply
                   for r in read_table(pipeline, "SELECT timeline_id, tweet_id, author_id, created_at, version, text,"
                                                 " profile_version, in_reply_to_tweet_id, in_reply_to_author_id"
                                                 " FROM home_timeline") if r[1] is not None]
    assert sorted(stored_rows) == sorted(newest) and len(stored_rows) == summary["rows"]["timeline"]
    assert len(from_states) > len(stored_rows)  # the states hold more: the cut did cut

    # Winners by the engine's rules: tweet text and version, profile payloads per (user, version),
    # blocks and mutes in force.
    tables = reference_tables(events)
    want_tweets = sorted((tid, a, c[1], c[0], c[2], c[3]) for (a, tid), c in tables.tweets.items())
    got = _tables(pipeline)
    assert got["tweets"] == want_tweets
    assert got["profiles"] == sorted((u, v, *p) for (u, v), p in tables.profiles.items())
    assert got["blocks"] == _blocks_in_force(events)
    assert summary["entities"]["mutes_in_force"] == sum(1 for _, on in tables.mutes.values() if on)
    assert summary["entities"]["tweets_deleted"] == len(tables.deleted)
    assert summary["entities"]["follow_edges_active"] == sum(1 for edge in tables.follows.values() if edge[1])
