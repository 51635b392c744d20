"""Apply ``schemas/cql/feed.cql`` idempotently (every statement is ``IF NOT EXISTS``).

The keyspace's replication is not the file's either: it comes from ``Settings.cassandra_replication``
when the keyspace is created; an existing keyspace whose replication differs is reported, never altered
(more replicas need a repair after the change: docs/cluster.md). ``gc_grace_seconds`` of the tables the
view deletes from comes from the history horizon (:meth:`feed_service.core.retention.Retention.cassandra_gc_grace_seconds`), set on
creation and re-aligned on existing tables, so the schema and the stream never disagree.
"""

from __future__ import annotations

import logging
import re
from typing import Mapping

from feed_service import resources

log = logging.getLogger(__name__)

_KEYSPACE_REF = re.compile(r"\bfeed\.(?=\w)|(?<=KEYSPACE IF NOT EXISTS )feed\b")
_GC_GRACE = re.compile(r"gc_grace_seconds\s*=\s*\d+")
_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\S+)")
_REPLICATION = re.compile(r"replication\s*=\s*\{[^}]*\}")


def replication_literal(replication: Mapping[str, str]) -> str:
    """A CQL map literal of a replication map.

    >>> replication_literal({"class": "NetworkTopologyStrategy", "dc1": "3"})
    "{'class': 'NetworkTopologyStrategy', 'dc1': '3'}"
    """
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in replication.items()) + "}"


def schema_statements(keyspace: str, *, gc_grace_seconds: int | None = None,
                      replication: Mapping[str, str] | None = None) -> list[str]:
    """The CQL statements of the schema file, with the keyspace name substituted and, if given,
    ``gc_grace_seconds`` of every table that sets one and the keyspace's replication replaced.

    >>> [s for s in schema_statements("ks", gc_grace_seconds=60) if "home_timeline" in s][0].count("gc_grace_seconds = 60")
    1
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,47}", keyspace):
        raise ValueError(f"invalid keyspace name {keyspace!r}")
    text = "\n".join(line.split("--", 1)[0] for line in resources.read_text(resources.CQL).splitlines())
    statements = [s.strip() for s in text.split(";") if s.strip()]
    if gc_grace_seconds is not None:
        statements = [_GC_GRACE.sub(f"gc_grace_seconds = {int(gc_grace_seconds)}", s) for s in statements]
    if replication is not None:
        literal = f"replication = {replication_literal(replication)}"
        statements = [_REPLICATION.sub(lambda _: literal, s) if s.startswith("CREATE KEYSPACE") else s
                      for s in statements]
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


def replication_drift(session, keyspace: str, wanted: Mapping[str, str]) -> dict[str, str] | None:
    """The keyspace's replication if it differs from ``wanted``, else None."""
    row = session.execute("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s",
                          (keyspace,)).one()
    if row is None:
        return None
    actual = {k: v.rsplit(".", 1)[-1] if k == "class" else v for k, v in dict(row[0]).items()}
    return None if actual == dict(wanted) else actual


def apply_schema(session, keyspace: str, *, gc_grace_seconds: int | None = None,
                 replication: Mapping[str, str] | None = None) -> int:
    """Create the keyspace and tables when missing and align ``gc_grace_seconds``; returns the
    number of statements run. A keyspace that exists with another replication is logged, not altered."""
    statements = schema_statements(keyspace, gc_grace_seconds=gc_grace_seconds, replication=replication)
    if gc_grace_seconds is not None:
        statements += gc_grace_alignments(keyspace, gc_grace_seconds)
    for statement in statements:
        session.execute(statement, timeout=60)
    if replication is not None and (actual := replication_drift(session, keyspace, replication)) is not None:
        log.warning("keyspace %s has replication %s, settings want %s: left as it is (alter it, then run a "
                    "repair: docs/cluster.md)", keyspace, actual, dict(replication))
    return len(statements)
