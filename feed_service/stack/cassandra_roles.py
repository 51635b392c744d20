"""The secured stack's Cassandra logins: made on its first start, checked on every later one.

A node with ``PasswordAuthenticator`` starts with one login, the default superuser ``cassandra`` /
``cassandra``, known to everyone. :func:`ensure_roles` replaces it (docs/security.md):

1. logged in as ``cassandra`` (first start only): on a cluster, ``system_auth`` is replicated to every
   node (``NetworkTopologyStrategy``, one replica per node) *before* any role is written, so that
   losing one node never loses a login; then the admin role ``feed_admin`` (superuser) is created
   with the password of ``credentials/admin/cassandra.password``;
2. logged in as ``feed_admin`` (every start): one login role per role that uses Cassandra, with the
   password of its file (set again each time, so the files stay the truth), then ``cassandra`` is
   locked: a random password nobody keeps and ``LOGIN = false``.

Grants on the service's keyspace are provisioning's (feed_service/store/grants.py): the roles exist
before any keyspace does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from feed_service.security.roles import ADMIN, BACKFILL, SERVER, STREAM, cassandra_role
from feed_service.security.secrets import login, new_password
from feed_service.stack.config import CLUSTER_DATA_CENTRE, StackConfig

if TYPE_CHECKING:
    from feed_service.stack.cassandra_node import CassandraNode

log = logging.getLogger(__name__)

#: The login every node starts with (CassandraRoleManager's default superuser).
DEFAULT_SUPERUSER = ("cassandra", "cassandra")
#: Roles that log in to Cassandra besides the admin (the producer only writes to Kafka).
LOGIN_ROLES = (STREAM, SERVER, BACKFILL)

Login = tuple[str, str]


def role_login(config: StackConfig, role: str) -> Login:
    """(``feed_<role>``, its password) from the stack's credentials folder."""
    from feed_service.stack.stack_secrets import StackSecrets

    return login(str(StackSecrets(config).credentials_dir), role, "cassandra")


def admin_login(config: StackConfig) -> Login:
    """(``feed_admin``, its password)."""
    return role_login(config, ADMIN)


def superuser_logins(config: StackConfig) -> list[Login]:
    """The logins a probe tries, in order: the admin once the roles exist, the default superuser before."""
    return [admin_login(config), DEFAULT_SUPERUSER]


def auth_refused(exc: BaseException) -> bool:
    """Whether a failed connect was a refused login (and not a node that does not answer yet)."""
    from cassandra import AuthenticationFailed
    from cassandra.cluster import NoHostAvailable

    if isinstance(exc, AuthenticationFailed):
        return True
    return isinstance(exc, NoHostAvailable) and any(
        isinstance(error, AuthenticationFailed) for error in (exc.errors or {}).values())


def system_auth_replication(config: StackConfig) -> str | None:
    """The replication ``system_auth`` needs: one replica per node on a cluster; None for one node
    (its default, ``SimpleStrategy`` with one replica, is all a single node can hold)."""
    if len(config.hosts) == 1:
        return None
    return (f"{{'class': 'NetworkTopologyStrategy', '{CLUSTER_DATA_CENTRE}': {len(config.hosts)}}}")


def ensure_roles(config: StackConfig, node: "CassandraNode") -> bool:
    """Make the stack's roles through ``node`` and lock the default superuser; idempotent. True when
    this call bootstrapped them (the admin could not log in yet)."""
    admin = admin_login(config)
    bootstrapped = False
    try:
        cluster, session = node.open_session(admin)
    except Exception as exc:  # noqa: BLE001 - only a refused login means "not bootstrapped yet"
        if not auth_refused(exc):
            raise
        _bootstrap_admin(config, node, admin)
        bootstrapped = True
        cluster, session = node.open_session(admin)
    try:
        _replicate_system_auth(config, session)
        for role in LOGIN_ROLES:
            user, password = role_login(config, role)
            _execute(session, f"CREATE ROLE IF NOT EXISTS {user} WITH LOGIN = true AND PASSWORD = {_literal(password)}")
            _execute(session, f"ALTER ROLE {user} WITH LOGIN = true AND PASSWORD = {_literal(password)}")
        _lock_default_superuser(session)
    finally:
        cluster.shutdown()
    if bootstrapped:
        log.info("cassandra roles created: %s", ", ".join(cassandra_role(r) for r in (ADMIN, *LOGIN_ROLES)))
    return bootstrapped


