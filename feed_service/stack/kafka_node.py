"""A Kafka 4 broker in KRaft mode (broker and controller in one JVM) on loopback.

A single-node stack runs one; a cluster stack runs one per address of ``StackConfig.hosts``, all of
them voters of one controller quorum (so losing any one keeps a majority), with internal topics
replicated three times and ``min.insync.replicas=2`` (docs/cluster.md).
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from pathlib import Path

from feed_service.errors import ConfigError
from feed_service.kafka.client_config import SCRAM_MECHANISM, client_config, scram_jaas_config
from feed_service.security.roles import ADMIN, ROLES
from feed_service.security.secrets import login, read_secret, write_private
from feed_service.stack.config import StackConfig
from feed_service.stack.process import ServiceProcess
from feed_service.stack.stack_secrets import StackSecrets

NAME = "kafka"
#: Topic used only by the readiness check (produce/consume round trip).
HEALTH_TOPIC = "__stack_health"
#: The client and inter-broker listener of a secured broker (SASL_SSL).
CLIENT_LISTENER = "SASL_SSL"
#: Passwords the storage tool's ``--add-scram`` syntax carries as they are (new_password()'s alphabet).
_SCRAM_SAFE = re.compile(r"[A-Za-z0-9_\-.~+/]{8,}")

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
        if c.secure:
            props.update(self._secure_props())
            write_private(self.properties_file, "".join(f"{k}={_escaped(v)}\n" for k, v in props.items()))
        else:
            self.properties_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.home / "log4j2.properties").write_text(LOG4J2_PROPERTIES)

    def _secure_props(self) -> dict[str, str]:
        """What a secured broker adds (docs/security.md): clients and brokers on SASL_SSL with SCRAM (the
        brokers as the admin super user), the controller quorum on mutual TLS (KRaft controllers cannot
        use SCRAM: its credentials live in the metadata they serve), every request authorized by ACLs.
        The file then holds the keystore's and the admin's passwords: it is written 0600."""
        c = self.config
        secrets = StackSecrets(c)
        keystore_password = read_secret(secrets.keystore_password_file)
        admin_user, admin_password = login(str(secrets.credentials_dir), ADMIN, "kafka")
        brokers = [f"User:{secrets.node_name(NAME, i)}" for i in range(len(c.hosts))]
        return {
            "listeners": f"{CLIENT_LISTENER}://{self.bootstrap},CONTROLLER://{self.host}:{c.kafka_controller_port}",
            "advertised.listeners": f"{CLIENT_LISTENER}://{self.bootstrap}",
            "inter.broker.listener.name": CLIENT_LISTENER,
            "listener.security.protocol.map": f"CONTROLLER:SSL,{CLIENT_LISTENER}:SASL_SSL",
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.{CLIENT_LISTENER.lower()}.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
                scram_jaas_config(admin_user, admin_password),
            # The controller listener's peers (brokers, other controllers) show a certificate of the CA;
            # its CN (kafka-N) is their principal, a super user.
            "listener.name.controller.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(secrets.ca.files(secrets.node_name(NAME, self.index)).p12),
            "ssl.keystore.password": keystore_password,
            "ssl.key.password": keystore_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(secrets.ca_file),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join([*brokers, f"User:{admin_user}"]),
        }

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
        if self.config.secure:
            self._format_secure(cluster_id)
            return
        cmd = self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.properties_file))
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"kafka storage format failed: {proc.stdout}{proc.stderr}")

    def _format_secure(self, cluster_id: str) -> None:
        """Format with every role's SCRAM credential in the bootstrap metadata (the brokers log in to each
        other as the admin, so it must exist before the first start). The storage tool takes credentials
        only as arguments and reads no file, so they go in a Java launcher argument file (``@file``, 0600,
        deleted at once): the JVM expands it itself, so the passwords never reach ``/proc/*/cmdline``;
        ``-XX:-UsePerfData`` keeps the expanded command out of the world-listable hsperfdata file."""
        secrets = StackSecrets(self.config)
        args = ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.properties_file)]
        for role in ROLES:
            user, password = login(str(secrets.credentials_dir), role, "kafka")
            if not _SCRAM_SAFE.fullmatch(password):
                raise ConfigError(f"the {role} role's Kafka password file holds characters the storage tool's "
                                  f"SCRAM syntax cannot carry (allowed: {_SCRAM_SAFE.pattern})")
            args += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
        argfile = self.home / ".format.args"
        write_private(argfile, "".join(_argfile_quoted(a) + "\n" for a in args))
        try:
            cmd = [*self._java(*args)[:-len(args)], "-XX:-UsePerfData", f"@{argfile}"]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        finally:
            argfile.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise RuntimeError(f"kafka storage format failed: {_redacted(proc.stdout + proc.stderr)}")

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

    def _client_config(self) -> dict:
        """How the probe connects to this broker alone: plaintext, or as the admin over SASL_SSL."""
        if not self.config.secure:
            return {"bootstrap.servers": self.bootstrap}
        settings = self.config.settings().replace(kafka_bootstrap=self.bootstrap)
        return client_config(settings, ADMIN)

    def probe(self, timeout: float = 10.0) -> None:
        """Produce one record and consume it back through this broker; raises if it cannot do that.
        In a cluster, also that every broker has registered (the health topic is fully replicated)."""
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        quiet = {**self._client_config(), "log_level": 0}  # refused connections are expected here
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


def _escaped(value: str) -> str:
    """A value for a Java properties file (backslashes are escapes there)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _argfile_quoted(arg: str) -> str:
    """``arg`` as one argument of a Java launcher argument file (double quotes, backslash escapes)."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _redacted(output: str) -> str:
    """The storage tool's output with any echoed ``password=...`` masked."""
    return re.sub(r"password=[^,\]\s]*", "password=[hidden]", output)


def _kraft_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as kafka-storage random-uuid)."""
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):  # the storage tool would read it as an option
            return cluster_id
