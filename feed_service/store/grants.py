"""Each role's Cassandra grants (:func:`feed_service.security.roles.cassandra_grants`), applied by provisioning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from feed_service.settings import Settings

if TYPE_CHECKING:
    from cassandra.cluster import Session


def apply_grants(session: "Session", settings: Settings) -> None:
    """Grant the roles their rights on ``settings.keyspace``; nothing when Cassandra runs without logins."""
    if not settings.cassandra_auth:
        return
    raise NotImplementedError("Cassandra grants")