def _bootstrap_admin(config: StackConfig, node: "CassandraNode", admin: Login) -> None:
    """As the default superuser: replicate ``system_auth`` first (the admin's row must land on every
    node), then create ``feed_admin`` or reset its password to the file's."""
    cluster, session = node.open_session(DEFAULT_SUPERUSER)
    try:
        _replicate_system_auth(config, session)
        user, password = admin
        _execute(session, f"CREATE ROLE IF NOT EXISTS {user} WITH SUPERUSER = true AND LOGIN = true"
                          f" AND PASSWORD = {_literal(password)}")
        _execute(session, f"ALTER ROLE {user} WITH SUPERUSER = true AND LOGIN = true AND PASSWORD = {_literal(password)}")
    finally:
        cluster.shutdown()


def _replicate_system_auth(config: StackConfig, session: Any) -> None:
    """``ALTER KEYSPACE system_auth`` unless it is replicated as :func:`system_auth_replication` says.
    On an empty cluster nothing needs repairing: roles written afterwards reach every replica."""
    wanted = system_auth_replication(config)
    if wanted is None:
        return
    row = session.execute("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = 'system_auth'").one()
    replication = dict(row.replication) if row is not None else {}
    if replication.get(CLUSTER_DATA_CENTRE) == str(len(config.hosts)) and "NetworkTopologyStrategy" in replication.get("class", ""):
        return
    _execute(session, f"ALTER KEYSPACE system_auth WITH replication = {wanted}")
    _spread_roles(session)


#: How long :func:`_spread_roles` keeps trying (the role caches hold a refused check for ~2 s).
SPREAD_TIMEOUT_S = 60.0


def _spread_roles(session: Any) -> None:
    """Put every role row on every new replica of ``system_auth``.

    Rows written before the ``ALTER`` are on their one old replica. The default superuser is looked
    up at QUORUM: two of three replicas, which miss the row one time in three, and then it "does not
    have sufficient privileges" (a race the stack's first start lost now and then). A read at ALL
    contacts every replica and read-repairs the ones that miss a row, which is what ``nodetool
    repair system_auth`` would do here; its own permission check may lose the race, so it is retried.
    """
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    _execute(session, SimpleStatement("SELECT role, can_login, is_superuser FROM system_auth.roles",
                                      consistency_level=ConsistencyLevel.ALL))


def _execute(session: Any, statement: Any, params: Any = None) -> Any:
    """``session.execute`` retried while the caller's own superuser check loses the race above (for up
    to :data:`SPREAD_TIMEOUT_S`; the node caches a refused check for about two seconds)."""
    import time

    from cassandra import Unauthorized

    deadline = time.monotonic() + SPREAD_TIMEOUT_S
    while True:
        try:
            return session.execute(statement, params)
        except Unauthorized:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _lock_default_superuser(session: Any) -> None:
    """``cassandra`` can no longer log in (a random password nobody keeps, ``LOGIN = false``); skipped
    when it already cannot."""
    name = DEFAULT_SUPERUSER[0]
    row = session.execute("SELECT can_login FROM system_auth.roles WHERE role = %s", (name,)).one()
    if row is not None and not row.can_login:
        return
    _execute(session, f"ALTER ROLE {name} WITH PASSWORD = {_literal(new_password())} AND LOGIN = false")


def _literal(text: str) -> str:
    """A CQL string literal (role passwords cannot be bound parameters in ``CREATE ROLE``).

    >>> _literal("it's")
    "'it''s'"
    """
    return "'" + text.replace("'", "''") + "'"
