"""Stage ``states``: the engine's own per-key state after the winners, the stream's initial state.

``step_with_side(None, winners of the key)`` (the author key's whole step, as the stream runs it) in
``groupBy("key").applyInPandas``, encoded with :func:`~feed_service.core.state.encode_state` and
stored as parquet in the backfill folder's :data:`~spark_jobs.bootstrap.STATE_DIR` (the layout
:mod:`spark_jobs.bootstrap` describes). The same pass returns each key's messages to the per-reader
steps (:mod:`spark_jobs.backfill.per_reader`).
"""

from __future__ import annotations

import operator
import pickle
from dataclasses import replace
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

from feed_service.core.event_kinds import EDGE_KINDS
from feed_service.core.per_reader.messages import STAGE, ConditionalTweet, ListInput, Relation, RepostedTweet, RepostEdge
from spark_jobs.backfill.join import TIMELINE_COLUMNS
from spark_jobs.backfill.winners import Winners
from spark_jobs.envelope import EVENT_COLUMNS

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from feed_service.core.per_reader.author_side import SideResult

ENGINE_OUTPUT_SCHEMA = "key string, state binary, step string, dest string, message binary"
"""Rows of :func:`engine_states`: a key's state (``step``, ``dest``, ``message`` null), or one of its
messages (``state`` null)."""

#: A message's class -> (the stage it goes to, the field naming the user it is about), as the stream
#: routes them (spark_jobs/output_rows.py).
MESSAGE_ROUTES: dict[type, tuple[str, str]] = {
    RepostEdge: (STAGE, "reposter"),
    RepostedTweet: (STAGE, "author_id"),
    Relation: (STAGE, "reader"),
    ConditionalTweet: (STAGE, "author_id"),
    ListInput: (STAGE, "key"),
}


def winner_events(winners: Winners) -> "DataFrame":
    """The winners as event rows (``key`` + typed event columns): the deduplicated changelog.

    Folding these into the engine gives the same state as folding every event: per entity the state
    keeps only the winner (a deleted tweet: only that it is deleted). Each winner goes to every key
    the engine routes it to (:func:`~feed_service.core.events.join_keys`): a block to the blocker's
    and the blocked user's key, a mute to the muted user's, so each key holds its hide edges; a repost
    to each of its join keys (the registry's; a key once when two of them name one user). The list
    stage's edges (:meth:`Winners.with_list_edges`), a list follow and an exclusion, go to the member's
    key with its other winners, as the stream's members' keys fold them (docs/lists.md#in-the-engine);
    the lists and memberships themselves go to no key (the stream's keys only pass them on to the list
    stage, which the backfill steps over the winners directly: spark_jobs/backfill/lists.py).
    """
    from pyspark.sql import functions as F

    def as_events(df: "DataFrame", key: str, **fixed: Any) -> "DataFrame":
        cols = []
        for name, sql_type in EVENT_COLUMNS:
            if name in fixed:
                cols.append(F.lit(fixed[name]).cast(sql_type).alias(name))
            elif name in df.columns:
                cols.append(F.col(name).cast(sql_type))
            else:
                cols.append(F.lit(None).cast(sql_type).alias(name))
        return df.select(F.col(key).alias("key"), *cols)

    # Reposts to every join key of the registry (today the original author's), each key once.
    repost_keys = EDGE_KINDS["repost"].join_keys
    reposts = as_events(winners.reposts, repost_keys[0], type="repost")
    for i, name in enumerate(repost_keys[1:], 1):
        distinct = reduce(operator.and_, (F.col(name) != F.col(earlier) for earlier in repost_keys[:i]))
        reposts = reposts.unionByName(as_events(winners.reposts.where(distinct), name, type="repost"))
    events = (as_events(winners.live_tweets, "author_id", type="tweet", op="upsert")
              .unionByName(as_events(winners.deleted_tweets, "author_id", type="tweet", op="delete"))
              .unionByName(as_events(winners.edges.withColumn("type", F.lit("follow")), "followee_id"))
              .unionByName(as_events(winners.profiles, "user_id", type="profile"))
              .unionByName(as_events(winners.blocks, "blocker_id", type="block"))
              .unionByName(as_events(winners.blocks, "blocked_id", type="block"))
              .unionByName(as_events(winners.mutes, "muted_id", type="mute"))
              .unionByName(reposts))
    if winners.list_follows is not None:
        events = events.unionByName(as_events(winners.list_follows, "member_id", type="list_follow"))
    if winners.exclusions is not None:
        events = events.unionByName(as_events(winners.exclusions, "member_id", type="exclusion"))
    return events


class KeyStep(NamedTuple):
    """One author key's step over its winners: the state to bootstrap the stream with and the
    messages it owes the per-reader stage."""

    key: str
    state: bytes
    """:func:`~feed_service.core.state.encode_state` of the state, its per-reader side included."""
    messages: tuple[tuple[str, str, bytes], ...]
    """(step, destination key, pickled message) of every message of its side (:func:`side_messages`)."""


def side_messages(side: "SideResult") -> tuple[tuple[str, str, bytes], ...]:
    """The messages of an author key's side as (step, destination key, pickled message): what the
    stream's operator emits as ``per_reader`` rows (spark_jobs/output_rows.py), here as columns."""
    out = []
    for part in (side.relations, side.replies, side.edges, side.tweets, side.lists):
        for m in part:
            step, field = MESSAGE_ROUTES[type(m)]
            out.append((step, getattr(m, field), pickle.dumps(m, protocol=5)))
    return tuple(out)


