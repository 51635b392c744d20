"""Rows per timeline in Cassandra: how full the inboxes (``home_timeline``) and the author timelines
(``author_timeline``) are, for ``feedctl state-stats`` and the stream's periodic report
(docs/streaming.md, "State size and rows per timeline").

Two ways to count, both read-only and at consistency ONE like every read of this service:

* **every partition** (default): one paged scan of the partition key and the first clustering column
  (``SELECT timeline_id, created_at FROM home_timeline``), rows counted per key in Python (a partition
  holding only its static ``pull_authors`` reads as one row without ``created_at``: not counted). It reads every row once,
  so it costs about what a full read of the table costs: right for the local and test scale.
* **a sample** of ``n`` partitions: ``SELECT DISTINCT`` partition keys in token order from a random
  token (a uniform sample, since tokens are hashes), then one ``COUNT(created_at)`` per sampled partition. The
  number of partitions is then estimated from the share of the token ring the sample covered; a
  sample that wraps the whole ring is exact.

Driver errors become :mod:`feed_service.errors` store errors (:func:`translate_driver_error`), as in
:mod:`feed_service.store.cassandra_reader`.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from feed_service.distribution import Distribution, summarize
from feed_service.security.roles import STREAM
from feed_service.store.cassandra_reader import connected, translate_driver_error

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

    from feed_service.settings import Settings

#: The timeline-shaped tables, by partition key column.
TABLES: tuple[tuple[str, str], ...] = (("home_timeline", "timeline_id"), ("author_timeline", "author_id"))
#: Rows per page of the full scan: big pages, since only one short column comes back.
SCAN_FETCH_SIZE = 5000
#: Sampled partitions counted at once.
COUNT_CONCURRENCY = 16
_RING = 2**64
_MIN_TOKEN = -(2**63)


@dataclass(frozen=True, slots=True)
class TableRows:
    """Rows per partition of one timeline table.

    ``rows``: the distribution over the partitions counted (all of them, or the sample; partitions
    without a live row are not counted). ``partitions``: how many partitions hold rows, exact when
    ``exact``, else estimated from the sample's share of the token ring.
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
        from cassandra.query import SimpleStatement

        statement = SimpleStatement(f"SELECT {key}, created_at FROM {self._keyspace}.{table}", fetch_size=SCAN_FETCH_SIZE)
        # a home_timeline partition holding only its static pull_authors reads as a row without created_at
        counts = Counter(row[0] for row in self.session.execute(statement, execution_profile=self._profile)
                         if row[1] is not None)
        rows = summarize(counts.values())
        return TableRows(table, rows, rows.count, True, rows.count)

    def _count_sample(self, table: str, key: str, sample: int, rng: random.Random) -> TableRows:
        from cassandra.concurrent import execute_concurrent_with_args

        start = rng.randrange(_MIN_TOKEN + 1, 2**63)
        distinct = f"SELECT DISTINCT {key}, token({key}) FROM {self._keyspace}.{table} WHERE token({key})"
        keys = list(self.session.execute(f"{distinct} > %s LIMIT %s", (start, sample), execution_profile=self._profile))
        if len(keys) < sample:  # on around the ring, from its start up to where the sample began
            keys += list(self.session.execute(f"{distinct} <= %s LIMIT %s", (start, sample - len(keys)),
                                              execution_profile=self._profile))
        count = self.session.prepare(f"SELECT COUNT(created_at) FROM {self._keyspace}.{table} WHERE {key} = ?")
        results = execute_concurrent_with_args(self.session, count, [(k,) for k, _ in keys],
                                               concurrency=COUNT_CONCURRENCY, raise_on_first_error=True,
                                               execution_profile=self._profile)
        rows = summarize(n for n in (result.one()[0] for _, result in results) if n > 0)
        if len(keys) < sample:  # the whole ring held fewer partitions than asked for: every one was counted
            return TableRows(table, rows, rows.count, True, len(keys))
        return TableRows(table, rows, estimate_partitions(len(keys), start, keys[-1][1]), False, len(keys))


def timeline_rows(settings: "Settings", *, sample: int | None = None) -> dict[str, TableRows]:
    """Connect, count rows per partition of every timeline table (:class:`TimelineRows`), disconnect."""
    with TimelineRows.connect(settings) as counter:
        return counter.all_tables(sample=sample)
