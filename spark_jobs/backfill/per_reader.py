"""Stage ``per_reader``: the reposter and reader steps over every author key's messages, as one batch.

The author keys' step (stage ``states``) also returns the messages each key owes the per-reader
steps (docs/reposts-and-replies.md): relations, audience deltas, conditional replies, repost edges
and reposted tweets. Here, as in the stream's sink (spark_jobs/stream/per_reader.py), the reposter
step runs on the messages keyed by reposter, then the reader step on the messages keyed by reader
and the reposter step's candidates, each key once (``groupBy(dest).applyInPandas``), from an empty
state whose clock starts at ``backfill_ts - 1``, so that every row is stamped ``backfill_ts`` like
the author keys' rows. Their outputs are rows of ``user_reposts`` and, with pull reposters
(``FEED_PULL_REPOSTERS``), ``home_timeline.pull_reposters`` (reposter), ``home_extras``,
``reader_visible`` and ``reader_hidden`` (reader), and each key's final state, which the stream bootstrapped from this
backfill starts from (:data:`~spark_jobs.bootstrap.PER_READER_DIR`).

The messages are assignments versioned by their sender's clock and the steps are pure functions of
their state and input, so one batch of all the final messages ends where the stream ends after
any batching of the same history.
"""

from __future__ import annotations

import pickle
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple

from feed_service.core.per_reader.codec import encode_reader_state, encode_reposter_state
from feed_service.core.per_reader.messages import (
    READER_STAGE,
    REPOSTER_STAGE,
    AudienceDelta,
    ConditionalReply,
    Relation,
    RepostCandidate,
    RepostedTweet,
    RepostEdge,
)
from feed_service.core.rows import Entry
from spark_jobs.bootstrap import PER_READER_SCHEMA

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

#: Columns of a row of ``home_extras`` or ``user_reposts`` (an :class:`Entry`'s fields, in order).
ENTRY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tweet_id", "string"), ("author_id", "string"), ("created_at", "bigint"), ("version", "bigint"),
    ("text", "string"), ("profile_version", "bigint"), ("in_reply_to_tweet_id", "string"),
    ("in_reply_to_author_id", "string"), ("reposted_by", "string"), ("reposted_at", "bigint"),
    ("reposter_profile_version", "bigint"),
)
#: What a step's key emits (:func:`reposter_outputs`, :func:`reader_outputs`), one ``kind`` per row:
#: ``state`` (``key``, ``blob`` = its encoded state), ``candidate`` (``key`` = the reader it goes to,
#: ``blob`` = the pickled :class:`RepostCandidate`), ``row`` (``key`` = the reposter or reader whose
#: table row it is, the entry columns), ``visible`` (``key`` = the reader, ``user_id`` one it sees),
#: ``hidden`` (``key`` = the reader, ``user_id`` one hidden from it) or ``pull_reposter`` (``key`` =
#: the pull reposter, ``user_id`` a reader who merges it in).
STEP_OUTPUT_FIELDS: tuple[tuple[str, str], ...] = (
    ("kind", "string"), ("key", "string"), ("blob", "binary"), *ENTRY_COLUMNS, ("user_id", "string"))
STEP_OUTPUT_SCHEMA = ", ".join(f"{name} {sql_type}" for name, sql_type in STEP_OUTPUT_FIELDS)

_NO_ENTRY = (None,) * len(ENTRY_COLUMNS)


def _state_row(key: str, blob: bytes) -> tuple:
    return ("state", key, blob, *_NO_ENTRY, None)


def _entry_row(key: str, entry: Entry) -> tuple:
    return ("row", key, None, *entry, None)


def _inserts(deltas: Iterable[Any], what: str) -> Iterable[Any]:
    """The deltas of a step from an empty state: inserts only (anything else is a bug, not data)."""
    for d in deltas:
        if d.op != "insert":
            raise AssertionError(f"{what}: a {d.op!r} from an empty state: {d!r}")
        yield d


