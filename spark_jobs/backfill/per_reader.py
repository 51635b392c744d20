"""Stage ``per_reader``: the per-reader stage over every author key's messages, as one batch.

The author keys' step (stage ``states``) also returns the messages each key owes the per-reader
stage (docs/reposts-and-replies.md): relations, conditional tweets, repost edges and reposted
tweets' contents. Here, as in the stream (spark_jobs/stream/per_reader.py), the driver steps the
one stage (:class:`~feed_service.core.per_reader.audience_stage.AudienceStage`) on them, from an
empty stage whose clock starts at ``backfill_ts - 1``, so that every row is stamped ``backfill_ts``
like the author keys' rows. Its outputs are rows of ``home_extras``, ``user_reposts``,
``reader_visible``, ``reader_hidden``, ``reader_excluded`` and, with pull reposters
(``FEED_PULL_REPOSTERS``), ``home_timeline.pull_reposters``; and the stage's inputs, which the stream bootstrapped from this
backfill restores it from (:data:`~spark_jobs.bootstrap.PER_READER_DIR`).

The messages are assignments versioned by their sender's clock and the stage keeps the newest per
identity, so one batch of all the final messages ends where the stream ends after any batching of
the same history. The stage holds, in the driver, the audiences of every user (the visible follow
edges) and the tweets with replies to third users or reposts: the same bound as the stream's driver.

The lists' facts (owner, reply policy) come from the list stage, which the backfill steps before
the author keys (:mod:`spark_jobs.backfill.lists`); they are given to the stage in the same step as
the messages, applied first, so the lists' readers' rows are decided by their lists' rules from the
start and every output is an insert.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple

from feed_service.core.per_reader.audience_stage import AudienceStage, StageResult
from feed_service.core.per_reader.list_stage import ListFact
from feed_service.core.per_reader.routing import step_messages
from feed_service.store.stage_inputs import identity_key
from spark_jobs.bootstrap import PER_READER_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Columns of a row of ``home_extras`` or ``user_reposts`` (an :class:`Entry`'s fields, in order).
ENTRY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tweet_id", "string"), ("author_id", "string"), ("created_at", "bigint"), ("version", "bigint"),
    ("text", "string"), ("profile_version", "bigint"), ("in_reply_to_tweet_id", "string"),
    ("in_reply_to_author_id", "string"), ("reposted_by", "string"), ("reposted_at", "bigint"),
    ("reposter_profile_version", "bigint"),
)
_ENTRY_SCHEMA = ", ".join(f"{name} {sql_type}" for name, sql_type in ENTRY_COLUMNS)


def _inserts(deltas: Iterable[Any], what: str) -> Iterable[Any]:
    """The deltas of a step from an empty stage: inserts only (anything else is a bug, not data)."""
    for d in deltas:
        if d.op != "insert":
            raise AssertionError(f"{what}: a {d.op!r} from an empty stage: {d!r}")
        yield d


def step_stage(messages: Iterable[Any], backfill_ts: int, pull_threshold: int | None = None,
               facts: Iterable[ListFact] = ()) -> StageResult:
    """The stage's one step over every message and the list stage's ``facts``, from an empty stage at
    ``backfill_ts - 1``."""
    return step_messages(AudienceStage(pull_threshold=pull_threshold, clock=backfill_ts - 1), messages,
                         tuple(facts))


class PerReaderFrames(NamedTuple):
    """The stage's outputs as frames, for the writes (spark_jobs/backfill/write.py) and the bootstrap."""

    extras: "DataFrame"
    user_reposts: "DataFrame"
    visible: "DataFrame"
    hidden: "DataFrame"
    pull_reposters: "DataFrame"
    inputs: "DataFrame"
    messages: int
    excluded: "DataFrame"

    def extras_rows(self) -> "DataFrame":
        """``timeline_id`` and the entry columns of every ``home_extras`` row."""
        return self.extras

    def user_repost_rows(self) -> "DataFrame":
        """The entry columns of every ``user_reposts`` row (its partition: ``reposted_by``)."""
        return self.user_reposts

    def visible_rows(self) -> "DataFrame":
        """``reader_id, user_id`` of every ``reader_visible`` row."""
        return self.visible

    def hidden_rows(self) -> "DataFrame":
        """``reader_id, user_id`` of every ``reader_hidden`` row."""
        return self.hidden

    def pull_reposter_rows(self) -> "DataFrame":
        """``reader_id, reposter_id`` of every element of ``home_timeline.pull_reposters``."""
        return self.pull_reposters

    def excluded_rows(self) -> "DataFrame":
        """``reader_id, user_id`` of every ``reader_excluded`` row: the stage's excluded sets (a
        reader sees the user, a member of one of its exclusive lists)."""
        return self.excluded


