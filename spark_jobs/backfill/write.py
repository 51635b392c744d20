"""Stage ``write``: inbox rows, tweets (live and deleted), profile versions, author timelines, pull
follows, blocks in force, and the per-reader stage' rows (``home_extras``, ``user_reposts``,
``reader_visible``, ``reader_hidden``, ``home_timeline.pull_reposters``; the writer adds the
indexes by tweet of ``home_extras`` and ``user_reposts``) to Cassandra; and the lists' tables
(:data:`LIST_TABLES`: ``reader_excluded`` from the per-reader stage's excluded sets, ``lists`` from
the list stage's facts).

Rows are written in place from the executors (``mapInPandas``) through
:class:`~feed_service.store.cassandra_writer.CassandraWriter`, as the write rows of
:mod:`feed_service.core.rows`, every one ``USING TIMESTAMP backfill_ts`` (docs/backfill.md). Each
task reports back one row (table, task, rows, seconds); nothing else reaches the driver.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, TypeAlias

from feed_service.core.per_reader.list_stage import ListFact
from feed_service.core.per_reader.messages import ExcludedDelta, ExtrasDelta, HiddenDelta, PullReposterDelta, VisibleDelta
from feed_service.core.rows import (
    AuthorTimelineWrite,
    BlockWrite,
    Entry,
    ProfileRow,
    ProfileWrite,
    PullFollowWrite,
    TimelineWrite,
    TweetWrite,
)
from feed_service.security.roles import BACKFILL
from feed_service.settings import Settings
from spark_jobs.backfill.winners import Winners

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.backfill.lists import ListFrames
    from spark_jobs.backfill.per_reader import PerReaderFrames

Table: TypeAlias = Literal["timeline", "tweets", "profiles", "author_timeline", "pull_follows", "blocks",
                           "home_extras", "user_reposts", "reader_visible", "reader_hidden", "pull_reposters",
                           "reader_excluded", "lists"]
LIST_TABLES: tuple[Table, ...] = ("reader_excluded", "lists")
"""The lists' tables (docs/lists.md#in-the-engine): ``reader_excluded`` (the per-reader stage's
``ExcludedDelta`` inserts) and ``lists`` (the list stage's live facts, with their statics
``list_owner``, ``list_policy`` of the list's reader's inbox partition), written through
``ViewWriter.write(excluded=..., lists=...)``."""
WRITE_REPORT_SCHEMA = "table string, task int, rows bigint, seconds double"


def _ints(series: "pd.Series") -> list[int | None]:
    import pandas as pd

    return [None if pd.isna(v) else int(v) for v in series.tolist()]  # nulls: None, NaN or pd.NA


def _texts(series: "pd.Series") -> list[str | None]:
    import pandas as pd

    return [None if pd.isna(v) else v for v in series.tolist()]


def _optional(pdf: "pd.DataFrame", column: str, convert: Callable) -> list:
    return convert(pdf[column]) if column in pdf.columns else [None] * len(pdf)


def _entries(pdf: "pd.DataFrame") -> list[Entry]:
    """The frame's tweet columns as timeline entries (nulls, e.g. of a deleted tweet or of a
    non-reply's parent, as None; the reply and repost columns only where the frame has them)."""
    return list(map(Entry, pdf["tweet_id"].tolist(), pdf["author_id"].tolist(), _ints(pdf["created_at"]),
                    _ints(pdf["version"]), _texts(pdf["text"]), _ints(pdf["profile_version"]),
                    _optional(pdf, "in_reply_to_tweet_id", _texts), _optional(pdf, "in_reply_to_author_id", _texts),
                    _optional(pdf, "reposted_by", _texts), _optional(pdf, "reposted_at", _ints),
                    _optional(pdf, "reposter_profile_version", _ints)))


def timeline_writes(pdf: "pd.DataFrame", ts: int) -> list[TimelineWrite]:
    """Rows of ``home_timeline`` from join rows (:data:`~spark_jobs.backfill.join.TIMELINE_COLUMNS`)."""
    return [TimelineWrite("insert", timeline_id, entry, ts)
            for timeline_id, entry in zip(pdf["timeline_id"].tolist(), _entries(pdf))]