def key_state(events_pdf: "pd.DataFrame", *, inbox_cap: int, pull_threshold: int, backfill_ts: int) -> KeyStep:
    """One key's whole author step after its events (:func:`~feed_service.core.per_reader.author_step.step_with_side`,
    as the stream runs it): its encoded state and its messages; its clock is ``backfill_ts``.

    ``step`` from an empty state whose clock starts at ``backfill_ts - 1`` stamps the key's outputs
    with ``backfill_ts``, the timestamp the backfill wrote them with; a key without output gets the
    same clock, so every bootstrapped key's next stream write is above every backfill write. The
    side's own clock (it versions the messages) starts at 0 like a new key's in the stream.
    """
    from feed_service.core.per_reader.author_step import step_with_side
    from feed_service.core.state import encode_state
    from spark_jobs.timeline_join import events_from_rows

    # Nulls as None: the session's nullable integer columns hold pd.NA (an unrepost's time), which
    # events_from_rows' NaN test cannot take.
    plain = events_pdf.astype(object).where(events_pdf.notna(), None)
    events = events_from_rows(plain.itertuples(index=False))
    # The key named, not inferred: a key whose only changes are blocks with one user has two candidates.
    result, side = step_with_side(None, events, inbox_cap=inbox_cap, pull_threshold=pull_threshold,
                                  clock_start=backfill_ts - 1, key=str(events_pdf["key"].iloc[0]))
    state = result.state if result.state.clock == backfill_ts else replace(result.state, clock=backfill_ts)
    return KeyStep(state.key, encode_state(state), side_messages(side))


def engine_states(events: "DataFrame", *, inbox_cap: int, pull_threshold: int, backfill_ts: int) -> "DataFrame":
    """:func:`key_state` of every key, by ``groupBy("key").applyInPandas``: one row ``key, state`` per
    key and one row ``key, step, dest, message`` per message (:data:`ENGINE_OUTPUT_SCHEMA`; the
    other columns null). One pass, since the messages come from the step itself."""

    def fn(pdf: "pd.DataFrame") -> "pd.DataFrame":
        import pandas as pd

        done = key_state(pdf, inbox_cap=inbox_cap, pull_threshold=pull_threshold, backfill_ts=backfill_ts)
        n = len(done.messages)
        return pd.DataFrame({
            "key": [done.key] * (n + 1),
            "state": [done.state] + [None] * n,
            "step": [None] + [m[0] for m in done.messages],
            "dest": [None] + [m[1] for m in done.messages],
            "message": [None] + [m[2] for m in done.messages],
        })

    return events.groupBy("key").applyInPandas(fn, ENGINE_OUTPUT_SCHEMA)


def states_of(engine: "DataFrame") -> "DataFrame":
    """``key, state`` of every author key, from :func:`engine_states`' rows."""
    from pyspark.sql import functions as F

    return engine.where(F.col("state").isNotNull()).select("key", "state")


def messages_of(engine: "DataFrame") -> "DataFrame":
    """``step, dest, message`` of every message to the per-reader stage, from :func:`engine_states`' rows."""
    from pyspark.sql import functions as F

    return engine.where(F.col("message").isNotNull()).select("step", "dest", "message")


def write_states(spark: "SparkSession", engine: "DataFrame", path: Path) -> int:
    """Store every author key's state (from :func:`engine_states`' rows) as parquet at ``path``;
    returns the number of keys."""
    states_of(engine).write.mode("overwrite").parquet(str(path))
    return spark.read.parquet(str(path)).count()


def state_inbox_rows(blob: bytes) -> list[tuple]:
    """The inbox rows an encoded author state holds (:data:`TIMELINE_COLUMNS`): for a push author,
    each retained tweet to each visible follower, a reply to another user X only to X (the others'
    are conditional replies, the per-reader stage's); none for a pull author (merged at read)."""
    from feed_service.core.events import content_entry, parent_author_of
    from feed_service.core.rules import shown_in_inbox
    from feed_service.core.state import decode_state, visible_followers

    s = decode_state(blob)
    if s.pull:
        return []
    readers = visible_followers(s)
    rows = []
    for tid, c in s.tweets.items():
        row = content_entry(tid, s.key, c)[:len(TIMELINE_COLUMNS) - 1]  # an entry starts with the columns
        parent = parent_author_of(c)
        rows.extend((f, *row) for f in readers if shown_in_inbox(s.key, parent, f))
    return rows


def state_timeline_rows(states: "DataFrame") -> "DataFrame":
    """The inbox rows the engine states hold (:func:`state_inbox_rows`), for checks."""

    def fn(frames: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd

        for pdf in frames:
            rows = [row for blob in pdf["state"] for row in state_inbox_rows(bytes(blob))]
            yield pd.DataFrame.from_records(rows, columns=list(TIMELINE_COLUMNS))

    schema = ("timeline_id string, tweet_id string, author_id string, created_at bigint, version bigint, "
              "text string, profile_version bigint, in_reply_to_tweet_id string, in_reply_to_author_id string")
    return states.mapInPandas(fn, schema)
