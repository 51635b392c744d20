"""Rows per timeline in Cassandra: how full the inboxes (``home_timeline``) and the author timelines
(``author_timeline``) are, for ``feedctl state-stats`` and the stream's periodic report
(docs/streaming.md, "State size and rows per timeline").

Two ways to count, both read-only and at consistency ONE like every read of this service:

* **every partition** (default): the partition keys (``SELECT DISTINCT timeline_id``) one token range
  at a time (:mod:`feed_service.store.token_scan`: a range refused for its tombstones is split), then
  one ``COUNT(created_at)`` per partition, a few at once. Never one scan of the rows across
  partitions: such a scan's page reads on through every trimmed or dropped row (tombstones) of every
  partition until it has a page of live rows, and a table of trimmed inboxes and dropped readers fails
  it with ``ReadFailure`` (Cassandra's ``tombstone_failure_threshold``,
  docs/operations.md#failure-modes-reads-and-scans); a per-partition count scans the tombstones of
  that partition only. It
  reads every row once, so it costs about what a full read of the table costs: right for the local
  and test scale.
* **a sample** of ``n`` partitions: ``SELECT DISTINCT`` partition keys in token order (by token
  range, as above) from a random token (a uniform sample, since tokens are hashes), then one ``COUNT(created_at)`` per sampled partition. The
  number of partitions is then estimated from the share of the token ring the sample covered; a
  sample that wraps the whole ring is exact.

Driver errors become :mod:`feed_service.errors` store errors (:func:`translate_driver_error`), as in
:mod:`feed_service.store.cassandra_reader`.
"""

from __future__ import annotations

import random
from itertools import chain, islice
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from feed_service.distribution import Distribution, summarize
from feed_service.security.roles import STREAM
from feed_service.store.cassandra_reader import connected, translate_driver_error
from feed_service.store.token_scan import TooManyTombstones, scan_by_token, too_many_tombstones

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

    from feed_service.settings import Settings

#: The timeline-shaped tables, by partition key column.
TABLES: tuple[tuple[str, str], ...] = (("home_timeline", "timeline_id"), ("author_timeline", "author_id"))
#: Partitions whose counts are held at once in a full count (bounds the futures in memory).
KEYS_PER_ROUND = 2000
#: Sampled partitions counted at once.
COUNT_CONCURRENCY = 16
_RING = 2**64
_MIN_TOKEN = -(2**63)


@dataclass(frozen=True, slots=True)
class TableRows:
    """Rows per partition of one timeline table.

    ``rows``: the distribution over the partitions counted (all of them, or the sample; partitions
    without a live row, such as an inbox holding only its statics, are left out). ``partitions``: how
    many partitions hold rows, exact when ``exact``, else estimated from the sample's share of the token
    ring. ``sampled``: how many partition keys were read, those without a row included.
    """

    table: str
    rows: Distribution
    partitions: int
    exact: bool
    sampled: int

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "partitions": self.partitions, "exact": self.exact, "sampled": self.sampled,
                "rows": self.rows.to_dict()}


def estimate_partitions(found: int, start_token: int, last_token: int) -> int:
    """Partitions on the whole ring, if ``found`` of them lay on the arc from ``start_token`` (exclusive)
    to ``last_token`` (inclusive) going up and wrapping around.

    >>> estimate_partitions(10, 0, 2**62)  # a quarter of the ring
    40
    """
    arc = (last_token - start_token) % _RING or _RING
    return max(found, round(found * _RING / arc))