def tweet_writes(pdf: "pd.DataFrame", ts: int) -> list[TweetWrite]:
    """Rows of ``tweets`` from :func:`tweet_rows`: the winner of a live tweet, a delete of a deleted one."""
    return [TweetWrite(e.tweet_id, e.author_id, None if gone else e, ts)
            for e, gone in zip(_entries(pdf), pdf["deleted"].tolist())]


def profile_writes(pdf: "pd.DataFrame", ts: int) -> list[ProfileWrite]:
    """Rows of ``profiles`` from the winning profile versions."""
    profiles = map(ProfileRow._make, zip(pdf["user_id"].tolist(), _ints(pdf["version"]), _texts(pdf["display_name"]),
                                         _texts(pdf["avatar_url"]), _texts(pdf["bio"])))
    return [ProfileWrite(p, ts) for p in profiles]


def author_timeline_writes(pdf: "pd.DataFrame", ts: int) -> list[AuthorTimelineWrite]:
    """Rows of ``author_timeline`` from retained tweets."""
    return [AuthorTimelineWrite("insert", entry, ts) for entry in _entries(pdf)]


def pull_follow_writes(pdf: "pd.DataFrame", ts: int) -> list[PullFollowWrite]:
    """Rows of ``pull_follows`` from the active edges of pull authors."""
    return [PullFollowWrite("insert", follower, author, ts)
            for follower, author in zip(pdf["follower_id"].tolist(), pdf["author_id"].tolist())]


def block_writes(pdf: "pd.DataFrame", ts: int) -> list[BlockWrite]:
    """Rows of ``blocks`` from the block edges in force (an unblocked edge has no row to write)."""
    return [BlockWrite("insert", blocker, blocked, ts)
            for blocker, blocked in zip(pdf["blocker_id"].tolist(), pdf["blocked_id"].tolist())]


def extras_writes(pdf: "pd.DataFrame", ts: int) -> list[ExtrasDelta]:
    """Rows of ``home_extras`` from the per-reader stage's rows (``timeline_id`` and an entry's columns)."""
    return [ExtrasDelta("insert", reader, entry, ts) for reader, entry in zip(pdf["timeline_id"].tolist(), _entries(pdf))]


def user_repost_writes(pdf: "pd.DataFrame", ts: int) -> list[AuthorTimelineWrite]:
    """Rows of ``user_reposts`` from the per-reader stage's rows (an entry's columns; the partition is
    its ``reposted_by``)."""
    return [AuthorTimelineWrite("insert", entry, ts) for entry in _entries(pdf)]


def visible_writes(pdf: "pd.DataFrame", ts: int) -> list[VisibleDelta]:
    """Rows of ``reader_visible`` from the per-reader stage's ``reader_id, user_id``."""
    return [VisibleDelta("insert", reader, user, ts)
            for reader, user in zip(pdf["reader_id"].tolist(), pdf["user_id"].tolist())]


def hidden_writes(pdf: "pd.DataFrame", ts: int) -> list[HiddenDelta]:
    """Rows of ``reader_hidden`` from the per-reader stage's ``reader_id, user_id``."""
    return [HiddenDelta("insert", reader, user, ts)
            for reader, user in zip(pdf["reader_id"].tolist(), pdf["user_id"].tolist())]


def pull_reposter_writes(pdf: "pd.DataFrame", ts: int) -> list[PullReposterDelta]:
    """Elements of ``home_timeline.pull_reposters`` from the per-reader stage's ``reader_id, reposter_id``."""
    return [PullReposterDelta("insert", reader, reposter, ts)
            for reader, reposter in zip(pdf["reader_id"].tolist(), pdf["reposter_id"].tolist())]


def excluded_writes(pdf: "pd.DataFrame", ts: int) -> list[ExcludedDelta]:
    """Rows of ``reader_excluded`` from the per-reader stage's ``reader_id, user_id``."""
    return [ExcludedDelta("insert", reader, user, ts)
            for reader, user in zip(pdf["reader_id"].tolist(), pdf["user_id"].tolist())]


