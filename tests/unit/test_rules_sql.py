"""The backfill's Spark columns that restate a rule of feed_service/core/rules.py agree with the rule.

Each test evaluates the SQL form (spark_jobs/backfill/join.py, winners.py) and the Python rule on the
same rows: every combination of a few users for the reply rule, counts around the threshold for the
pull test, and every pair of changes of one edge at one or two versions for the version ranks.
One local Spark session serves the module (the session's own one, if the run already built it).
"""

from __future__ import annotations

from itertools import product
from typing import Any, Iterator

import pytest

from feed_service.core import rules
from feed_service.core.event_kinds import EDGE_KINDS

USERS = ("ann", "bob", "cat")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local SparkSession built as the suite's ``spark`` fixture builds it (same settings and
    jars), so a later ``getOrCreate`` of the integration tests gets the same session; not stopped
    here for the same reason (the process's end, or that fixture, stops it)."""
    pytest.importorskip("pyspark")
    from spark_jobs.runtime.session import build_session

    yield build_session("feed-tests")


def test_reply_class_and_the_inbox_rule_columns_are_the_rules(spark: Any) -> None:
    from spark_jobs.backfill.join import reply_class, shown_in_inbox

    rows = [(a, p, r) for a, p, r in product(USERS, (None, *USERS), USERS)]
    frame = spark.createDataFrame(rows, "author_id string, in_reply_to_author_id string, timeline_id string")
    got = frame.select("author_id", "in_reply_to_author_id", "timeline_id", reply_class().alias("cls"),
                       shown_in_inbox("timeline_id").alias("shown")).collect()
    assert len(got) == len(rows)
    for r in got:
        assert (r.cls or None) == rules.reply_class(r.author_id, r.in_reply_to_author_id), r
        assert r.shown == rules.shown_in_inbox(r.author_id, r.in_reply_to_author_id, r.timeline_id), r
    assert {r.shown for r in got} == {True, False}  # both sides of the rule were exercised


def test_the_pull_author_column_is_the_rule(spark: Any) -> None:
    from spark_jobs.backfill.join import is_pull_author

    threshold = 3
    frame = spark.createDataFrame([(n,) for n in range(7)], "count bigint")
    got = {r["count"]: r.pull for r in frame.select("count", is_pull_author("count", threshold).alias("pull")).collect()}
    assert got == {n: rules.is_pull_author(n, threshold) for n in range(7)}
    assert set(got.values()) == {True, False}


def _changes(kind_type: str) -> list[dict[str, Any]]:
    """Every change of one edge at versions 1 and 2, both ops (a repost with two payloads)."""
    kind = EDGE_KINDS[kind_type]
    assert kind.edge is not None
    out: list[dict[str, Any]] = []
    for version, op in product((1, 2), kind.ops):
        base = {kind.edge.subject: "ann", kind.edge.target: "t1" if kind_type == "repost" else "bob",
                "version": version, "op": op}
        if kind_type != "repost":
            out.append(base)
        elif op == kind.on_op:
            out += [{**base, "author_id": "cat", "created_at": at, "profile_version": 1} for at in (5, 7)]
        else:
            out.append({**base, "author_id": "cat", "created_at": None, "profile_version": None})
    return out


def _rank(kind_type: str, change: dict[str, Any]) -> tuple:
    on = change["op"] == EDGE_KINDS[kind_type].on_op
    if kind_type in ("follow", "list_follow"):
        return rules.edge_rank(change["version"], on)
    if kind_type == "repost":
        return rules.repost_rank(change["version"], on, change["author_id"], change["created_at"],
                                 change["profile_version"])
    if kind_type in ("block", "mute", "exclusion"):
        return rules.hide_rank(change["version"], on)
    if kind_type == "list_member":
        return rules.member_rank(change["version"], on)
    raise AssertionError(f"no rank for the edge kind {kind_type!r}: declare it in feed_service/core/rules.py")


@pytest.mark.parametrize("kind_type", sorted(EDGE_KINDS))
def test_the_edge_winner_columns_are_the_version_ranks(spark: Any, kind_type: str) -> None:
    """Of every subset of an edge's changes (up to three), the backfill's winner is the greatest rank."""
    from itertools import combinations

    from spark_jobs.backfill.winners import _edge_winners

    kind = EDGE_KINDS[kind_type]
    changes = _changes(kind_type)
    columns = ["type", *(f.name for f in kind.fields), "op", "batch"]
    types = {f.name: f.sql_type for f in kind.fields}
    schema = ", ".join(f"{c} {types.get(c, 'bigint' if c == 'batch' else 'string')}" for c in columns)
    rows, expected = [], {}
    subsets = [s for n in (1, 2, 3) for s in combinations(range(len(changes)), n)]
    for batch, subset in enumerate(subsets):
        picked = [changes[i] for i in subset]
        for c in picked:
            rows.append(tuple(kind_type if col == "type" else batch if col == "batch" else c.get(col)
                              for col in columns))
        best = max(picked, key=lambda c: _rank(kind_type, c))
        expected[batch] = (best["version"], best["op"], best.get("created_at"))
    # One edge per subset: the subject names the subset, so one window ranks each subset apart.
    subject = kind.edge.subject  # type: ignore[union-attr]
    at = columns.index(subject)
    rows = [(*r[:at], f"u{r[-1]}", *r[at + 1:]) for r in rows]
    events = spark.createDataFrame(rows, schema)
    got = {int(r[subject][1:]): (r.version, r.op, r["created_at"] if kind_type == "repost" else None)
           for r in _edge_winners(events, kind).collect()}
    assert got == expected


def test_a_follow_winner_carries_show_reposts_true_when_left_out(spark: Any) -> None:
    """The winners hold a follow's show_reposts as the parsed event does: absent or null is true; an
    unfollow's is null. Two follows of one edge at one version: true over false (then one row)."""
    from spark_jobs.backfill.winners import _edge_winners
    from spark_jobs.envelope import EVENT_COLUMNS

    changes = [("ann", "bob", 1, "follow", False), ("ann", "bob", 2, "follow", None),     # later, left out
               ("ann", "cat", 3, "follow", False), ("ann", "cat", 3, "follow", True),     # a tie of follows
               ("ann", "dan", 4, "follow", False), ("ann", "dan", 4, "unfollow", None),   # unfollow wins a tie
               ("ann", "eve", 5, "follow", False)]
    columns = ["follower_id", "followee_id", "version", "op", "show_reposts"]
    types = dict(EVENT_COLUMNS)
    rows = [("follow", *c) for c in changes]
    events = spark.createDataFrame(rows, ", ".join(f"{c} {types[c]}" for c in ["type", *columns]))
    got = {r.followee_id: (r.version, r.op, r.show_reposts)
           for r in _edge_winners(events, EDGE_KINDS["follow"]).collect()}
    assert got == {"bob": (2, "follow", True), "cat": (3, "follow", True), "dan": (4, "unfollow", None),
                   "eve": (5, "follow", False)}


def test_a_list_winner_is_the_highest_version_a_delete_on_a_tie_then_the_greater_payload(spark: Any) -> None:
    """The winners hold a list's winning change as docs/event-kinds.md declares it (what the list
    stage steps over, spark_jobs/backfill/lists.py): a create's left-out options with their defaults,
    a delete's null."""
    from spark_jobs.backfill.winners import _list_winners
    from spark_jobs.envelope import EVENT_COLUMNS

    columns = ["list_id", "owner_id", "version", "op", "name", "replies_policy", "exclusive"]
    changes = [("l1", "ann", 1, "create", "a", "none", True), ("l1", "ann", 2, "create", "b", None, None),
               ("l2", "ann", 3, "create", "a", "list", False), ("l2", "ann", 3, "delete", None, None, None),
               ("l3", "ann", 4, "create", "a", "followed", False), ("l3", "ann", 4, "create", "a", "none", False),
               ("l3", "ann", 4, "create", "a", "none", None),
               ("l4", "bob", 5, "delete", None, None, None), ("l4", "bob", 4, "create", "z", "none", True)]
    types = dict(EVENT_COLUMNS)
    events = spark.createDataFrame([("list", *c) for c in changes],
                                   ", ".join(f"{c} {types[c]}" for c in ["type", *columns]))
    got = {r.list_id: (r.version, r.op, r["name"], r.replies_policy, r.exclusive, r.owner_id)
           for r in _list_winners(events).collect()}
    assert got == {"l1": (2, "create", "b", "list", False, "ann"), "l2": (3, "delete", None, None, None, "ann"),
                   "l3": (4, "create", "a", "none", False, "ann"), "l4": (5, "delete", None, None, None, "bob")}

    def parsed(c: tuple) -> tuple:  # the change as the parsed event holds it (a create's defaults)
        lid, owner, version, op, name, policy, exclusive = c
        if op == "create":
            policy, exclusive = policy or "list", bool(exclusive)
        return (version, op, name, policy, exclusive, owner)

    by_list: dict[str, list[tuple]] = {}
    for c in changes:
        by_list.setdefault(c[0], []).append(parsed(c))
    best = {lid: max(cs, key=lambda c: rules.list_rank(c[0], c[1] == "create", c[2], c[3] or "list", bool(c[4]),
                                                        c[5]))
            for lid, cs in by_list.items()}
    assert {lid: (v, op, name, *((p, e) if op == "create" else (None, None)), o)
            for lid, (v, op, name, p, e, o) in best.items()} == got  # list_rank picks the same winners


def test_the_withheld_pairs_are_withholds_of_the_pairs_hide_edges(spark: Any) -> None:
    """An inbox holds none of the author's rows for a follower the author key withholds them from
    (:func:`feed_service.core.state.withholds`: a mute, a block either way or an exclusion in force):
    the backfill's visible edges (:meth:`Winners.visible_edges`, what its inbox join and pull follows
    use) are the active follows less :meth:`Winners.withheld_pairs`. Every combination of the four
    edges of a pair (never seen, in force, lifted) is one follower of ``bob``; a list's reader's list
    follow in force is a follow edge among them, one not in force is none."""
    from feed_service.core.state import withholds
    from spark_jobs.backfill.lists import EXCLUSION_SCHEMA, LIST_FOLLOW_SCHEMA
    from spark_jobs.backfill.winners import Winners

    states = (None, True, False)  # never seen, in force, lifted
    follows, mutes, blocks, exclusions, expected = [], [], [], [], {}
    for i, (mute, blocks_author, blocked_by_author, excludes) in enumerate(product(states, repeat=4)):
        reader = f"r{i}"
        follows.append((reader, "bob", 1, "follow", True))
        if mute is not None:
            mutes.append((reader, "bob", 1, "mute" if mute else "unmute"))
        if blocks_author is not None:
            blocks.append((reader, "bob", 1, "block" if blocks_author else "unblock"))
        if blocked_by_author is not None:
            blocks.append(("bob", reader, 1, "block" if blocked_by_author else "unblock"))
        if excludes is not None:
            exclusions.append((reader, "bob", 1, "exclude" if excludes else "include"))
        edges = tuple(None if s is None else (1, s) for s in (mute, blocks_author, blocked_by_author, excludes))
        expected[reader] = not withholds(edges)
    expected["\x1flist:L1"], expected["\x1flist:L2"] = True, False
    list_follows = [("\x1flist:L1", "bob", "ann", "L1", 3, "follow"), ("\x1flist:L2", "bob", "ann", "L2", 3, "unfollow")]
    winners = Winners(
        live_tweets=None, deleted_tweets=None, profiles=None, reposts=None, lists=None, list_members=None,  # type: ignore[arg-type]
        edges=spark.createDataFrame(follows, "follower_id string, followee_id string, version bigint, op string,"
                                             " show_reposts boolean"),
        mutes=spark.createDataFrame(mutes, "muter_id string, muted_id string, version bigint, op string"),
        blocks=spark.createDataFrame(blocks, "blocker_id string, blocked_id string, version bigint, op string"),
        list_follows=spark.createDataFrame(list_follows, LIST_FOLLOW_SCHEMA),
        exclusions=spark.createDataFrame(exclusions, EXCLUSION_SCHEMA))
    visible = {r.follower_id for r in winners.visible_edges().collect()}
    assert {reader for reader, shown in expected.items() if shown} == visible
    assert set(expected.values()) == {True, False}
    # an exclusion of one's own membership withholds nothing (the key skips it: one's own tweets are
    # in no home inbox of one's own)
    assert winners.with_list_edges(winners.list_follows, spark.createDataFrame(  # type: ignore[arg-type]
        [("bob", "bob", 1, "exclude")], EXCLUSION_SCHEMA)).exclusions_in_force().count() == 0
