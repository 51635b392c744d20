"""The backfill's write stage without Spark or Cassandra: frames as the executors get them (nulls as
None or NaN) become the write rows of ``feed_service.core.rows``, which ``CassandraWriter`` binds."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

import cassandra.concurrent
import spark_jobs.cassandra_writers
from feed_service.core.per_reader.messages import ExtrasDelta, VisibleDelta
from feed_service.core.rows import (
    AuthorTimelineWrite, BlockWrite, Entry, ProfileRow, ProfileWrite, TimelineWrite, TweetWrite,
)
from feed_service.settings import Settings
from feed_service.store.cassandra_writer import CassandraWriter
from spark_jobs.backfill.write import (
    block_writes, extras_writes, profile_writes, timeline_writes, tweet_writes, user_repost_writes, visible_writes,
    write_frames,
)

TS = 1_700_000_000_000_000
TIMELINE = pd.DataFrame({"timeline_id": ["ann", "cat"], "tweet_id": ["t1", "t2"], "author_id": ["bob", "bob"],
                         "created_at": [10, 20], "version": [1, 2], "text": ["hi", "yo"], "profile_version": [3, 3]})
# A deleted tweet's columns are null; in a pandas frame a null bigint arrives as NaN (float64 column).
TWEETS = pd.DataFrame({"tweet_id": ["t1", "t9"], "author_id": ["bob", "bob"], "created_at": [10, math.nan],
                       "version": [1, math.nan], "text": ["hi", None], "profile_version": [3, math.nan],
                       "deleted": [False, True]})
PROFILES = pd.DataFrame({"user_id": ["bob", "bob"], "version": [1, 2], "display_name": ["Bob", "Bobby"],
                         "avatar_url": ["https://a", None], "bio": [math.nan, "hello"]})
BLOCKS = pd.DataFrame({"blocker_id": ["bob", "cat"], "blocked_id": ["ann", "bob"]})  # blocks in force
# The per-reader steps' rows: a reply shown to a reader, a repost entry; nulls as pandas gives them.
ENTRY = {"tweet_id": ["t3", "t4"], "author_id": ["bob", "dan"], "created_at": [30, 40], "version": [1, 1],
         "text": ["re", "x"], "profile_version": [3, 1], "in_reply_to_tweet_id": ["t0", None],
         "in_reply_to_author_id": ["cat", None], "reposted_by": [None, "bob"], "reposted_at": [pd.NA, 50],
         "reposter_profile_version": [pd.NA, 2]}
EXTRAS = pd.DataFrame({"timeline_id": ["ann", "ann"], **ENTRY}).astype({"reposted_at": "Int64",
                                                                         "reposter_profile_version": "Int64"})
USER_REPOSTS = pd.DataFrame({k: v[1:] for k, v in ENTRY.items()})
VISIBLE = pd.DataFrame({"reader_id": ["ann", "ann"], "user_id": ["bob", "cat"]})
REPLY = Entry("t3", "bob", 30, 1, "re", 3, "t0", "cat")
REPOST = Entry("t4", "dan", 40, 1, "x", 1, None, None, "bob", 50, 2)


def test_frames_become_write_rows() -> None:
    assert timeline_writes(TIMELINE, TS) == [
        TimelineWrite("insert", "ann", Entry("t1", "bob", 10, 1, "hi", 3), TS),
        TimelineWrite("insert", "cat", Entry("t2", "bob", 20, 2, "yo", 3), TS),
    ]
    tweets = tweet_writes(TWEETS, TS)
    assert tweets == [TweetWrite("t1", "bob", Entry("t1", "bob", 10, 1, "hi", 3), TS), TweetWrite("t9", "bob", None, TS)]
    assert type(tweets[0].entry.created_at) is int  # not numpy, not float: the driver binds bigint
    assert profile_writes(PROFILES, TS) == [ProfileWrite(ProfileRow("bob", 1, "Bob", "https://a", None), TS),
                                            ProfileWrite(ProfileRow("bob", 2, "Bobby", None, "hello"), TS)]
    assert block_writes(BLOCKS, TS) == [BlockWrite("insert", "bob", "ann", TS), BlockWrite("insert", "cat", "bob", TS)]
    replies = TIMELINE.assign(in_reply_to_tweet_id=[None, "t1"], in_reply_to_author_id=[None, "ann"])
    assert [w.entry for w in timeline_writes(replies, TS)] == [Entry("t1", "bob", 10, 1, "hi", 3),
                                                                Entry("t2", "bob", 20, 2, "yo", 3, "t1", "ann")]


def test_per_reader_frames_become_write_rows() -> None:
    assert extras_writes(EXTRAS, TS) == [ExtrasDelta("insert", "ann", REPLY, TS), ExtrasDelta("insert", "ann", REPOST, TS)]
    assert user_repost_writes(USER_REPOSTS, TS) == [AuthorTimelineWrite("insert", REPOST, TS)]
    assert visible_writes(VISIBLE, TS) == [VisibleDelta("insert", "ann", "bob", TS), VisibleDelta("insert", "ann", "cat", TS)]
    assert type(extras_writes(EXTRAS, TS)[1].entry.reposted_at) is int


class FakeSession:
    """Prepares a statement as its CQL text; executions are captured by the patched execute_concurrent."""

    def prepare(self, cql: str) -> str:
        return cql


class Result:
    success, result_or_exc = True, None


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple]]:
    calls: list[tuple[str, tuple]] = []

    def execute(session: Any, statements: Any, **_: Any) -> list[Result]:
        statements = list(statements)
        calls.extend(statements)
        return [Result() for _ in statements]

    writer = CassandraWriter(FakeSession(), "ks", batch_rows=1)
    monkeypatch.setattr(cassandra.concurrent, "execute_concurrent", execute)
    monkeypatch.setattr(spark_jobs.cassandra_writers, "writer_for", lambda settings: writer)
    return calls


@pytest.mark.parametrize("table, frame, want", [
    ("timeline", TIMELINE, [("INSERT INTO ks.home_timeline", ("ann", 10, "t1", "bob", 1, "hi", 3, "", "", TS)),
                            ("INSERT INTO ks.home_timeline", ("cat", 20, "t2", "bob", 2, "yo", 3, "", "", TS))]),
    ("tweets", TWEETS, [("INSERT INTO ks.tweets", ("t1", "bob", 10, 1, "hi", 3, "", "", TS)),
                        ("DELETE FROM ks.tweets", (TS, "t9"))]),
    ("profiles", PROFILES, [("INSERT INTO ks.profiles", ("bob", 1, "Bob", "https://a", None, TS)),
                            ("INSERT INTO ks.profiles", ("bob", 2, "Bobby", None, "hello", TS))]),
    ("blocks", BLOCKS, [("INSERT INTO ks.blocks", ("bob", "ann", TS)), ("INSERT INTO ks.blocks", ("cat", "bob", TS))]),
    ("reader_visible", VISIBLE, [("INSERT INTO ks.reader_visible", ("ann", "bob", TS)),
                                 ("INSERT INTO ks.reader_visible", ("ann", "cat", TS))]),
])
def test_executors_write_through_the_cassandra_writer(executed: list, table: str, frame: pd.DataFrame,
                                                      want: list) -> None:
    reports = list(write_frames(Settings(), table, TS, write=True)(iter([frame, frame.iloc[:0]])))
    assert [(cql.split(" (")[0].split(" USING")[0], values) for cql, values in executed] == want
    assert reports[0].to_dict("records") == [{"table": table, "task": 0, "rows": 2,
                                              "seconds": reports[0]["seconds"][0]}]


def test_no_write_only_counts(executed: list) -> None:
    reports = list(write_frames(Settings(), "timeline", TS, write=False)(iter([TIMELINE])))
    assert executed == [] and int(reports[0]["rows"][0]) == 2


# --- a missing grant: a deployment error, named, not a WriteFailed to retry (docs/operations.md) ----


REFUSAL = 'Error from server: code=2100 [Unauthorized] message="User feed_backfill has no MODIFY permission on <table ks.tweets> or any of its parents"'


def test_a_grant_refusal_is_a_permission_error_naming_role_permission_and_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from cassandra import Unauthorized

    from feed_service.errors import StorePermissionDenied, WriteFailed

    class Failed:
        success = False

        def __init__(self, exc: Exception) -> None:
            self.result_or_exc = exc

    failures: list[Exception] = []
    monkeypatch.setattr(cassandra.concurrent, "execute_concurrent",
                        lambda session, statements, **_: [Failed(f) for f in failures] + [Result() for _ in statements])
    writer = CassandraWriter(FakeSession(), "ks", batch_rows=1)
    failures[:] = [TimeoutError("slow"), Unauthorized(REFUSAL)]
    with pytest.raises(StorePermissionDenied, match=r"^cassandra role feed_backfill lacks MODIFY on ks\.tweets: "):
        writer.write(tweets=tweet_writes(TWEETS, TS))
    failures[:] = [TimeoutError("slow")]
    with pytest.raises(WriteFailed):  # an outage stays retryable
        writer.write(tweets=tweet_writes(TWEETS, TS))


class FailingFrame:
    """A frame whose Spark job fails with ``text`` (what a failed executor task's Python error reads like)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def mapInPandas(self, *_: Any) -> "FailingFrame":  # noqa: N802 - Spark's name
        return self

    def collect(self) -> list:
        raise RuntimeError(self.text)


def test_the_backfill_stops_with_the_permission_error_a_task_failed_with() -> None:
    from feed_service.errors import StorePermissionDenied
    from spark_jobs.backfill.write import write_table

    text = ("Job aborted due to stage failure: Task 0 in stage 9.0 failed: org.apache.spark.api.python.PythonException:"
            " Traceback (most recent call last):\n  File \"write.py\", line 1, in fn\n"
            "feed_service.errors.StorePermissionDenied: cassandra role feed_backfill lacks MODIFY on ks.tweets:"
            " a deployment error, not retried\n\n\tat org.apache.spark.api.python.BasePythonRunner")
    with pytest.raises(StorePermissionDenied, match=r"^cassandra role feed_backfill lacks MODIFY on ks\.tweets"):
        write_table(Settings(), "tweets", FailingFrame(text), TS, write=True)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="lost an executor"):  # anything else: Spark's error as it is
        write_table(Settings(), "tweets", FailingFrame("lost an executor"), TS, write=True)  # type: ignore[arg-type]