def list_fact_writes(pdf: "pd.DataFrame", ts: int) -> list[ListFact]:
    """Live lists' facts (the ``lists`` row and the statics of the list's reader's partition) from the
    list stage's rows (:data:`~spark_jobs.backfill.lists.LIST_FACT_SCHEMA`)."""
    return [ListFact(lid, owner, name, policy, bool(exclusive), ts)
            for lid, owner, name, policy, exclusive in zip(
                pdf["list_id"].tolist(), pdf["owner_id"].tolist(), _texts(pdf["name"]),
                pdf["replies_policy"].tolist(), pdf["exclusive"].tolist())]


def _write(writer: Any, table: Table, pdf: "pd.DataFrame", ts: int) -> None:
    if table == "timeline":
        writer.write(timeline=timeline_writes(pdf, ts))
    elif table == "tweets":
        writer.write(tweets=tweet_writes(pdf, ts))
    elif table == "profiles":
        writer.write(profiles=profile_writes(pdf, ts))
    elif table == "author_timeline":
        writer.write(author_timeline=author_timeline_writes(pdf, ts))
    elif table == "pull_follows":
        writer.write(pull_follows=pull_follow_writes(pdf, ts))
    elif table == "blocks":
        writer.write(blocks=block_writes(pdf, ts))
    elif table == "home_extras":
        writer.write(extras=extras_writes(pdf, ts))
    elif table == "user_reposts":
        writer.write(user_reposts=user_repost_writes(pdf, ts))
    elif table == "reader_visible":
        writer.write(visible=visible_writes(pdf, ts))
    elif table == "reader_hidden":
        writer.write(hidden=hidden_writes(pdf, ts))
    elif table == "pull_reposters":
        writer.write(pull_reposters=pull_reposter_writes(pdf, ts))
    elif table == "reader_excluded":
        writer.write(excluded=excluded_writes(pdf, ts))
    elif table == "lists":
        writer.write(lists=list_fact_writes(pdf, ts))
    else:
        raise ValueError(f"unknown table {table!r}")


