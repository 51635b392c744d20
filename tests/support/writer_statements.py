"""What :class:`~feed_service.store.cassandra_writer.CassandraWriter` sends for one ``write``, without a
Cassandra: its statements prepared as their CQL text and its executions captured (unit tests of the
writer's statements; the writes on a real node are tests/integration/test_per_reader_tables.py)."""

from __future__ import annotations

from typing import Any

import cassandra.concurrent
import pytest

from feed_service.store.cassandra_writer import CassandraWriter
from feed_service.store.ports import WriteCounts


class _TextSession:
    """Prepares a statement as its CQL text."""

    def prepare(self, cql: str) -> str:
        return cql


def writer_statements(monkeypatch: pytest.MonkeyPatch, **rows: Any) -> tuple[WriteCounts, list[tuple[str, Any]]]:
    """The counts of ``CassandraWriter.write(**rows)`` (one request per row) and its (CQL, values),
    in the order sent, the CQL with its whitespace collapsed."""
    calls: list[tuple[str, Any]] = []

    class Result:
        success, result_or_exc = True, None

    def execute(session: Any, statements: Any, **_: Any) -> list[Result]:
        statements = list(statements)
        calls.extend(statements)
        return [Result() for _ in statements]

    monkeypatch.setattr(cassandra.concurrent, "execute_concurrent", execute)
    counts = CassandraWriter(_TextSession(), "ks", batch_rows=1).write(**rows)
    return counts, [(" ".join(cql.split()), values) for cql, values in calls]
