"""Apply ``schemas/cql/feed.cql`` idempotently (every statement is ``IF NOT EXISTS``)."""

from __future__ import annotations

import re
from feed_service import resources

_KEYSPACE_REF = re.compile(r"\bfeed\.(?=\w)|(?<=KEYSPACE IF NOT EXISTS )feed\b")


def schema_statements(keyspace: str) -> list[str]:
    """The CQL statements of the schema file, with the keyspace name substituted."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,47}", keyspace):
        raise ValueError(f"invalid keyspace name {keyspace!r}")
    text = "\n".join(line.split("--", 1)[0] for line in resources.read_text(resources.CQL).splitlines())
    statements = [s.strip() for s in text.split(";") if s.strip()]
    return [
        _KEYSPACE_REF.sub(lambda m: f"{keyspace}." if m.group(0).endswith(".") else keyspace, s)
        for s in statements
    ]


def apply_schema(session, keyspace: str) -> int:
    """Create the keyspace and tables when missing; returns the number of statements run."""
    statements = schema_statements(keyspace)
    for statement in statements:
        session.execute(statement, timeout=60)
    return len(statements)
