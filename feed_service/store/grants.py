"""Each role's Cassandra grants (:func:`feed_service.security.roles.cassandra_grants`), applied by provisioning.

``GRANT`` is idempotent in Cassandra (granting a permission a role holds changes nothing), so
provisioning applies the whole table every time: a keyspace provisioned before a role gained a
permission gets it on the next run. A permission a role lost (:func:`cassandra_revocations`) is
revoked where it is still held, after the grants: ``LIST`` first, since revoking what a role does
not hold draws a warning from the node on every run. The roles themselves are made when the secured stack first
starts (feed_service/stack/cassandra_roles.py), or by the operator in a deployment (docs/security.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from feed_service.security.roles import cassandra_grants, cassandra_revocations
from feed_service.settings import Settings

if TYPE_CHECKING:
    from cassandra.cluster import Session


def apply_grants(session: "Session", settings: Settings) -> None:
    """Grant the roles their rights on ``settings.keyspace``; nothing when Cassandra runs without logins
    (AllowAllAuthorizer refuses GRANT). ``session`` is logged in as the keyspace's owner (the admin)."""
    if not settings.cassandra_auth:
        return
    for statement in cassandra_grants(settings.keyspace):
        session.execute(statement)
    for permission, resource, role in cassandra_revocations(settings.keyspace):
        if list(session.execute(f"LIST {permission} ON {resource} OF {role} NORECURSIVE")):
            session.execute(f"REVOKE {permission} ON {resource} FROM {role}")
