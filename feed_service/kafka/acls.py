"""Each role's Kafka ACLs (:func:`feed_service.security.roles.kafka_acls`), applied by provisioning."""

from __future__ import annotations

from feed_service.settings import Settings


def apply_acls(settings: Settings) -> None:
    """Create the roles' ACLs for ``settings``' topics on a SASL_SSL cluster; nothing on a plaintext one."""
    if settings.kafka_security_protocol == "PLAINTEXT":
        return
    raise NotImplementedError("Kafka ACLs")
