"""Which trimmed home timelines removals left short: the stream's refill check (docs/trimming.md#refill).

A trim keeps an inbox's newest ``inbox_cap`` rows and records the oldest of them as the partition's
*cut line* (:mod:`feed_service.store.cassandra_trimmer`). Every later write and delete reaches the
rows at or above the line, so they are exact; below it rows may be missing. Once removals leave
fewer than ``inbox_cap`` rows at or above the line, the reader's next rows may be among the missing
ones, and the inbox must be refilled by its push authors (the users it sees, less those merged in
at read). :class:`CassandraRefillCheck` finds those inboxes, with what a refill request needs.

Per timeline, at most three single-partition reads, each stage run over a round of timelines with
bounded concurrency: the statics (line and pull authors); with a line, the rows at or above it,
bounded by the cap (so it reads no tombstone below the line and at most the cap's rows); when
short, the reader's visible users and excluded sources (its push authors: ``rules.push_authors``).
A timeline never trimmed costs the first read only. Driver
faults are translated as the reader does
(:func:`~feed_service.store.cassandra_reader.translate_driver_error`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from feed_service.core.rules import push_authors
from feed_service.security.roles import STREAM
from feed_service.store.cassandra_reader import connected
from feed_service.store.concurrent_statements import all_rows, execute_all
from feed_service.store.ports import ShortInbox

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

    from feed_service.settings import Settings

#: In-flight reads.
DEFAULT_CONCURRENCY = 32
#: Timelines checked per round: bounds the rows held in memory at once (up to the cap per timeline).
TIMELINES_PER_ROUND = 256


class CassandraRefillCheck:
    """Finds the trimmed home timelines holding fewer than ``inbox_cap`` rows at or above their cut line."""

    def __init__(
        self,
        session: "Session",
        keyspace: str,
        *,
        inbox_cap: int,
        concurrency: int = DEFAULT_CONCURRENCY,
        cluster: "Cluster | None" = None,
    ) -> None:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT
        from cassandra.query import tuple_factory

        self.session = session
        self.cluster = cluster
        self.inbox_cap = inbox_cap
        self.concurrency = concurrency
        self._profile = session.execution_profile_clone_update(EXEC_PROFILE_DEFAULT, row_factory=tuple_factory)
        self._statics = session.prepare(
            f"SELECT cut_created_at, cut_tweet_id, pull_authors FROM {keyspace}.home_timeline"
            " WHERE timeline_id = ? LIMIT 1"
        )
        self._at_or_above = session.prepare(
            f"SELECT created_at FROM {keyspace}.home_timeline WHERE timeline_id = ?"
            " AND (created_at, tweet_id) >= (?, ?) LIMIT ?"
        )
        self._visible = session.prepare(f"SELECT user_id FROM {keyspace}.reader_visible WHERE reader_id = ?")
        self._excluded = session.prepare(f"SELECT user_id FROM {keyspace}.reader_excluded WHERE reader_id = ?")

    @classmethod
    def connect(cls, settings: "Settings") -> "CassandraRefillCheck":
        """Connect to ``settings``' cluster with its cap (blocking); :meth:`close` shuts it down. The
        check is the stream's: it logs in as the stream's role unless ``settings`` names one."""
        settings = settings.as_role(STREAM)
        return connected(settings, lambda session, cluster: cls(
            session, settings.keyspace, inbox_cap=settings.inbox_cap, cluster=cluster))

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()

    def short_inboxes(self, timeline_ids: Iterable[str]) -> list[ShortInbox]:
        """The timelines of ``timeline_ids`` whose rows at or above their cut line are fewer than
        ``inbox_cap``: each with its line, the shortfall and the push authors its reader sees.

        A timeline without a line was never trimmed (or a refill found nothing missing): every row
        it should hold is there, so it is never short. In the order of ``timeline_ids``.

        Raises :class:`StoreUnavailable` / :class:`StoreTimeout` when a read fails; the check only
        reads, so the caller retries it.
        """
        ids = list(dict.fromkeys(timeline_ids))
        out: list[ShortInbox] = []
        for start in range(0, len(ids), TIMELINES_PER_ROUND):
            chunk = ids[start : start + TIMELINES_PER_ROUND]
            lined: list[tuple[str, tuple[int, str], frozenset[str]]] = []
            for tid, result in zip(chunk, self._run([(self._statics, (tid,)) for tid in chunk])):
                rows = all_rows(result)
                if not rows or rows[0][0] is None or rows[0][1] is None:
                    continue
                cut_created_at, cut_tweet_id, pull_authors = rows[0]
                lined.append((tid, (cut_created_at, cut_tweet_id), frozenset(pull_authors or ())))
            counts = self._run([(self._at_or_above, (tid, line[0], line[1], self.inbox_cap))
                                for tid, line, _ in lined])
            short: list[tuple[str, tuple[int, str], int, frozenset[str]]] = []
            for (tid, line, pull_authors), result in zip(lined, counts):
                exact = sum(1 for r in all_rows(result) if r[0] is not None)
                if exact < self.inbox_cap:
                    short.append((tid, line, self.inbox_cap - exact, pull_authors))
            sets = self._run([(self._visible, (tid,)) for tid, *_ in short]
                             + [(self._excluded, (tid,)) for tid, *_ in short])
            for (tid, line, need, pull_authors), seen, aside in zip(short, sets, sets[len(short):]):
                users = push_authors((r[0] for r in all_rows(seen)), pull_authors, {r[0] for r in all_rows(aside)})
                out.append(ShortInbox(tid, line, need, tuple(users)))
        return out

    def _run(self, statements: list[tuple[Any, Any]]) -> list[Any]:
        return execute_all(self.session, statements, concurrency=self.concurrency, profile=self._profile)
