"""Open cassandra-driver sessions configured for this service (one place for driver policies).

Every request is routed token-aware to a replica of its partition in the local data centre
(``Settings.cassandra_local_dc``), at the configured consistency: the default execution profile
writes at ``Settings.write_consistency``, :data:`READ_PROFILE` reads at ``Settings.read_consistency``
(docs/cluster.md has why a replicated cluster uses ``LOCAL_QUORUM`` for both).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from feed_service.settings import Settings

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 10.0

READ_PROFILE = "read"
"""The execution profile of reads (the read service, row counts)."""


def connect(settings: Settings, *, keyspace: str | None = None) -> tuple["Cluster", "Session"]:
    """A connected (cluster, session); the caller shuts the cluster down."""
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

    def profile(consistency: str) -> ExecutionProfile:
        return ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.cassandra_local_dc or None)),
            request_timeout=REQUEST_TIMEOUT,
            consistency_level=getattr(ConsistencyLevel, consistency),
        )

    cluster = Cluster(
        list(settings.cassandra_hosts),
        port=settings.cassandra_port,
        protocol_version=5,
        connect_timeout=CONNECT_TIMEOUT,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile(settings.write_consistency),
                            READ_PROFILE: profile(settings.read_consistency)},
    )
    try:
        session = cluster.connect(keyspace)
    except Exception:
        cluster.shutdown()
        raise
    return cluster, session


def read_profile_of(session: "Session") -> object:
    """:data:`READ_PROFILE` on a session this module connected, else the session's default profile
    (a session the caller built keeps its own consistency)."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT

    return READ_PROFILE if READ_PROFILE in session.cluster.profile_manager.profiles else EXEC_PROFILE_DEFAULT
