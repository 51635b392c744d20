"""Open cassandra-driver sessions configured for this service (one place for driver policies).

Every request is routed token-aware to a replica of its partition in the local data centre
(``Settings.cassandra_local_dc``), at the configured consistency: the default execution profile
writes at ``Settings.write_consistency``, :data:`READ_PROFILE` reads at ``Settings.read_consistency``
(docs/cluster.md has why a replicated cluster uses ``LOCAL_QUORUM`` for both).

On a secured stack (docs/security.md) every session speaks TLS, verifying the node's certificate
against ``Settings.tls_ca_file`` for the node's address, and logs in as ``Settings.role`` with the
password read from its file when the connection opens (:func:`security_options`).
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

from feed_service.errors import ConfigError
from feed_service.security.secrets import login
from feed_service.settings import Settings

if TYPE_CHECKING:
    from cassandra.auth import AuthProvider
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
        **security_options(settings),
    )
    try:
        session = cluster.connect(keyspace)
    except Exception:
        cluster.shutdown()
        raise
    return cluster, session


def security_options(settings: Settings) -> dict[str, Any]:
    """The ``Cluster`` keyword arguments of ``settings``' TLS and login (none on a plaintext stack):
    every session of the service, and the stack's probes, connect with them."""
    options: dict[str, Any] = {}
    if settings.cassandra_tls:
        options["ssl_context"] = tls_context(settings.tls_ca_file)
    if settings.cassandra_auth:
        options["auth_provider"] = password_login(*login(settings.credentials_dir, settings.role, "cassandra"))
    return options


def tls_context(ca_file: str) -> ssl.SSLContext:
    """A client context that trusts only ``ca_file`` and checks that the node's certificate names the
    address it was reached at (the driver passes the node's address as the server name; the stack's
    certificates carry it as an IP SAN)."""
    if not ca_file:
        raise ConfigError("FEED_CASSANDRA_TLS is on but FEED_TLS_CA_FILE is not set")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"CA file {ca_file}: {getattr(exc, 'strerror', None) or exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def password_login(user: str, password: str) -> "AuthProvider":
    """The driver's login for PasswordAuthenticator."""
    from cassandra.auth import PlainTextAuthProvider

    return PlainTextAuthProvider(username=user, password=password)


def read_profile_of(session: "Session") -> object:
    """:data:`READ_PROFILE` on a session this module connected, else the session's default profile
    (a session the caller built keeps its own consistency)."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT

    return READ_PROFILE if READ_PROFILE in session.cluster.profile_manager.profiles else EXEC_PROFILE_DEFAULT
