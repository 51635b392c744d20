"""Trim ``home_timeline`` partitions to the inbox cap: bounded storage per home timeline.

:class:`CassandraTrimmer` implements :class:`~feed_service.store.ports.TimelineTrimmer`. For each
timeline it reads the partition's clustering keys with the newest write time of each row's regular
cells (at most the caller's upper bound of its live rows, when known: such a read stops before the
tombstones earlier trims left at the old end), and when the partition holds more than the limit
(``inbox_cap + trim_slack``, or the stream's lower background threshold) it deletes the rows beyond
the ``inbox_cap`` newest, each ``USING TIMESTAMP`` = that row's observed write time. With the
deletes it raises the partition's *cut line* (static ``cut_created_at``, ``cut_tweet_id``) to the
oldest row it kept, unless the line is already higher: rows at or above the line are exact, rows
below it may be missing, which is what the stream's refill check reads
(:mod:`feed_service.store.cassandra_refill`, docs/trimming.md#refill).

Why that timestamp (docs/trimming.md): every row is owned by one author key whose logical clock only
increases (docs/idempotent-writes.md). A later legitimate insert or update of the row by its key
carries a strictly greater timestamp and wins over the trim's tombstone; a replayed batch rewriting
the row at the same timestamp loses (a tombstone wins a tie), which is right since the row was
beyond the cap. A wall-clock timestamp would instead hide later writes of keys whose clocks are
behind the wall clock, and a single range tombstone cannot carry the different clocks of the rows
it covers. The cut line is no row of any author key: it is written at the wall clock, so of two
trims the later one's line stands (it only rises, and one timeline is never trimmed by two threads
at once).

Statements are prepared once and run with bounded concurrency (as in
:mod:`feed_service.store.cassandra_writer`); driver faults are translated as the reader does
(:func:`~feed_service.store.cassandra_reader.translate_driver_error`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from feed_service.errors import StoreError, WriteFailed
from feed_service.security.roles import STREAM
from feed_service.store.concurrent_statements import execute_concurrently
from feed_service.store.cassandra_reader import connected, translate_driver_error
from feed_service.store.token_scan import too_many_tombstones
from feed_service.store.ports import TrimResult

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

    from feed_service.settings import Settings

#: In-flight partition reads or delete batches.
DEFAULT_CONCURRENCY = 32
#: Timelines read per round: bounds the keys held in memory at once (about cap + slack each).
TIMELINES_PER_ROUND = 256
#: Deletes per single-partition UNLOGGED batch (one mutation for the partition, each statement
#: with its own timestamp); about 60 bytes each, far below the batch size warning.
DELETES_PER_BATCH = 100

_WRITETIME_COLUMNS = ("version",)
"""Whose write time is the row's: every insert or update of a timeline row writes the whole row in
one ``INSERT ... USING TIMESTAMP`` (:mod:`feed_service.store.cassandra_writer`), so all its cells
share one write time, and ``version`` is never null. One column instead of four halves what a trim
scan transfers and decodes (the trim pass runs on the driver, whose CPU it takes)."""

_FIRST_WRITETIME = 4
"""Where a scanned row's write times start: after its key and the partition's cut line (static, so
on every row, and on the one row of a partition holding only statics)."""


class CassandraTrimmer:
    """Trims home timelines to ``inbox_cap`` rows once they hold more than ``inbox_cap + trim_slack``."""

    def __init__(
        self,
        session: "Session",
        keyspace: str,
        *,
        inbox_cap: int,
        trim_slack: int,
        concurrency: int = DEFAULT_CONCURRENCY,
        cluster: "Cluster | None" = None,
    ) -> None:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT
        from cassandra.query import tuple_factory

        self.session = session
        self.cluster = cluster
        self.inbox_cap = inbox_cap
        self.trim_slack = trim_slack
        self.concurrency = concurrency
        self._profile = session.execution_profile_clone_update(EXEC_PROFILE_DEFAULT, row_factory=tuple_factory)
        writetimes = ", ".join(f"WRITETIME({c})" for c in _WRITETIME_COLUMNS)
        scan = (f"SELECT created_at, tweet_id, cut_created_at, cut_tweet_id, {writetimes}"
                f" FROM {keyspace}.home_timeline WHERE timeline_id = ?")
        self._scan = session.prepare(scan)
        self._scan_bounded = session.prepare(scan + " LIMIT ?")
        self._delete = session.prepare(
            f"DELETE FROM {keyspace}.home_timeline USING TIMESTAMP ? WHERE timeline_id = ? AND created_at = ?"
            " AND tweet_id = ?"
        )
        self._set_line = session.prepare(
            f"UPDATE {keyspace}.home_timeline USING TIMESTAMP ? SET cut_created_at = ?, cut_tweet_id = ?"
            " WHERE timeline_id = ?"
        )

    @classmethod
    def connect(cls, settings: "Settings") -> "CassandraTrimmer":
        """Connect to ``settings``' cluster with its cap and slack (blocking); :meth:`close` shuts it down.
        Trims are the stream's: it logs in as the stream's role unless ``settings`` names one."""
        settings = settings.as_role(STREAM)
        return connected(settings, lambda session, cluster: cls(
            session, settings.keyspace, inbox_cap=settings.inbox_cap, trim_slack=settings.trim_slack, cluster=cluster))

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()

    def trim(self, timeline_ids: Iterable[str], *, bounds: Mapping[str, int | None] | None = None,
             limit: int | None = None) -> TrimResult:
        """Trim every timeline of ``timeline_ids`` that holds more than ``limit`` rows (default cap +
        slack; the stream's background trims pass a lower one) to its newest ``inbox_cap``, and raise
        its cut line to the oldest row kept (never lower it: below a higher line rows may be missing).

        ``bounds`` (timeline -> an upper bound of its live rows, None: unknown) bounds each read to
        that many rows: Cassandra stops a ``LIMIT`` read once it has that many live rows, before the
        row tombstones earlier trims left at the old end of the partition (docs/trimming.md, bounded
        scans). A timeline without a known bound is read whole.

        Raises :class:`StoreUnavailable` / :class:`StoreTimeout` when a partition cannot be read and
        :class:`WriteFailed` when deletes failed; a trim is idempotent, so the caller retries it.
        """
        ids = list(dict.fromkeys(timeline_ids))
        limit = self.inbox_cap + self.trim_slack if limit is None else limit
        if limit < self.inbox_cap:
            raise ValueError(f"a trim limit ({limit}) below the cap ({self.inbox_cap})")
        bounds = bounds or {}
        kept: dict[str, int] = {}
        timelines = rows = 0
        for start in range(0, len(ids), TIMELINES_PER_ROUND):
            chunk = ids[start : start + TIMELINES_PER_ROUND]
            scans, _ = execute_concurrently(self.session, [self._read(tid, bounds.get(tid)) for tid in chunk],
                                            concurrency=self.concurrency, profile=self._profile)
            deletes: list[tuple[Any, Any]] = []
            for tid, result in zip(chunk, scans):
                rows_read, whole = self._rows(tid, result, limit)
                keys = [r for r in rows_read if r[0] is not None]
                if len(keys) <= limit:
                    if whole:
                        kept[tid] = len(keys)
                    continue
                keys.sort(key=lambda r: (r[0], r[1]), reverse=True)  # clustering order, to be sure
                beyond = keys[self.inbox_cap :]
                cut = [(r[0], r[1], max(t for t in r[_FIRST_WRITETIME:] if t is not None)) for r in beyond
                       if any(t is not None for t in r[_FIRST_WRITETIME:])]
                if whole:  # else older rows the read did not reach may be live: the bound is unknown
                    kept[tid] = len(keys) - len(cut)
                oldest_kept = (keys[self.inbox_cap - 1][0], keys[self.inbox_cap - 1][1])
                line = _line_of(rows_read[0])
                raised = oldest_kept if line is None or oldest_kept > line else None
                deletes += self._delete_batches(tid, cut, raised)
                timelines += 1
                rows += len(cut)
            self._run(deletes, reading=False)
        return TrimResult(kept, timelines, rows)

    def _rows(self, timeline_id: str, result: Any, limit: int) -> tuple[list[tuple[Any, ...]], bool]:
        """The rows of a partition's read (``result``: its first page, or its failure), and whether
        they are all its live rows.

        A partition whose tombstones alone exceed Cassandra's ``tombstone_failure_threshold`` fails
        any read that reaches them: it is read again up to ``limit + 1`` rows only, which stops at its
        newest live rows before the tombstones at its old end when it holds more than ``limit``
        (then the trim cuts what it read, and the timeline's bound is unknown: older live rows may
        lie among the tombstones); when that read fails too it holds at most ``limit`` live rows and
        nothing is cut (docs/operations.md#failure-modes-reads-and-scans)."""
        try:
            if isinstance(result, BaseException):
                raise result
            # later pages, if any, are fetched here; a partition holding only its statics reads as
            # one row without a clustering key
            return list(result), True
        except Exception as exc:
            if not too_many_tombstones(exc):
                raise translate_driver_error(exc) from exc
        try:
            rows = list(self.session.execute(self._scan_bounded, (timeline_id, limit + 1),
                                             execution_profile=self._profile))
        except Exception as exc:
            if not too_many_tombstones(exc):
                raise translate_driver_error(exc) from exc
            return [], False
        return rows, False

    def _read(self, timeline_id: str, bound: int | None) -> tuple[Any, Any]:
        if bound is None:
            return self._scan, (timeline_id,)
        return self._scan_bounded, (timeline_id, max(1, bound))

    def _delete_batches(self, timeline_id: str, cut: Sequence[tuple[int, str, int]],
                        line: tuple[int, str] | None) -> list[tuple[Any, Any]]:
        """The deletes of ``cut`` and, with the last of them (one partition, one mutation), the new
        cut line ``line`` if it rises (None: it stays)."""
        from cassandra.query import BatchStatement, BatchType

        statements: list[tuple[Any, tuple[Any, ...]]] = [
            (self._delete, (ts, timeline_id, created_at, tweet_id)) for created_at, tweet_id, ts in cut]
        if line is not None:
            statements.append((self._set_line, (int(time.time() * 1_000_000), line[0], line[1], timeline_id)))
        out: list[tuple[Any, Any]] = []
        for i in range(0, len(statements), DELETES_PER_BATCH):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for statement, params in statements[i : i + DELETES_PER_BATCH]:
                batch.add(statement, params)
            out.append((batch, None))
        return out

    def _run(self, statements: list[tuple[Any, Any]], *, reading: bool) -> list[Any]:
        """Execute with bounded concurrency; the results in order, or the first failure translated."""
        results, failures = execute_concurrently(self.session, statements, concurrency=self.concurrency,
                                                 profile=self._profile)
        if failures:
            first = translate_driver_error(failures[0])
            if reading or not isinstance(first, StoreError):
                raise first
            raise WriteFailed(f"{len(failures)} of {len(statements)} trim deletes failed; first: {failures[0]!r}")
        return results


def _line_of(row: tuple[Any, ...]) -> tuple[int, str] | None:
    """The cut line a scanned row carries (the partition's statics), None when it has none."""
    created_at, tweet_id = row[2], row[3]
    return None if created_at is None or tweet_id is None else (created_at, tweet_id)
