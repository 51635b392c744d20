"""The stream driver's store of reader activity (docs/activity.md#the-stream): who read when, whose
inbox is kept, and the writes that stop and restart keeping one.

- ``reader_activity``: the driver's own record per reader (last read, ``state``); read whole when the
  stream starts, written as readers are first seen, read or change state;
- ``home_timeline.inbox_dropped`` (static): what the read service goes by; set before the stream stops
  writing a reader's inbox, cleared once its rebuild is written;
- dropping an inbox deletes each row at its own write time, as a trim does
  (:mod:`feed_service.store.cassandra_trimmer`): a later write by an author key, at a higher clock,
  wins over the tombstone; the partition's statics (pull authors, pull reposters) stay;
- a returning reader's push authors: its visible users less the pull authors merged in at read, as
  the refill check reads them (:mod:`feed_service.store.cassandra_refill`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from feed_service.core.rules import push_authors
from feed_service.security.roles import STREAM
from feed_service.store.cassandra_reader import connected, translate_driver_error
from feed_service.store.concurrent_statements import all_rows, execute_all
from feed_service.store.token_scan import scan_by_token

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

    from feed_service.settings import Settings

#: In-flight statements.
DEFAULT_CONCURRENCY = 32
#: Row deletes per unlogged batch (one partition each).
DELETES_PER_BATCH = 100


class CassandraActivity:
    """Reads and writes of the reader-activity bookkeeping, for :class:`spark_jobs.stream.activity.StreamActivity`."""

    def __init__(self, session: "Session", keyspace: str, *, concurrency: int = DEFAULT_CONCURRENCY,
                 cluster: "Cluster | None" = None) -> None:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT
        from cassandra.query import tuple_factory

        self.session = session
        self.cluster = cluster
        self.concurrency = concurrency
        self._profile = session.execution_profile_clone_update(EXEC_PROFILE_DEFAULT, row_factory=tuple_factory)
        self._load = f"SELECT reader_id, last_read_at, state, token(reader_id) FROM {keyspace}.reader_activity"
        self._save = session.prepare(
            f"UPDATE {keyspace}.reader_activity SET last_read_at = ?, state = ? WHERE reader_id = ?")
        self._flag = session.prepare(
            f"UPDATE {keyspace}.home_timeline USING TIMESTAMP ? SET inbox_dropped = ? WHERE timeline_id = ?")
        self._scan = session.prepare(
            # one write time per row: every write of a row writes all its cells (cassandra_trimmer.py)
            f"SELECT created_at, tweet_id, WRITETIME(version) FROM {keyspace}.home_timeline WHERE timeline_id = ?")
        self._delete = session.prepare(
            f"DELETE FROM {keyspace}.home_timeline USING TIMESTAMP ? WHERE timeline_id = ? AND created_at = ?"
            " AND tweet_id = ?")
        self._unline = session.prepare(
            f"DELETE cut_created_at, cut_tweet_id FROM {keyspace}.home_timeline USING TIMESTAMP ?"
            " WHERE timeline_id = ?")
        self._statics = session.prepare(
            f"SELECT pull_authors FROM {keyspace}.home_timeline WHERE timeline_id = ? LIMIT 1")
        self._visible = session.prepare(f"SELECT user_id FROM {keyspace}.reader_visible WHERE reader_id = ?")
        self._excluded = session.prepare(f"SELECT user_id FROM {keyspace}.reader_excluded WHERE reader_id = ?")
        self._last_ts = 0

    @classmethod
    def connect(cls, settings: "Settings") -> "CassandraActivity":
        """Connect as the stream (blocking); :meth:`close` shuts it down."""
        settings = settings.as_role(STREAM)
        return connected(settings, lambda session, cluster: cls(session, settings.keyspace, cluster=cluster))

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()

    def load(self) -> dict[str, tuple[int, str]]:
        """Every reader the driver has recorded: reader -> (last read, state). Read one token range at
        a time (:mod:`.token_scan`): the table is never scanned in one query across partitions."""
        try:
            rows = list(scan_by_token(self.session, self._load, "reader_id", profile=self._profile))
        except Exception as exc:
            raise translate_driver_error(exc) from exc
        return {r[0]: (r[1] or 0, r[2] or "active") for r in rows}

    def save(self, readers: Mapping[str, tuple[int, str]]) -> None:
        """Record (last read, state) of ``readers``."""
        self._run([(self._save, (at, state, reader)) for reader, (at, state) in sorted(readers.items())])

    def set_dropped(self, readers: Iterable[str], dropped: bool) -> None:
        """Set the inbox_dropped flag of ``readers`` at the wall clock (one writer: the driver; its
        timestamps only rise, so a later flag always wins)."""
        ts = self._timestamp()
        self._run([(self._flag, (ts, dropped, reader)) for reader in sorted(set(readers))])

    def drop_rows(self, readers: Iterable[str]) -> int:
        """Delete every row of the inboxes of ``readers`` at its write time, and their cut lines;
        returns the rows deleted."""
        from cassandra.query import BatchStatement, BatchType

        ids = sorted(set(readers))
        deleted = 0
        statements: list[tuple[Any, Any]] = []
        ts = self._timestamp()
        for reader, result in zip(ids, self._run([(self._scan, (reader,)) for reader in ids])):
            rows = [r for r in all_rows(result) if r[0] is not None and r[2] is not None]
            deletes = [(self._delete, (wt, reader, created_at, tweet_id)) for created_at, tweet_id, wt in rows]
            deletes.append((self._unline, (ts, reader)))
            deleted += len(rows)
            for i in range(0, len(deletes), DELETES_PER_BATCH):
                batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                for statement, params in deletes[i:i + DELETES_PER_BATCH]:
                    batch.add(statement, params)
                statements.append((batch, None))
        self._run(statements)
        return deleted

    def push_authors(self, readers: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """Each reader's push authors (:func:`~feed_service.core.rules.push_authors`): the users it
        sees less the pull authors it merges in at read and the sources it sets aside."""
        ids = sorted(set(readers))
        n = len(ids)
        got = self._run([(self._statics, (reader,)) for reader in ids] + [(self._visible, (reader,)) for reader in ids]
                        + [(self._excluded, (reader,)) for reader in ids])
        out: dict[str, tuple[str, ...]] = {}
        for reader, s, v, x in zip(ids, got[:n], got[n:2 * n], got[2 * n:]):
            srows = all_rows(s)
            pull = set(srows[0][0] or ()) if srows else set()
            out[reader] = tuple(push_authors((r[0] for r in all_rows(v)), pull, {r[0] for r in all_rows(x)}))
        return out

    def _timestamp(self) -> int:
        ts = max(int(time.time() * 1_000_000), self._last_ts + 1)
        self._last_ts = ts
        return ts

    def _run(self, statements: list[tuple[Any, Any]]) -> list[Any]:
        return execute_all(self.session, statements, concurrency=self.concurrency, profile=self._profile)
