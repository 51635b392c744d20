"""Open cassandra-driver sessions configured for this service (one place for driver policies)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from feed_service.settings import Settings

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 10.0


def connect(settings: Settings, *, keyspace: str | None = None) -> tuple["Cluster", "Session"]:
    """A connected (cluster, session); the caller shuts the cluster down."""
    from cassandra.cluster import Cluster, ExecutionProfile, EXEC_PROFILE_DEFAULT
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()),
        request_timeout=REQUEST_TIMEOUT,
    )
    cluster = Cluster(
        list(settings.cassandra_hosts),
        port=settings.cassandra_port,
        protocol_version=5,
        connect_timeout=CONNECT_TIMEOUT,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
    )
    try:
        session = cluster.connect(keyspace)
    except Exception:
        cluster.shutdown()
        raise
    return cluster, session