class TimelineRows:
    """Counts rows per partition of the timeline tables on a cassandra-driver session.

    Construct with :meth:`connect` (owns its cluster) or around an existing session (the caller keeps
    ownership). Blocking: meant for a command or a background thread, not an event loop.
    """

    def __init__(self, session: "Session", keyspace: str, *, cluster: "Cluster | None" = None) -> None:
        from feed_service.store.session import read_profile_of
        from cassandra.query import tuple_factory

        self.session = session
        self.cluster = cluster
        self._profile = session.execution_profile_clone_update(read_profile_of(session), row_factory=tuple_factory)
        self._keyspace = keyspace

    @classmethod
    def connect(cls, settings: "Settings") -> "TimelineRows":
        """Connect to ``settings``' cluster; counting is the stream's (``feedctl state-stats``): it logs
        in as the stream's role unless ``settings`` names one."""
        settings = settings.as_role(STREAM)
        return connected(settings, lambda session, cluster: cls(session, settings.keyspace, cluster=cluster))

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()

    def __enter__(self) -> "TimelineRows":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self, table: str, key: str, *, sample: int | None = None, rng: random.Random | None = None) -> TableRows:
        """Rows per partition of ``table`` (partition key column ``key``): every partition, or ``sample`` of them."""
        if sample is not None and sample < 1:
            raise ValueError(f"sample must be at least 1, not {sample}")
        try:
            if sample is None:
                return self._count_all(table, key)
            return self._count_sample(table, key, sample, rng or random.Random())
        except Exception as exc:
            raise translate_driver_error(exc) from exc

    def all_tables(self, *, sample: int | None = None) -> dict[str, TableRows]:
        """:meth:`count` of every table of :data:`TABLES`, by table name."""
        return {table: self.count(table, key, sample=sample) for table, key in TABLES}

    def _count_all(self, table: str, key: str) -> TableRows:
        """Every partition: its key from a paged ``SELECT DISTINCT``, its rows from its own count (a
        multi-partition scan of the rows would read every partition's tombstones in one page)."""
        distinct = f"SELECT DISTINCT {key}, token({key}) FROM {self._keyspace}.{table}"
        counts: list[int] = []
        chunk: list[str] = []
        read = 0
        for row in scan_by_token(self.session, distinct, key, profile=self._profile):
            read += 1
            chunk.append(row[0])
            if len(chunk) >= KEYS_PER_ROUND:
                counts += self._partition_counts(table, key, chunk)
                chunk = []
        counts += self._partition_counts(table, key, chunk)
        # a home_timeline partition holding only its statics counts no row: not counted
        rows = summarize(n for n in counts if n > 0)
        return TableRows(table, rows, rows.count, True, read)

    def _partition_counts(self, table: str, key: str, keys: list[str]) -> list[int]:
        """``COUNT(created_at)`` of each partition of ``keys``, in order (one read per partition)."""
        from cassandra.concurrent import execute_concurrent_with_args

        if not keys:
            return []
        count = self.session.prepare(f"SELECT COUNT(created_at) FROM {self._keyspace}.{table} WHERE {key} = ?")
        results = execute_concurrent_with_args(self.session, count, [(k,) for k in keys],
                                               concurrency=COUNT_CONCURRENCY, raise_on_first_error=False,
                                               execution_profile=self._profile)
        counts = []
        for k, (ok, result) in zip(keys, results):
            if ok:
                counts.append(result.one()[0])
            elif too_many_tombstones(result):
                raise TooManyTombstones(
                    f"{self._keyspace}.{table} partition {k!r} alone holds more tombstones than the cluster's"
                    " tombstone_failure_threshold: compact the table or wait for gc_grace_seconds"
                    " (docs/operations.md#failure-modes-reads-and-scans)") from result
            else:
                raise result
        return counts

    def _count_sample(self, table: str, key: str, sample: int, rng: random.Random) -> TableRows:
        start = rng.randrange(_MIN_TOKEN + 1, 2**63)
        distinct = f"SELECT DISTINCT {key}, token({key}) FROM {self._keyspace}.{table}"
        # from the random token up, then on around the ring up to where the sample began
        ring = chain(scan_by_token(self.session, distinct, key, profile=self._profile, start=start),
                     scan_by_token(self.session, distinct, key, profile=self._profile, end=start))
        keys = list(islice(ring, sample))
        rows = summarize(n for n in self._partition_counts(table, key, [k for k, _ in keys]) if n > 0)
        if len(keys) < sample:  # the whole ring held fewer partitions than asked for: every one was counted
            return TableRows(table, rows, rows.count, True, len(keys))
        return TableRows(table, rows, estimate_partitions(rows.count, start, keys[-1][1]), False, len(keys))


def timeline_rows(settings: "Settings", *, sample: int | None = None) -> dict[str, TableRows]:
    """Connect, count rows per partition of every timeline table (:class:`TimelineRows`), disconnect."""
    with TimelineRows.connect(settings) as counter:
        return counter.all_tables(sample=sample)
