"""Stage ``join``: each author's retained tweets joined with the active follow edges.

``retained tweets ⋈ active follows`` on ``author_id = followee_id`` is exactly the row set the
stream's engine writes: each author key fans its newest ``inbox_cap`` live tweets out to its active
followers (docs/backfill.md). Distributed; nothing but counts reaches the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.backfill.winners import Winners

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Columns of a timeline row (the join's output and the writer's input, minus op and ts).
TIMELINE_COLUMNS = ("timeline_id", "tweet_id", "author_id", "created_at", "version", "text", "profile_version")


def retained_tweets(live_tweets: "DataFrame", inbox_cap: int) -> "DataFrame":
    """Each author's newest ``inbox_cap`` live tweets by (created_at, tweet_id): what the engine retains."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    newest = Window.partitionBy("author_id").orderBy(F.col("created_at").desc(), F.col("tweet_id").desc())
    return live_tweets.withColumn("rank", F.row_number().over(newest)).where(F.col("rank") <= inbox_cap).drop("rank")


def join_timelines_batch(winners: Winners, inbox_cap: int) -> "DataFrame":
    """``retained tweets ⋈ active follows`` on author = followee: one row per (timeline, tweet).

    The same rows the stream's engine writes (each author key fans out its retained tweets to its
    active followers), so a timeline read newest-first and cut at ``inbox_cap`` is the reference's.
    """
    from pyspark.sql import functions as F

    active = winners.active_edges().select(F.col("follower_id").alias("timeline_id"),
                                           F.col("followee_id").alias("author_id"))
    return retained_tweets(winners.live_tweets, inbox_cap).join(active, "author_id").select(*TIMELINE_COLUMNS)


def count_timelines(winners: Winners, inbox_cap: int) -> int:
    """Non-empty timelines: followers of at least one author with a retained tweet."""
    from pyspark.sql import functions as F

    authors = retained_tweets(winners.live_tweets, inbox_cap).select(F.col("author_id").alias("followee_id")).distinct()
    return winners.active_edges().join(authors, "followee_id").select("follower_id").distinct().count()
