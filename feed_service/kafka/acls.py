"""Each role's Kafka ACLs (:func:`feed_service.security.roles.kafka_acls`), applied by provisioning.

The brokers refuse whatever no ACL allows (``allow.everyone.if.no.acl.found=false``), so these rules
are all a non-admin role may do (docs/security.md). Applying them is idempotent: the ACLs already
there are described first and only the missing ones are created.
"""

from __future__ import annotations

from typing import Any, Iterable

from feed_service.errors import ConfigError
from feed_service.kafka.client_config import client_config
from feed_service.security.roles import ADMIN, KafkaAcl, kafka_acls
from feed_service.settings import Settings

ADMIN_TIMEOUT = 30.0


def apply_acls(settings: Settings) -> int:
    """Create the roles' ACLs for ``settings``' topics on a SASL_SSL cluster (as the admin); nothing on a
    plaintext one, which has no authorizer. Returns the number of ACLs created (0 when all existed)."""
    if settings.kafka_security_protocol == "PLAINTEXT":
        return 0
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(client_config(settings.as_role(ADMIN), ADMIN) | {"log_level": 4})
    wanted = [acl_binding(acl) for acl in kafka_acls({role: spec.name for role, spec in settings.topics.items()})]
    present = set(_existing(admin, wanted))
    missing = [b for b in wanted if b not in present]
    if not missing:
        return 0
    for binding, future in admin.create_acls(missing, request_timeout=ADMIN_TIMEOUT).items():
        future.result(ADMIN_TIMEOUT)  # raises KafkaException naming the refused binding
    return len(missing)


def acl_binding(acl: KafkaAcl) -> Any:
    """The confluent-kafka ``AclBinding`` of ``acl`` (any host, allow)."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    try:
        return AclBinding(ResourceType[acl.resource_type.upper()], acl.name, ResourcePatternType[acl.pattern.upper()],
                          acl.principal, "*", AclOperation[acl.operation.upper()], AclPermissionType.ALLOW)
    except KeyError as exc:
        raise ConfigError(f"unknown ACL term {exc} in {acl}") from None


def _existing(admin: Any, wanted: Iterable[Any]) -> Iterable[Any]:
    """The bindings already on the cluster for the resources of ``wanted`` (one describe per resource)."""
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType

    resources = {(b.restype, b.name, b.resource_pattern_type) for b in wanted}
    for restype, name, pattern in sorted(resources, key=str):
        query = AclBindingFilter(restype, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)
        yield from admin.describe_acls(query, request_timeout=ADMIN_TIMEOUT).result(ADMIN_TIMEOUT)
