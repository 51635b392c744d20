"""Write the join's compact output rows to Cassandra from the executors (``foreachPartition``).

Each Python worker keeps one driver session per settings (workers are reused across tasks), so a
micro-batch pays for statements, not for connections. Rows are written in chunks through
:class:`feed_service.store.writer.TimelineWriter` (prepared statements, bounded concurrency,
logical-clock timestamps: see docs/idempotent-writes.md). A failed write raises, which fails the
micro-batch; Spark then retries it from the checkpoint and, writes being idempotent, converges.
"""

from __future__ import annotations

import atexit
from typing import Any, Iterable, Iterator

from feed_service.settings import Settings
from feed_service.store.writer import ProfileWrite, TimelineRow, TimelineWriter, TweetRow, WriteCounts

#: Compact rows per write call: bounds executor memory, keeps enough requests in flight.
CHUNK_ROWS = 2000

_writers: dict[tuple, TimelineWriter] = {}


def writer_for(settings: Settings) -> TimelineWriter:
    """The worker process's writer for ``settings`` (connected once, closed at exit)."""
    cache_key = (settings.cassandra_hosts, settings.cassandra_port, settings.keyspace)
    writer = _writers.get(cache_key)
    if writer is None:
        from feed_service.store.session import connect

        cluster, session = connect(settings)
        atexit.register(cluster.shutdown)
        writer = _writers[cache_key] = TimelineWriter(session, settings.keyspace)
    return writer


def split_rows(rows: Iterable[Any]) -> tuple[list[TimelineRow], list[TweetRow], list[ProfileWrite]]:
    """Compact output rows -> flat rows per table (timeline rows exploded per follower)."""
    timeline: list[TimelineRow] = []
    tweets: list[TweetRow] = []
    profiles: list[ProfileWrite] = []
    for r in rows:
        kind = r["kind"]
        if kind == "timeline":
            head = (r["tweet_id"], r["author_id"], r["created_at"], r["version"], r["text"], r["profile_version"],
                    r["ts"])
            op = r["op"]
            timeline.extend((op, tid, *head[:6], head[6]) for tid in r["timeline_ids"])
        elif kind == "tweet":
            if r["op"] == "delete":
                tweets.append((r["tweet_id"], r["author_id"], None, None, None, None, r["ts"]))
            else:
                tweets.append((r["tweet_id"], r["author_id"], r["created_at"], r["version"], r["text"],
                               r["profile_version"], r["ts"]))
        else:
            profiles.append((r["user_id"], r["version"], r["display_name"], r["avatar_url"], r["bio"], r["ts"]))
    return timeline, tweets, profiles


def _chunks(rows: Iterator[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def write_partition(settings: Settings, rows: Iterator[Any], counter: Any | None = None) -> None:
    """Write one partition of output rows; add the timeline rows written to ``counter`` (an accumulator)."""
    writer = writer_for(settings)
    total = WriteCounts()
    for chunk in _chunks(rows, CHUNK_ROWS):
        timeline, tweets, profiles = split_rows(chunk)
        total = total + writer.write(timeline=timeline, tweets=tweets, profiles=profiles)
    if counter is not None:
        counter.add(total.timeline_upserts + total.timeline_deletes)
