"""Idempotent Kafka topic provisioning from ``schemas/topics.json``, with a drift report.

Creating a topic that exists is not an error; a topic whose partition count, replication factor or
enforced configs differ from the spec is reported as drift. :func:`ensure_topics` then aligns the
configs to the spec; partitions and replication are never changed automatically (more partitions
re-key compacted data; replication needs a reassignment plan), so that drift stays in the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from feed_service.kafka.client_config import client_config
from feed_service.security.roles import ADMIN
from feed_service.settings import Settings, TopicSpec

ADMIN_TIMEOUT = 30.0


@dataclass(slots=True)
class TopicReport:
    """Desired vs actual state of one topic.

    ``drift`` lists every difference as text (``"missing"``, ``"partitions 3 != 6"``,
    ``"cleanup.policy=delete (want compact)"``); ``config_drift`` holds the config part as
    ``{key: (actual, wanted)}``; ``fixed`` the drift :func:`ensure_topics` aligned.
    """

    name: str
    created: bool = False
    drift: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    partitions: int | None = None
    replication_factor: int | None = None
    config_drift: dict[str, tuple[str | None, str]] = field(default_factory=dict)

    @property
    def missing(self) -> bool:
        return "missing" in self.drift

    @property
    def remaining_drift(self) -> list[str]:
        """Drift still there after provisioning: ``drift`` minus what was fixed."""
        return [d for d in self.drift if d not in self.fixed]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "created": self.created, "partitions": self.partitions,
                "replication_factor": self.replication_factor, "drift": list(self.drift),
                "fixed": list(self.fixed)}

    def __str__(self) -> str:
        if self.created:
            state = "created"
        elif self.remaining_drift:
            state = "drift: " + "; ".join(self.remaining_drift)
        elif self.fixed:
            state = "fixed: " + "; ".join(self.fixed)
        else:
            state = "ok"
        return f"{self.name}: {state}"


def _admin(settings: Settings):
    """An admin client of ``settings``' cluster, logged in as the admin role unless the settings name one."""
    from confluent_kafka.admin import AdminClient

    # log_level 4: keep librdkafka's informational lines (e.g. a purge on close) off stderr
    return AdminClient(client_config(settings, ADMIN) | {"log_level": 4})


def describe_topics(settings: Settings, specs: Iterable[TopicSpec]) -> list[TopicReport]:
    """Compare existing topics of ``settings``' cluster with their specs; nothing is changed."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = _admin(settings)
    specs = list(specs)
    metadata = admin.list_topics(timeout=ADMIN_TIMEOUT).topics
    reports = []
    for spec in specs:
        report = TopicReport(spec.name)
        reports.append(report)
        if spec.name not in metadata:
            report.drift.append("missing")
            continue
        partitions = metadata[spec.name].partitions
        report.partitions = len(partitions)
        report.replication_factor = min((len(p.replicas) for p in partitions.values()), default=0)
        if report.partitions != spec.partitions:
            report.drift.append(f"partitions {report.partitions} != {spec.partitions}")
        if report.replication_factor != spec.replication_factor:
            report.drift.append(f"replication_factor {report.replication_factor} != {spec.replication_factor}")
        resource = ConfigResource(ResourceType.TOPIC, spec.name)
        configs = admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT)
        for key, want in sorted(spec.config.items()):
            have = configs[key].value if key in configs else None
            if have != want:
                report.config_drift[key] = (have, want)
                report.drift.append(f"{key}={have} (want {want})")
    return reports


def _wait_for_metadata(admin: Any, names: set[str], timeout: float = ADMIN_TIMEOUT) -> None:
    """Wait until metadata lists topics just created (it can lag the create call on a fresh broker)."""
    import time

    deadline = time.monotonic() + timeout
    while names and time.monotonic() < deadline:
        if names <= set(admin.list_topics(timeout=ADMIN_TIMEOUT).topics):
            return
        time.sleep(0.2)


def ensure_topics(settings: Settings, specs: Iterable[TopicSpec]) -> list[TopicReport]:
    """Create missing topics on ``settings``' cluster and align configs of existing ones; return one
    report per topic."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

    specs = list(specs)
    admin = _admin(settings)
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
    _wait_for_metadata(admin, created)
    reports = describe_topics(settings, specs)
    for spec, report in zip(specs, reports):
        report.created = spec.name in created
        if report.config_drift:
            resource = ConfigResource(
                ResourceType.TOPIC,
                spec.name,
                incremental_configs=[
                    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in spec.config.items()
                ],
            )
            admin.incremental_alter_configs([resource])[resource].result(ADMIN_TIMEOUT)
            report.fixed = [d for d in report.drift if d.split("=", 1)[0] in report.config_drift]
    return reports
