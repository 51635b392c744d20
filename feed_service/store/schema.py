"""Apply ``schemas/cql/feed.cql`` idempotently (every statement is ``IF NOT EXISTS``).

``gc_grace_seconds`` of the tables the view deletes from is not the file's: it comes from the
history horizon (:meth:`feed_service.core.retention.Retention.cassandra_gc_grace_seconds`), set on
creation and re-aligned on existing tables, so the schema and the stream never disagree.
"""

from __future__ import annotations

import re
from feed_service import resources

_KEYSPACE_REF = re.compile(r"\bfeed\.(?=\w)|(?<=KEYSPACE IF NOT EXISTS )feed\b")
_GC_GRACE = re.compile(r"gc_grace_seconds\s*=\s*\d+")
_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\S+)")


def schema_statements(keyspace: str, *, gc_grace_seconds: int | None = None) -> list[str]:
    """The CQL statements of the schema file, with the keyspace name substituted and, if given,
    ``gc_grace_seconds`` of every table that sets one replaced.

    >>> [s for s in schema_statements("ks", gc_grace_seconds=60) if "home_timeline" in s][0].count("gc_grace_seconds = 60")
    1
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,47}", keyspace):
        raise ValueError(f"invalid keyspace name {keyspace!r}")
    text = "\n".join(line.split("--", 1)[0] for line in resources.read_text(resources.CQL).splitlines())
    statements = [s.strip() for s in text.split(";") if s.strip()]
    if gc_grace_seconds is not None:
        statements = [_GC_GRACE.sub(f"gc_grace_seconds = {int(gc_grace_seconds)}", s) for s in statements]
    return [
        _KEYSPACE_REF.sub(lambda m: f"{keyspace}." if m.group(0).endswith(".") else keyspace, s)
        for s in statements
    ]


def gc_grace_alignments(keyspace: str, gc_grace_seconds: int) -> list[str]:
    """``ALTER TABLE`` statements giving every table that sets ``gc_grace_seconds`` this value
    (tables created before the horizon changed keep the old one otherwise)."""
    return [f"ALTER TABLE {_TABLE.search(s).group(1)} WITH gc_grace_seconds = {int(gc_grace_seconds)}"  # type: ignore[union-attr]
            for s in schema_statements(keyspace, gc_grace_seconds=gc_grace_seconds)
            if _TABLE.search(s) and _GC_GRACE.search(s)]


def apply_schema(session, keyspace: str, *, gc_grace_seconds: int | None = None) -> int:
    """Create the keyspace and tables when missing and align ``gc_grace_seconds``; returns the
    number of statements run."""
    statements = schema_statements(keyspace, gc_grace_seconds=gc_grace_seconds)
    if gc_grace_seconds is not None:
        statements += gc_grace_alignments(keyspace, gc_grace_seconds)
    for statement in statements:
        session.execute(statement, timeout=60)
    return len(statements)
