"""Idempotent Kafka topic provisioning from ``schemas/topics.json``, with a drift report.

Creating a topic that exists is not an error; a topic whose partition count or enforced configs
differ from the spec is reported as drift (configs are then altered to the spec; partitions are
never changed automatically because that re-keys compacted data).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from feed_service.settings import TopicSpec

ADMIN_TIMEOUT = 30.0


@dataclass(slots=True)
class TopicReport:
    name: str
    created: bool = False
    drift: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        state = "created" if self.created else ("drift: " + "; ".join(self.drift) if self.drift else "ok")
        return f"{self.name}: {state}"


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def describe_topics(bootstrap: str, specs: Iterable[TopicSpec]) -> list[TopicReport]:
    """Compare existing topics with their specs; nothing is changed."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = _admin(bootstrap)
    specs = list(specs)
    metadata = admin.list_topics(timeout=ADMIN_TIMEOUT).topics
    reports = []
    for spec in specs:
        report = TopicReport(spec.name)
        reports.append(report)
        if spec.name not in metadata:
            report.drift.append("missing")
            continue
        actual_partitions = len(metadata[spec.name].partitions)
        if actual_partitions != spec.partitions:
            report.drift.append(f"partitions {actual_partitions} != {spec.partitions}")
        resource = ConfigResource(ResourceType.TOPIC, spec.name)
        configs = admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT)
        for key, want in sorted(spec.config.items()):
            have = configs[key].value if key in configs else None
            if have != want:
                report.drift.append(f"{key}={have} (want {want})")
    return reports


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec]) -> list[TopicReport]:
    """Create missing topics and align configs of existing ones; return one report per topic."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

    specs = list(specs)
    admin = _admin(bootstrap)
    existing = admin.list_topics(timeout=ADMIN_TIMEOUT).topics
    missing = [s for s in specs if s.name not in existing]
    created: set[str] = set()
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.config)) for s in missing],
            operation_timeout=ADMIN_TIMEOUT,
        )
        for name, future in futures.items():
            try:
                future.result(ADMIN_TIMEOUT)
                created.add(name)
            except Exception as exc:  # noqa: BLE001 - a concurrent creator is fine
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
    reports = describe_topics(bootstrap, specs)
    for spec, report in zip(specs, reports):
        report.created = spec.name in created
        config_drift = [d for d in report.drift if "=" in d]
        if config_drift:
            resource = ConfigResource(
                ResourceType.TOPIC,
                spec.name,
                incremental_configs=[
                    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in spec.config.items()
                ],
            )
            admin.incremental_alter_configs([resource])[resource].result(ADMIN_TIMEOUT)
            report.fixed = config_drift
    return reports
