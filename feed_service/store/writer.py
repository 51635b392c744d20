"""Idempotent, order-safe writes of the join's outputs to Cassandra.

Every statement carries ``USING TIMESTAMP ts`` where ``ts`` is the owning author key's logical
clock from :func:`feed_service.core.join.step` (docs/idempotent-writes.md). Cassandra keeps, per
cell, the write with the highest timestamp (a tombstone wins a tie), so:

- a replayed micro-batch rewrites identical cells with identical timestamps: no change;
- retried or reordered writes converge to the newest step's content, whatever order they land in;
- a deleted tweet's tombstones carry a later clock than any upsert of it, so no replay of an
  older write can bring it back (for as long as ``gc_grace_seconds`` keeps the tombstone).

Rows are flat tuples (what the Spark job produces after exploding the compact deltas):
``TimelineRow = (op, timeline_id, tweet_id, author_id, created_at, version, text, profile_version, ts)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence, TypeAlias

from feed_service.core.join import ProfileRow, StepResult, TweetChange

if TYPE_CHECKING:
    from cassandra.cluster import Session

TimelineRow: TypeAlias = tuple[str, str, str, str, int, int, str, int, int]
"""(op, timeline_id, tweet_id, author_id, created_at, version, text, profile_version, ts)."""

TweetRow: TypeAlias = tuple[str, str, int | None, int | None, str | None, int | None, int]
"""(tweet_id, author_id, created_at, version, text, profile_version, ts); version None = deleted."""

ProfileWrite: TypeAlias = tuple[str, int, str, str | None, str | None, int]
"""(user_id, version, display_name, avatar_url, bio, ts)."""

#: In-flight requests per writer: enough to keep one node busy, bounded to cap memory and timeouts.
DEFAULT_CONCURRENCY = 64

#: Rows per UNLOGGED batch request. The driver's per-request cost in Python, not the server, bounds
#: a writer; batching a few rows per request roughly halves that cost (bench/bench_stream.py). Each
#: statement keeps its own USING TIMESTAMP, so batching changes nothing in what the rows become.
#: Unlogged batches spanning partitions load their coordinator; keep this small on large clusters.
DEFAULT_BATCH_ROWS = 16


class WriteError(RuntimeError):
    """Some writes failed after the driver's retries; the batch must be retried (it is idempotent)."""


@dataclass(frozen=True, slots=True)
class WriteCounts:
    timeline_upserts: int = 0
    timeline_deletes: int = 0
    tweets: int = 0
    profiles: int = 0

    def __add__(self, other: "WriteCounts") -> "WriteCounts":
        return WriteCounts(*(a + b for a, b in zip(self._tuple(), other._tuple())))

    def _tuple(self) -> tuple[int, int, int, int]:
        return (self.timeline_upserts, self.timeline_deletes, self.tweets, self.profiles)


