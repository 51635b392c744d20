"""Where the service finds Kafka, Cassandra and its topics: one frozen object, built from the environment.

Every adapter takes a :class:`Settings` instead of reading the environment itself, so tests hand in
the settings of their private stack and the demo hands in those of the developer's stack.

Environment variables (defaults follow the local stack, ``feedctl stack up``):

- ``FEED_KAFKA_BOOTSTRAP``   Kafka bootstrap servers (default ``127.0.0.1:<FEED_KAFKA_PORT or 9092>``)
- ``FEED_CASSANDRA_HOSTS``   comma-separated contact points (default ``127.0.0.1``)
- ``FEED_CASSANDRA_PORT``    CQL native port (default 9042)
- ``FEED_KEYSPACE``          Cassandra keyspace (default ``feed``)
- ``FEED_TOPIC_SUFFIX``      appended to every topic name of ``schemas/topics.json`` (default empty),
  to run isolated pipelines on one broker (tests, staging)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from feed_service.stack.config import REPO_ROOT, StackConfig

SCHEMAS_DIR = REPO_ROOT / "schemas"
TOPICS_FILE = SCHEMAS_DIR / "topics.json"
CQL_FILE = SCHEMAS_DIR / "cql" / "feed.cql"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A desired topic: name, layout and the configs provisioning enforces."""

    role: str
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)


def load_topic_specs(path: Path = TOPICS_FILE) -> dict[str, TopicSpec]:
    """Topic specs by role (``tweets``, ``follows``, ``profiles``, ``dead_letter``)."""
    raw = json.loads(path.read_text())["topics"]
    return {
        role: TopicSpec(
            role=role,
            name=spec["name"],
            partitions=int(spec["partitions"]),
            replication_factor=int(spec["replication_factor"]),
            config={k: str(v) for k, v in spec.get("config", {}).items()},
        )
        for role, spec in raw.items()
    }


@dataclass(frozen=True, slots=True)
class Settings:
    kafka_bootstrap: str = "127.0.0.1:9092"
    cassandra_hosts: tuple[str, ...] = ("127.0.0.1",)
    cassandra_port: int = 9042
    keyspace: str = "feed"
    topics: dict[str, TopicSpec] = field(default_factory=load_topic_specs)

    def topic(self, role: str) -> str:
        return self.topics[role].name

    def with_topic_suffix(self, suffix: str) -> "Settings":
        """The same settings with ``suffix`` appended to every topic name."""
        topics = {role: replace(spec, name=spec.name + suffix) for role, spec in self.topics.items()}
        return replace(self, topics=topics)

    @classmethod
    def for_stack(cls, stack: StackConfig, *, keyspace: str = "feed") -> "Settings":
        return cls(
            kafka_bootstrap=stack.kafka_bootstrap,
            cassandra_hosts=(stack.host,),
            cassandra_port=stack.cassandra_port,
            keyspace=keyspace,
        )

    @classmethod
    def from_env(cls) -> "Settings":
        env = os.environ
        base = cls.for_stack(StackConfig.from_env())
        settings = cls(
            kafka_bootstrap=env.get("FEED_KAFKA_BOOTSTRAP", base.kafka_bootstrap),
            cassandra_hosts=tuple(env.get("FEED_CASSANDRA_HOSTS", ",".join(base.cassandra_hosts)).split(",")),
            cassandra_port=int(env.get("FEED_CASSANDRA_PORT", base.cassandra_port)),
            keyspace=env.get("FEED_KEYSPACE", base.keyspace),
        )
        suffix = env.get("FEED_TOPIC_SUFFIX", "")
        return settings.with_topic_suffix(suffix) if suffix else settings

    def to_env(self) -> dict[str, str]:
        """Environment variables that make :meth:`from_env` in a child process return these settings
        (topic names must come from ``schemas/topics.json`` plus one common suffix)."""
        base = load_topic_specs()
        suffixes = {spec.name[len(base[role].name):] for role, spec in self.topics.items()}
        if len(suffixes) != 1 or any(not self.topics[r].name.startswith(base[r].name) for r in base):
            raise ValueError("to_env: topic names must be the spec names plus one common suffix")
        return {
            "FEED_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "FEED_CASSANDRA_HOSTS": ",".join(self.cassandra_hosts),
            "FEED_CASSANDRA_PORT": str(self.cassandra_port),
            "FEED_KEYSPACE": self.keyspace,
            "FEED_TOPIC_SUFFIX": suffixes.pop(),
        }
