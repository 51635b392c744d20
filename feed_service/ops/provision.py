"""Provision what the service needs on a running stack: Kafka topics and the Cassandra schema."""

from __future__ import annotations

from feed_service.settings import Settings, keyspace_replication
from feed_service.store.schema import apply_schema
from feed_service.store.session import connect
from feed_service.kafka.topics import TopicReport, ensure_topics


def provision(settings: Settings) -> list[TopicReport]:
    """Idempotent: create missing topics (aligning drifted configs) and the keyspace and tables."""
    reports = ensure_topics(settings.kafka_bootstrap, settings.topics.values())
    cluster, session = connect(settings)
    try:
        apply_schema(session, settings.keyspace, gc_grace_seconds=settings.retention.cassandra_gc_grace_seconds(),
                     replication=keyspace_replication(settings.cassandra_replication))
    finally:
        cluster.shutdown()
    return reports