class TimelineWriter:
    """Prepared statements for the view's three tables, executed with bounded concurrency."""

    def __init__(
        self,
        session: "Session",
        keyspace: str,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> None:
        self.session = session
        self.concurrency = concurrency
        self.batch_rows = batch_rows
        ks = keyspace
        self._timeline_upsert = session.prepare(
            f"INSERT INTO {ks}.home_timeline (timeline_id, created_at, tweet_id, author_id, version, text,"
            " profile_version) VALUES (?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        self._timeline_delete = session.prepare(
            f"DELETE FROM {ks}.home_timeline USING TIMESTAMP ? WHERE timeline_id = ? AND created_at = ?"
            " AND tweet_id = ?"
        )
        self._tweet_upsert = session.prepare(
            f"INSERT INTO {ks}.tweets (tweet_id, author_id, created_at, version, text, profile_version)"
            " VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        self._tweet_delete = session.prepare(f"DELETE FROM {ks}.tweets USING TIMESTAMP ? WHERE tweet_id = ?")
        self._profile_upsert = session.prepare(
            f"INSERT INTO {ks}.profiles (user_id, version, display_name, avatar_url, bio)"
            " VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )

    def _batched(self, statements: list[tuple]) -> list[tuple]:
        """Group (statement, values) pairs into UNLOGGED batches of ``batch_rows``."""
        from cassandra.query import BatchStatement, BatchType

        out: list[tuple] = []
        for i in range(0, len(statements), self.batch_rows):
            chunk = statements[i : i + self.batch_rows]
            if len(chunk) == 1:
                out.append(chunk[0])
                continue
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for statement, values in chunk:
                batch.add(statement, values)
            out.append((batch, None))
        return out

    # -- statement builders: one bound statement per row -------------------------------------
    def _timeline(self, rows: Iterable[TimelineRow]) -> Iterator[tuple]:
        for op, timeline_id, tweet_id, author_id, created_at, version, text, profile_version, ts in rows:
            if op == "delete":
                yield self._timeline_delete, (ts, timeline_id, created_at, tweet_id)
            else:  # insert and update both write the full row (same clustering key)
                yield self._timeline_upsert, (
                    timeline_id, created_at, tweet_id, author_id, version, text, profile_version, ts
                )

    def _tweets(self, rows: Iterable[TweetRow]) -> Iterator[tuple]:
        for tweet_id, author_id, created_at, version, text, profile_version, ts in rows:
            if version is None:
                yield self._tweet_delete, (ts, tweet_id)
            else:
                yield self._tweet_upsert, (tweet_id, author_id, created_at, version, text, profile_version, ts)

    def _profiles(self, rows: Iterable[ProfileWrite]) -> Iterator[tuple]:
        for user_id, version, display_name, avatar_url, bio, ts in rows:
            yield self._profile_upsert, (user_id, version, display_name, avatar_url, bio, ts)

    def write(
        self,
        *,
        timeline: Iterable[TimelineRow] = (),
        tweets: Iterable[TweetRow] = (),
        profiles: Iterable[ProfileWrite] = (),
    ) -> WriteCounts:
        """Write rows (any order: timestamps decide); raises :class:`WriteError` if any write failed."""
        from cassandra.concurrent import execute_concurrent

        timeline, tweets, profiles = list(timeline), list(tweets), list(profiles)
        statements = [*self._timeline(timeline), *self._tweets(tweets), *self._profiles(profiles)]
        if self.batch_rows > 1:
            statements = self._batched(statements)
        if statements:
            results = execute_concurrent(
                self.session, statements, concurrency=self.concurrency, raise_on_first_error=False,
                results_generator=True,
            )
            failures = [r.result_or_exc for r in results if not r.success]
            if failures:
                raise WriteError(f"{len(failures)} of {len(statements)} writes failed; first: {failures[0]!r}")
        deletes = sum(1 for r in timeline if r[0] == "delete")
        return WriteCounts(len(timeline) - deletes, deletes, len(tweets), len(profiles))

    def write_step(self, result: StepResult) -> WriteCounts:
        """Write one step's outputs (used by the CLI, tests and benchmarks; Spark writes flat rows)."""
        rows = step_rows(result)
        return self.write(timeline=rows[0], tweets=rows[1], profiles=rows[2])


def step_rows(result: StepResult) -> tuple[list[TimelineRow], list[TweetRow], list[ProfileWrite]]:
    """Explode one step's compact outputs into the flat rows :meth:`TimelineWriter.write` takes."""
    ts = result.ts
    timeline: list[TimelineRow] = [
        (d.op, tid, e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.profile_version, ts)
        for d in result.deltas
        for e in (d.entry,)
        for tid in d.timeline_ids
    ]
    return timeline, [tweet_row(t, ts) for t in result.tweets], [profile_row(p, ts) for p in result.profiles]


def tweet_row(change: TweetChange, ts: int) -> TweetRow:
    e = change.entry
    if e is None:
        return (change.tweet_id, change.author_id, None, None, None, None, ts)
    return (e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.profile_version, ts)


def profile_row(p: ProfileRow, ts: int) -> ProfileWrite:
    return (p.user_id, p.version, p.display_name, p.avatar_url, p.bio, ts)


def chunks(rows: Sequence, size: int) -> Iterator[Sequence]:
    for i in range(0, len(rows), size):
        yield rows[i : i + size]