def reposter_outputs(key: str, messages: Iterable[Any], backfill_ts: int,
                     pull_threshold: int | None = None) -> list[tuple]:
    """One reposter's step over all its messages from an empty state (clock ``backfill_ts - 1``):
    its state, its candidates to readers, its rows of ``user_reposts`` and, a pull reposter at
    ``pull_threshold`` (None: none is), the readers who merge it in (:data:`STEP_OUTPUT_FIELDS`)."""
    from feed_service.core.per_reader.reposter_step import ReposterState, reposter_step

    messages = list(messages)
    done = reposter_step(key, ReposterState(clock=backfill_ts - 1),
                         [m for m in messages if type(m) is AudienceDelta],
                         [m for m in messages if type(m) is RepostEdge],
                         [m for m in messages if type(m) is RepostedTweet], pull_threshold=pull_threshold)
    rows = [_state_row(key, encode_reposter_state(replace(done.state, clock=backfill_ts)))]
    rows.extend(("candidate", c.reader, pickle.dumps(c, protocol=5), *_NO_ENTRY, None) for c in done.candidates)
    rows.extend(_entry_row(key, d.entry) for d in _inserts(done.own_timeline, f"reposter {key}"))
    rows.extend(("pull_reposter", key, None, *_NO_ENTRY, d.reader)
                for d in _inserts(done.pull_readers, f"reposter {key}"))
    return rows


def reader_outputs(key: str, messages: Iterable[Any], backfill_ts: int) -> list[tuple]:
    """One reader's step over all its messages (relations, conditional replies, candidates) from an
    empty state (clock ``backfill_ts - 1``): its state, its rows of ``home_extras``,
    ``reader_visible`` and ``reader_hidden`` (:data:`STEP_OUTPUT_FIELDS`)."""
    from feed_service.core.per_reader.reader_step import ReaderState, reader_step

    messages = list(messages)
    done = reader_step(key, ReaderState({}, {}, {}, {}, backfill_ts - 1),
                       [m for m in messages if type(m) is Relation],
                       [m for m in messages if type(m) is ConditionalReply],
                       [m for m in messages if type(m) is RepostCandidate])
    rows = [_state_row(key, encode_reader_state(replace(done.state, clock=backfill_ts)))]
    rows.extend(_entry_row(key, d.entry) for d in _inserts(done.extras, f"reader {key}"))
    rows.extend(("visible", key, None, *_NO_ENTRY, v.user) for v in _inserts(done.visible, f"reader {key}"))
    rows.extend(("hidden", key, None, *_NO_ENTRY, h.user) for h in _inserts(done.hidden, f"reader {key}"))
    return rows


def output_frame(rows: list[tuple]) -> "pd.DataFrame":
    """Rows of :data:`STEP_OUTPUT_FIELDS` as the frame ``applyInPandas`` ships back (object columns:
    a nullable integer column stays integers and None, never floats)."""
    import pandas as pd

    columns = [name for name, _ in STEP_OUTPUT_FIELDS]
    return pd.DataFrame({name: pd.Series([r[i] for r in rows], dtype=object) for i, name in enumerate(columns)})


def _step_fn(step: str, backfill_ts: int, reposter_threshold: int | None = None):
    """The ``applyInPandas`` function of ``step``: one destination key's messages (``dest``,
    ``message``) -> its outputs."""

    def fn(pdf: "pd.DataFrame") -> "pd.DataFrame":
        key = str(pdf["dest"].iloc[0])
        messages = (pickle.loads(bytes(b)) for b in pdf["message"])
        if step == REPOSTER_STAGE:
            return output_frame(reposter_outputs(key, messages, backfill_ts, reposter_threshold))
        return output_frame(reader_outputs(key, messages, backfill_ts))

    return fn


