"""Stage ``lists``: the list stage over the lists' and memberships' winners, before the author keys.

The stream's driver steps the list stage (:class:`~feed_service.core.per_reader.list_stage.ListStage`)
on the list changes its author keys pass on, and gives the edges it derives to the members' keys at
the next micro-batch (docs/lists.md#in-the-engine). The backfill has every winner at once, so it
steps the stage first, once, from an empty stage whose clock starts at ``backfill_ts - 1`` (its
edges and facts are stamped ``backfill_ts``), and hands its edges to the members' keys in the same
pass as their other winners (:meth:`~spark_jobs.backfill.winners.Winners.with_list_edges`): a list
follow as a follow edge of the list's reader, an exclusion as the member key's fourth hide edge of
the owner (:data:`~feed_service.core.state.EXCLUDES`). The lists' readers' inboxes, pull follows and
relations then come out of the same join and author steps as everyone's.

A list follow is in force only while the member is not hidden from the owner (``ListSees``); the
stream reads that from the per-reader stage's relation of the pair, which the member's key sends for
every pair with a block or mute in force: here it is the same pairs, read from the winners
(:meth:`~spark_jobs.backfill.winners.Winners.hidden_pairs`) for the (owner, member) pairs of the
memberships. The stage's facts go to the per-reader stage with the author keys' messages
(:mod:`spark_jobs.backfill.per_reader`); its inputs are stored for the stream the backfill bootstraps,
as the stream stores them (``lists@<clock>``, spark_jobs/stream/per_reader.py).

The lists and memberships are collected to the driver: the same bound as the stream's driver, which
holds the list stage in memory.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple

from feed_service.core.events import ListChange, ListMemberChange
from feed_service.core.per_reader.list_stage import ListStage, ListStageResult
from feed_service.store.stage_inputs import identity_key
from spark_jobs.backfill.winners import Winners
from spark_jobs.bootstrap import PER_READER_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LIST_FOLLOW_SCHEMA = "reader_id string, member_id string, owner_id string, list_id string, version bigint, op string"
"""Rows of :attr:`ListFrames.follows`: one :class:`~feed_service.core.events.ListFollow` each."""
EXCLUSION_SCHEMA = "owner_id string, member_id string, version bigint, op string"
"""Rows of :attr:`ListFrames.exclusions`: one :class:`~feed_service.core.events.Exclusion` each."""
LIST_FACT_SCHEMA = "list_id string, owner_id string, name string, replies_policy string, exclusive boolean"
"""Rows of :attr:`ListFrames.facts`: one live list each (the ``lists`` table's columns)."""


def list_changes(lists: Iterable[Any], members: Iterable[Any]) -> list[ListChange | ListMemberChange]:
    """The winners of :attr:`Winners.lists` and :attr:`Winners.list_members` (rows with those columns)
    as the stage's changes; a delete's null name and options as the event holds them (defaults)."""
    out: list[ListChange | ListMemberChange] = []
    for r in lists:
        out.append(ListChange(r["list_id"], r["owner_id"], int(r["version"]), r["op"], r["name"],
                              "list" if r["replies_policy"] is None else r["replies_policy"],
                              False if r["exclusive"] is None else bool(r["exclusive"])))
    for r in members:
        out.append(ListMemberChange(r["list_id"], r["member_id"], int(r["version"]), r["op"]))
    return out


def step_list_stage(changes: Iterable[ListChange | ListMemberChange], hidden: set[tuple[str, str]],
                    backfill_ts: int) -> ListStageResult:
    """The list stage's one step over every winner, from an empty stage at ``backfill_ts - 1``;
    ``hidden``: the (owner, member) pairs whose member is hidden from the owner (a block or mute in
    force). From an empty stage every edge is one in force: a ``follow``, an ``exclude``."""
    return ListStage(clock=backfill_ts - 1).step(list(changes), (), lambda owner, member: (owner, member) in hidden)


def stage_input_rows(done: ListStageResult) -> list[tuple[str, bytes]]:
    """The stage's inputs as :data:`~spark_jobs.bootstrap.PER_READER_SCHEMA` rows (identity as
    :func:`~feed_service.store.stage_inputs.identity_key` writes it, the value pickled)."""
    return [(identity_key(identity), pickle.dumps(value, protocol=5)) for identity, value, _ in done.inputs
            if value is not None]


class ListFrames(NamedTuple):
    """What the list stage derived, as frames, and the step itself (its facts go to the per-reader stage)."""

    follows: "DataFrame"
    """:data:`LIST_FOLLOW_SCHEMA`."""
    exclusions: "DataFrame"
    """:data:`EXCLUSION_SCHEMA`."""
    facts: "DataFrame"
    """:data:`LIST_FACT_SCHEMA`: the ``lists`` table's rows."""
    inputs: "DataFrame"
    """:data:`~spark_jobs.bootstrap.PER_READER_SCHEMA`: the stage's inputs, for the stream."""
    done: ListStageResult

    def summary(self) -> dict[str, int]:
        """The summary's counts."""
        return {"lists_live": len(self.done.facts), "list_follows": len(self.done.follows),
                "exclusions": len(self.done.exclusions), "inputs": len(self.done.inputs)}


def owner_member_hidden(winners: Winners) -> "DataFrame":
    """``reader_id, author_id``: the (owner, member) pairs of the memberships whose member is hidden
    from the list's owner (any list change's owner: the stage asks only for its winner's)."""
    from pyspark.sql import functions as F

    pairs = (winners.list_members.select("list_id", F.col("member_id").alias("author_id"))
             .join(winners.lists.select("list_id", F.col("owner_id").alias("reader_id")), "list_id")
             .select("reader_id", "author_id"))
    return pairs.join(winners.hidden_pairs(), ["reader_id", "author_id"], "left_semi").distinct()


def list_stage(spark: "SparkSession", winners: Winners, backfill_ts: int) -> ListFrames:
    """The list stage over ``winners``' lists and memberships, collected to the driver (module docstring)."""
    changes = list_changes(winners.lists.toLocalIterator(), winners.list_members.toLocalIterator())
    hidden = {(r["reader_id"], r["author_id"]) for r in owner_member_hidden(winners).toLocalIterator()}
    done = step_list_stage(changes, hidden, backfill_ts)
    return ListFrames(
        spark.createDataFrame([(f.reader_id, f.member_id, f.owner_id, f.list_id, f.version, f.op) for f in done.follows],
                              LIST_FOLLOW_SCHEMA),
        spark.createDataFrame([(e.owner_id, e.member_id, e.version, e.op) for e in done.exclusions], EXCLUSION_SCHEMA),
        spark.createDataFrame(fact_rows(done), LIST_FACT_SCHEMA),
        spark.createDataFrame(stage_input_rows(done), PER_READER_SCHEMA),
        done)


def fact_rows(done: ListStageResult) -> list[tuple[str, str, str | None, str | None, bool]]:
    """The live lists' facts as ``lists`` rows (:data:`LIST_FACT_SCHEMA`); from an empty stage every
    fact is a live list's."""
    return [(f.list_id, f.owner_id, f.name, f.replies_policy, f.exclusive) for f in done.facts if f.live]  # type: ignore[misc]


def write_list_inputs(frames: ListFrames, path: Any) -> dict[str, int]:
    """Store the list stage's inputs as parquet at ``path`` (:data:`~spark_jobs.bootstrap.PER_READER_SCHEMA`),
    for the stream it bootstraps; returns the summary's counts."""
    frames.inputs.write.mode("overwrite").parquet(str(path))
    return frames.summary()
