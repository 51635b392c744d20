"""Provision what the service needs on a running stack: Kafka topics, the Cassandra schema and, on a
secured stack, each role's Kafka ACLs and Cassandra grants (docs/security.md). Runs as the admin role."""

from __future__ import annotations

from feed_service.kafka.acls import apply_acls
from feed_service.kafka.topics import TopicReport, ensure_topics
from feed_service.security.roles import ADMIN
from feed_service.settings import Settings, keyspace_replication
from feed_service.store.grants import apply_grants
from feed_service.store.schema import apply_schema
from feed_service.store.session import connect


def provision(settings: Settings) -> list[TopicReport]:
    """Idempotent: create missing topics (aligning drifted configs), the keyspace and tables, and the
    roles' ACLs and grants when the stack is secured."""
    settings = settings.as_role(ADMIN)
    reports = ensure_topics(settings, settings.topics.values())
    apply_acls(settings)
    cluster, session = connect(settings)
    try:
        apply_schema(session, settings.keyspace, gc_grace_seconds=settings.retention.cassandra_gc_grace_seconds(),
                     replication=keyspace_replication(settings.cassandra_replication))
        apply_grants(session, settings)
    finally:
        cluster.shutdown()
    return reports
