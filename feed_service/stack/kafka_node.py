"""A Kafka 4 broker in KRaft mode (broker and controller in one JVM) on loopback.

A single-node stack runs one; a cluster stack runs one per address of ``StackConfig.hosts``, all of
them voters of one controller quorum (so losing any one keeps a majority), with internal topics
replicated three times and ``min.insync.replicas=2`` (docs/cluster.md).
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

from feed_service.stack.config import StackConfig
from feed_service.stack.process import ServiceProcess

NAME = "kafka"
#: Topic used only by the readiness check (produce/consume round trip).
HEALTH_TOPIC = "__stack_health"

LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.kafkaorg.name = org.apache.kafka
logger.kafkaorg.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class KafkaNode:
    """Renders the broker config, formats storage once, starts and probes the broker."""

    def __init__(self, config: StackConfig, lib_dir: Path, index: int = 0) -> None:
        """Node ``index`` of ``config.hosts`` (node id ``index + 1``)."""
        self.config = config
        self.lib_dir = lib_dir
        self.index = index
        self.host = config.hosts[index]
        clustered = len(config.hosts) > 1
        self.name = f"{NAME}-{index + 1}" if clustered else NAME
        self.home = config.data_dir / self.name
        self.process = ServiceProcess(self.name, self.home / "kafka.pid", self.home / "kafka.log")

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.config.kafka_port}"

    @property
    def properties_file(self) -> Path:
        return self.home / "server.properties"

    def _render(self) -> None:
        c = self.config
        self.home.mkdir(parents=True, exist_ok=True)
        replicas = str(len(c.hosts))
        min_isr = "2" if len(c.hosts) >= 3 else "1"
        voters = ",".join(f"{i + 1}@{host}:{c.kafka_controller_port}" for i, host in enumerate(c.hosts))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.index + 1),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://{self.host}:{c.kafka_controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.home / "data"),
            "num.partitions": "3",
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            # A broker back from a crash takes its partitions' leadership back by itself.
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": "30",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # Compaction must actually run on a small local log (demo and tests inspect it).
            "log.cleaner.backoff.ms": "5000",
        }
        self.properties_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.home / "log4j2.properties").write_text(LOG4J2_PROPERTIES)

    def _java(self, main_class: str, *args: str) -> list[str]:
        return [
            "java",
            f"-Xms{self.config.kafka_heap}",
            f"-Xmx{self.config.kafka_heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            "-cp",
            f"{self.lib_dir}/*",
            main_class,
            *args,
        ]

    def _format_storage(self) -> None:
        """Format the KRaft log dir once; a formatted dir keeps its cluster id across restarts."""
        if (self.home / "data" / "meta.properties").exists():
            return
        cluster_id = self._cluster_id()
        cmd = self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.properties_file))
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"kafka storage format failed: {proc.stdout}{proc.stderr}")

    def _cluster_id(self) -> str:
        """One id for all the stack's brokers (kept in the stack's folder), so they form one cluster."""
        record = self.config.data_dir / "kafka-cluster-id"
        if not record.exists():
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(_kraft_cluster_id())
        return record.read_text().strip()

    def start(self) -> int:
        if self.process.is_running():
            return self.process.pid() or 0
        self._render()
        self._format_storage()
        return self.process.start(self._java("kafka.Kafka", str(self.properties_file)))

    def probe(self, timeout: float = 10.0) -> None:
        """Produce one record and consume it back through this broker; raises if it cannot do that.
        In a cluster, also that every broker has registered (the health topic is fully replicated)."""
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        bootstrap = self.bootstrap
        quiet = {"bootstrap.servers": bootstrap, "log_level": 0}  # refused connections are expected here
        admin = AdminClient(quiet)
        brokers = len(admin.list_topics(timeout=timeout).brokers)
        if brokers < len(self.config.hosts):
            raise RuntimeError(f"{brokers} of {len(self.config.hosts)} brokers registered")
        replicas = len(self.config.hosts)
        futures = admin.create_topics([NewTopic(HEALTH_TOPIC, 1, replicas)], operation_timeout=timeout)
        for future in futures.values():
            try:
                future.result(timeout)
            except Exception as exc:  # noqa: BLE001 - "already exists" is the normal second time
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
        token = uuid.uuid4().hex.encode()
        producer = Producer({**quiet, "acks": "all"})
        producer.produce(HEALTH_TOPIC, value=token)
        if producer.flush(timeout) != 0:
            raise RuntimeError("health record not delivered")
        consumer = Consumer(
            {
                **quiet,
                "group.id": f"stack-health-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe([HEALTH_TOPIC])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None and msg.value() == token:
                    return
            raise RuntimeError("health record not consumed back")
        finally:
            consumer.close()


def _kraft_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as kafka-storage random-uuid)."""
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):  # the storage tool would read it as an option
            return cluster_id