class StageRows(NamedTuple):
    """The stage's outputs from an empty stage as table rows (columns as the frames'), and its inputs."""

    extras: list[tuple]
    """``timeline_id`` and an entry's columns."""
    user_reposts: list[tuple]
    visible: list[tuple[str, str]]
    hidden: list[tuple[str, str]]
    pull_reposters: list[tuple[str, str]]
    """``reader_id, reposter_id``."""
    inputs: list[tuple[str, bytes]]
    """:data:`PER_READER_SCHEMA` rows."""
    excluded: list[tuple[str, str]]
    """``reader_id, user_id``."""


def stage_rows(done: StageResult) -> StageRows:
    """The rows of a step from an empty stage (inserts only)."""
    return StageRows(
        [(d.reader, *d.entry) for fanout in _inserts(done.extras, "home_extras") for d in fanout.rows()],
        [tuple(d.entry) for d in _inserts(done.own_reposts, "user_reposts")],
        [(d.reader, d.user) for d in _inserts(done.visible, "reader_visible")],
        [(d.reader, d.user) for d in _inserts(done.hidden, "reader_hidden")],
        [(d.reader, d.reposter) for d in _inserts(done.pull_readers, "pull_reposters")],
        [(identity_key(identity), pickle.dumps(value, protocol=5)) for identity, value, _ in done.inputs
         if value is not None],
        [(d.reader, d.user) for d in _inserts(done.excluded, "reader_excluded")])


def per_reader_stage(spark: "SparkSession", messages: "DataFrame", backfill_ts: int,
                     reposter_threshold: int | None = None, facts: Iterable[ListFact] = ()) -> PerReaderFrames:
    """The stage over ``messages`` (``step, dest, message``: the author keys' messages,
    :func:`~spark_jobs.backfill.states.messages_of`), collected to the driver, and the list stage's
    ``facts``."""
    collected = [pickle.loads(bytes(row["message"])) for row in messages.select("message").toLocalIterator()]
    rows = stage_rows(step_stage(collected, backfill_ts, reposter_threshold, facts))
    return PerReaderFrames(
        spark.createDataFrame(rows.extras, f"timeline_id string, {_ENTRY_SCHEMA}"),
        spark.createDataFrame(rows.user_reposts, _ENTRY_SCHEMA),
        spark.createDataFrame(rows.visible, "reader_id string, user_id string"),
        spark.createDataFrame(rows.hidden, "reader_id string, user_id string"),
        spark.createDataFrame(rows.pull_reposters, "reader_id string, reposter_id string"),
        spark.createDataFrame(rows.inputs, PER_READER_SCHEMA),
        len(collected),
        spark.createDataFrame(rows.excluded, "reader_id string, user_id string"))


def write_per_reader_inputs(frames: PerReaderFrames, path: Any) -> dict[str, int]:
    """Store the stage's inputs as parquet at ``path`` (:data:`PER_READER_SCHEMA`), for the stream
    it bootstraps; returns the summary's counts."""
    frames.inputs.write.mode("overwrite").parquet(str(path))
    return {"messages": frames.messages, "inputs": frames.inputs.count(), "extras_rows": frames.extras.count()}