def write_frames(settings: Settings, table: Table, ts: int, *, write: bool) -> Callable:
    """``mapInPandas`` function writing one table's rows from an executor; yields one report row per task.

    ``table``: ``timeline`` (join rows), ``tweets`` (:func:`tweet_rows`), ``profiles`` (winning
    profiles), ``author_timeline``, ``pull_follows`` (:mod:`~spark_jobs.backfill.join`),
    ``blocks`` (blocks in force), or ``home_extras``, ``user_reposts``, ``reader_visible``,
    ``reader_hidden``, ``pull_reposters``, ``reader_excluded`` (the per-reader stage' rows,
    :mod:`~spark_jobs.backfill.per_reader`), or ``lists`` (the list stage's facts,
    :mod:`~spark_jobs.backfill.lists`). With ``write`` False rows are only counted (``--no-write``).
    """

    def fn(frames: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd
        from pyspark import TaskContext

        writer = None
        if write:
            from spark_jobs.cassandra_writers import writer_for

            writer = writer_for(settings.as_role(BACKFILL))
        started, count = time.perf_counter(), 0
        for pdf in frames:
            if pdf.empty:
                continue
            count += len(pdf)
            if writer is not None:
                _write(writer, table, pdf, ts)
        ctx = TaskContext.get()
        yield pd.DataFrame({"table": [table], "task": [ctx.partitionId() if ctx else 0], "rows": [count],
                            "seconds": [time.perf_counter() - started]})

    return fn


def tweet_rows(winners: Winners) -> "DataFrame":
    """Rows of the tweets table: every live tweet's winner, and a delete of every deleted tweet."""
    from pyspark.sql import functions as F

    live = winners.live_tweets.select("tweet_id", "author_id", "created_at", "version", "text", "profile_version",
                                      "in_reply_to_tweet_id", "in_reply_to_author_id", F.lit(False).alias("deleted"))
    gone = winners.deleted_tweets.select(
        "tweet_id", "author_id", F.lit(None).cast("bigint").alias("created_at"),
        F.lit(None).cast("bigint").alias("version"), F.lit(None).cast("string").alias("text"),
        F.lit(None).cast("bigint").alias("profile_version"), F.lit(None).cast("string").alias("in_reply_to_tweet_id"),
        F.lit(None).cast("string").alias("in_reply_to_author_id"), F.lit(True).alias("deleted"))
    return live.unionByName(gone)


def list_table_frames(per_reader: "PerReaderFrames", lists: "ListFrames") -> list[tuple[Table, "DataFrame"]]:
    """Each table of :data:`LIST_TABLES` with the frame of its rows: ``reader_excluded`` (``reader_id,
    user_id``) and ``lists`` (:data:`~spark_jobs.backfill.lists.LIST_FACT_SCHEMA`)."""
    return [("reader_excluded", per_reader.excluded_rows()), ("lists", lists.facts)]


def tables_to_write(spark: "SparkSession", timelines: "DataFrame", winners: Winners, *, inbox_cap: int,
                    pull_threshold: int, per_reader: "PerReaderFrames | None" = None,
                    lists: "ListFrames | None" = None) -> list[tuple[Table, "DataFrame"]]:
    """Each table with the frame of its rows, in write order; the per-reader tables last, when
    ``per_reader`` (the steps' outputs) is given, and with ``lists`` (the list stage's outputs) too the
    lists' tables (:data:`LIST_TABLES`)."""
    from spark_jobs.backfill.join import author_timeline_rows, pull_follow_rows

    # Round robin: the join's partitions follow author keys, so a celebrity's fan-out would leave
    # one writer working alone (seen in bench/bench_backfill.py).
    writers = max(2, spark.sparkContext.defaultParallelism)
    tables: list[tuple[Table, "DataFrame"]] = [
        ("timeline", timelines.repartition(writers)), ("tweets", tweet_rows(winners)),
        ("profiles", winners.profiles), ("author_timeline", author_timeline_rows(winners, inbox_cap)),
        ("pull_follows", pull_follow_rows(winners, pull_threshold).repartition(writers)),
        ("blocks", winners.blocks_in_force())]
    if per_reader is not None:
        # The steps' partitions follow their keys: a reader with many extras is one task's, as above.
        tables += [("home_extras", per_reader.extras_rows().repartition(writers)),
                   ("user_reposts", per_reader.user_repost_rows()),
                   ("reader_visible", per_reader.visible_rows().repartition(writers)),
                   ("reader_hidden", per_reader.hidden_rows().repartition(writers)),
                   ("pull_reposters", per_reader.pull_reposter_rows().repartition(writers))]
        if lists is not None:
            tables += list_table_frames(per_reader, lists)
    return tables


@dataclass(frozen=True, slots=True)
class TableReport:
    """One table's write: rows in total and per task, and the wall time of its Spark job."""

    table: Table
    rows: int
    seconds: float
    task_rows: tuple[tuple[int, int], ...]

    def describe(self, *, written: bool) -> str:
        rate = self.rows / self.seconds if self.seconds else 0
        tasks = ", ".join(f"task {task}: {rows}" for task, rows in self.task_rows)
        return (f"{self.table}: {self.rows} rows {'written' if written else 'counted'} in {self.seconds:.1f}s"
                f" ({rate:,.0f}/s) [{tasks}]")


def write_table(settings: Settings, table: Table, df: "DataFrame", ts: int, *, write: bool) -> TableReport:
    """Write (or with ``write`` False only count) one table's rows from the executors.

    A write Cassandra refused for the backfill role's grants raises
    :class:`~feed_service.errors.StorePermissionDenied` (role, permission, table): the backfill stops
    with it (exit code 2), as it is no failure a rerun mends (docs/operations.md).
    """
    from spark_jobs.fatal import fatal_error

    t0 = time.monotonic()
    try:
        reports = df.mapInPandas(write_frames(settings, table, ts, write=write), WRITE_REPORT_SCHEMA).collect()
    except Exception as exc:  # noqa: BLE001 - a Spark failure: its text says whether it is fatal
        fatal = fatal_error(exc)
        if fatal is None:
            raise
        raise fatal from None
    elapsed = time.monotonic() - t0
    return TableReport(table, sum(r.rows for r in reports), elapsed,
                       tuple(sorted((r.task, r.rows) for r in reports)))
