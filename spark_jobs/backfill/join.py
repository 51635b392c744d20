"""Stage ``join``: the hybrid layout of the view, the rows the stream's engine would hold.

- inboxes: ``retained tweets ⋈ visible follows`` on ``author_id = followee_id``, for push authors
  only (each push author key fans its retained live tweets out to its visible followers, a reply
  to another user X only to X), then each inbox's newest ``inbox_cap`` rows: the stream trims
  stored inboxes (docs/trimming.md), so a rebuilt keyspace starts within that bound;
- author timelines: every author's retained tweets (the newest ``inbox_cap`` of each class);
- pull follows: the visible follow edges of pull authors (at least ``pull_threshold`` active
  followers), which readers merge in (docs/fan-out.md).

A visible follow is an active one whose pair (follower, followee) no block or mute in force hides
(:meth:`~spark_jobs.backfill.winners.Winners.visible_edges`): the view is an antijoin
(docs/backfill.md, "Blocks and mutes").

Distributed; nothing but counts reaches the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.backfill.winners import Winners

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Columns of a timeline row (the join's output and the writer's input, minus op and ts).
TIMELINE_COLUMNS = ("timeline_id", "tweet_id", "author_id", "created_at", "version", "text", "profile_version",
                    "in_reply_to_tweet_id", "in_reply_to_author_id")


# The rules below restate feed_service/core/rules.py as columns; tests/unit/test_rules_sql.py
# evaluates each against the Python rule on the same rows.


def reply_class() -> "Column":
    """:func:`feed_service.core.rules.reply_class` of ``author_id, in_reply_to_author_id``: '' for a
    plain tweet (no reply, or a reply to its own author), else the user it replies to ('' is no user
    id: ids are never empty). Also a tweet's retention class."""
    from pyspark.sql import functions as F

    parent = F.col("in_reply_to_author_id")
    return F.when(parent.isNull() | (parent == F.col("author_id")), F.lit("")).otherwise(parent)


def shown_in_inbox(reader: str = "timeline_id") -> "Column":
    """:func:`feed_service.core.rules.shown_in_inbox` of ``author_id, in_reply_to_author_id`` for the
    reader in column ``reader``: a plain tweet, or a reply to the reader."""
    from pyspark.sql import functions as F

    cls = reply_class()
    return (cls == "") | (cls == F.col(reader))


def is_pull_author(active_followers: str, pull_threshold: int) -> "Column":
    """:func:`feed_service.core.rules.is_pull_author` of the count in column ``active_followers``."""
    from pyspark.sql import functions as F

    return F.col(active_followers) >= F.lit(pull_threshold)


def retained_tweets(live_tweets: "DataFrame", inbox_cap: int) -> "DataFrame":
    """Each author's newest ``inbox_cap`` live tweets of each class by (created_at, tweet_id), what the
    engine retains: its plain tweets, and its replies to each other user (docs/reposts-and-replies.md,
    retention). An author without replies keeps its newest ``inbox_cap``, as before replies existed."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    newest = (Window.partitionBy("author_id", "reply_class")
              .orderBy(F.col("created_at").desc(), F.col("tweet_id").desc()))
    return (live_tweets.withColumn("reply_class", reply_class()).withColumn("rank", F.row_number().over(newest))
            .where(F.col("rank") <= inbox_cap).drop("rank", "reply_class"))


def direct_rows(tweets: "DataFrame", visible: "DataFrame") -> "DataFrame":
    """``tweets ⋈ visible`` (``timeline_id, author_id``) on the author, keeping what the author key
    writes to an inbox: a plain tweet to every visible follower, a reply to another user X only to
    X's own inbox (every other follower's is the per-reader stage's decision, ``home_extras``)."""
    return tweets.join(visible, "author_id").where(shown_in_inbox("timeline_id"))


def pull_authors(winners: Winners, pull_threshold: int) -> "DataFrame":
    """``author_id`` of every author with at least ``pull_threshold`` active followers."""
    from pyspark.sql import functions as F

    return (winners.active_edges().groupBy(F.col("followee_id").alias("author_id")).count()
            .where(is_pull_author("count", pull_threshold)).select("author_id"))


def join_timelines_batch(winners: Winners, inbox_cap: int, pull_threshold: int) -> "DataFrame":
    """Inbox rows: ``retained tweets ⋈ visible follows`` of push authors, one row per (timeline, tweet),
    at most the newest ``inbox_cap`` per timeline.

    The rows the stream's engine writes, trimmed as the stream trims; merged with the pull authors'
    timelines, a timeline read newest-first and cut at ``inbox_cap`` is the reference's (an inbox row
    beyond the inbox's own cap-th is beyond the merged cap-th too).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pushed = retained_tweets(winners.live_tweets, inbox_cap).join(pull_authors(winners, pull_threshold), "author_id",
                                                                  "left_anti")
    newest = Window.partitionBy("timeline_id").orderBy(F.col("created_at").desc(), F.col("tweet_id").desc(),
                                                       F.col("author_id").desc())
    return (direct_rows(pushed, _visible(winners)).withColumn("rank", F.row_number().over(newest))
            .where(F.col("rank") <= inbox_cap).select(*TIMELINE_COLUMNS))


def _visible(winners: Winners) -> "DataFrame":
    from pyspark.sql import functions as F

    return winners.visible_edges().select(F.col("follower_id").alias("timeline_id"),
                                          F.col("followee_id").alias("author_id"))


def author_timeline_rows(winners: Winners, inbox_cap: int) -> "DataFrame":
    """Rows of every author's own timeline: its retained tweets."""
    return retained_tweets(winners.live_tweets, inbox_cap).select(*TIMELINE_COLUMNS[1:])


def pull_follow_rows(winners: Winners, pull_threshold: int) -> "DataFrame":
    """``follower_id, author_id`` of every visible follow edge of a pull author."""
    from pyspark.sql import functions as F

    edges = winners.visible_edges().select("follower_id", F.col("followee_id").alias("author_id"))
    return edges.join(pull_authors(winners, pull_threshold), "author_id").select("follower_id", "author_id")


def count_timelines(winners: Winners, inbox_cap: int) -> int:
    """Timelines the author keys reach: visible followers of an author (push or pull) with a retained
    tweet they see directly (plain, or a reply to them); what only the per-reader stage brings
    (``home_extras``) is counted in its own rows."""
    return direct_rows(retained_tweets(winners.live_tweets, inbox_cap), _visible(winners)).select(
        "timeline_id").distinct().count()