class PerReaderFrames(NamedTuple):
    """The two steps' outputs (:data:`STEP_OUTPUT_SCHEMA`); the job persists both, each is read several times."""

    reposters: "DataFrame"
    readers: "DataFrame"

    def extras_rows(self) -> "DataFrame":
        """``timeline_id`` and the entry columns of every ``home_extras`` row."""
        from pyspark.sql import functions as F

        return self.readers.where(F.col("kind") == "row").select(
            F.col("key").alias("timeline_id"), *(name for name, _ in ENTRY_COLUMNS))

    def user_repost_rows(self) -> "DataFrame":
        """The entry columns of every ``user_reposts`` row (its partition: ``reposted_by``)."""
        from pyspark.sql import functions as F

        return self.reposters.where(F.col("kind") == "row").select(*(name for name, _ in ENTRY_COLUMNS))

    def visible_rows(self) -> "DataFrame":
        """``reader_id, user_id`` of every ``reader_visible`` row."""
        from pyspark.sql import functions as F

        return self.readers.where(F.col("kind") == "visible").select(F.col("key").alias("reader_id"), "user_id")

    def hidden_rows(self) -> "DataFrame":
        """``reader_id, user_id`` of every ``reader_hidden`` row."""
        from pyspark.sql import functions as F

        return self.readers.where(F.col("kind") == "hidden").select(F.col("key").alias("reader_id"), "user_id")

    def pull_reposter_rows(self) -> "DataFrame":
        """``reader_id, reposter_id`` of every element of ``home_timeline.pull_reposters``."""
        from pyspark.sql import functions as F

        return self.reposters.where(F.col("kind") == "pull_reposter").select(
            F.col("user_id").alias("reader_id"), F.col("key").alias("reposter_id"))

    def states(self) -> "DataFrame":
        """:data:`PER_READER_SCHEMA`: every reposter's and reader's final state."""
        from pyspark.sql import functions as F

        def of(df: "DataFrame", step: str) -> "DataFrame":
            return df.where(F.col("kind") == "state").select(F.lit(step).alias("step"), "key",
                                                             F.col("blob").alias("state"))

        return of(self.reposters, REPOSTER_STAGE).unionByName(of(self.readers, READER_STAGE))

    def candidates(self) -> "DataFrame":
        """The reposter step's candidates (for the summary's count)."""
        from pyspark.sql import functions as F

        return self.reposters.where(F.col("kind") == "candidate")


def per_reader_steps(messages: "DataFrame", backfill_ts: int, keep: Any = lambda df: df,
                     reposter_threshold: int | None = None) -> PerReaderFrames:
    """The reposter step, then the reader step, over ``messages`` (``step, dest, message``: the
    author keys' messages, :func:`~spark_jobs.backfill.states.messages_of`); ``keep`` persists a
    step's output (the reader step reads the reposter step's candidates, the writes read both).
    ``reposter_threshold``: the reposter step's pull threshold (``Settings.reposter_threshold``)."""
    from pyspark.sql import functions as F

    to_reposters = messages.where(F.col("step") == REPOSTER_STAGE).select("dest", "message")
    reposters = keep(to_reposters.groupBy("dest").applyInPandas(
        _step_fn(REPOSTER_STAGE, backfill_ts, reposter_threshold), STEP_OUTPUT_SCHEMA))
    candidates = reposters.where(F.col("kind") == "candidate").select(F.col("key").alias("dest"),
                                                                      F.col("blob").alias("message"))
    to_readers = messages.where(F.col("step") == READER_STAGE).select("dest", "message").unionByName(candidates)
    readers = keep(to_readers.groupBy("dest").applyInPandas(_step_fn(READER_STAGE, backfill_ts), STEP_OUTPUT_SCHEMA))
    return PerReaderFrames(reposters, readers)


def write_per_reader_states(spark: Any, messages: "DataFrame", frames: PerReaderFrames, path: Any) -> dict[str, int]:
    """Store every reposter's and reader's state as parquet at ``path`` (:data:`PER_READER_SCHEMA`);
    returns the summary's counts: messages from the author keys, candidates, keys of each step."""
    frames.states().write.mode("overwrite").parquet(str(path))
    keys = {row["step"]: row["count"] for row in spark.read.schema(PER_READER_SCHEMA).parquet(str(path))
            .groupBy("step").count().collect()}
    return {"messages": messages.count(), "candidates": frames.candidates().count(),
            "reposter_keys": keys.get(REPOSTER_STAGE, 0), "reader_keys": keys.get(READER_STAGE, 0)}
