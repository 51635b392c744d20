"""A single Kafka 4 broker in KRaft mode (broker and controller in one JVM) on loopback."""

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

    def __init__(self, config: StackConfig, lib_dir: Path) -> None:
        self.config = config
        self.lib_dir = lib_dir
        self.home = config.data_dir / "kafka"
        self.process = ServiceProcess(NAME, self.home / "kafka.pid", self.home / "kafka.log")

    @property
    def properties_file(self) -> Path:
        return self.home / "server.properties"

    def _render(self) -> None:
        c = self.config
        self.home.mkdir(parents=True, exist_ok=True)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{c.host}:{c.kafka_controller_port}",
            "listeners": f"PLAINTEXT://{c.host}:{c.kafka_port},CONTROLLER://{c.host}:{c.kafka_controller_port}",
            "advertised.listeners": f"PLAINTEXT://{c.host}:{c.kafka_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.home / "data"),
            "num.partitions": "3",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
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
        cluster_id = _kraft_cluster_id()
        cmd = self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.properties_file))
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"kafka storage format failed: {proc.stdout}{proc.stderr}")

    def start(self) -> int:
        if self.process.is_running():
            return self.process.pid() or 0
        self._render()
        self._format_storage()
        return self.process.start(self._java("kafka.Kafka", str(self.properties_file)))

    def probe(self, timeout: float = 10.0) -> None:
        """Produce one record and consume it back; raises if the broker cannot do that."""
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        bootstrap = self.config.kafka_bootstrap
        quiet = {"bootstrap.servers": bootstrap, "log_level": 0}  # refused connections are expected here
        admin = AdminClient(quiet)
        futures = admin.create_topics([NewTopic(HEALTH_TOPIC, 1, 1)], operation_timeout=timeout)
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
