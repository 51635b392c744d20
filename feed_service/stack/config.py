"""Where a local stack lives and which loopback ports it uses.

Defaults come from environment variables so that the demo, the CLI and a developer's shell agree;
the test suite builds its own :class:`StackConfig` with free ports and a private data folder.
Folders not set by FEED_STACK_DIR / FEED_CACHE_DIR are under ``.stack/`` in the current directory
(the scripts run from the repository root): the package never assumes it sits in a source tree.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from feed_service.settings import Settings

#: Downloads (Maven repository, jars), relative to the current directory: shared by the stacks
#: started from there (the developer's and the test suite's), git-ignored.
DEFAULT_CACHE_DIR = Path(".stack") / "cache"
#: Data, logs and pid files of the developer's stack, relative to the current directory, git-ignored.
DEFAULT_DATA_DIR = Path(".stack") / "local"
#: The same for the developer's cluster stack: a folder and ports of its own, so both can run at once.
DEFAULT_CLUSTER_DATA_DIR = Path(".stack") / "cluster"
CLUSTER_PORTS = {"kafka_port": 19092, "kafka_controller_port": 19093, "cassandra_port": 19042,
                 "cassandra_storage_port": 17000, "spark_master_port": 17077, "spark_webui_port": 18080}

LOOPBACK = "127.0.0.1"

SINGLE = "single"
"""One Kafka broker, one Cassandra node, Spark in local mode in the job's process (the default)."""
CLUSTER = "cluster"
"""Three Kafka brokers, three Cassandra nodes, a Spark standalone master with two workers (docs/cluster.md)."""
TOPOLOGIES = (SINGLE, CLUSTER)
#: Heaps of a cluster's nodes: three of each JVM (plus Spark's) must fit beside the jobs on a small machine.
CLUSTER_HEAPS = {"kafka_heap": "384m", "cassandra_heap": "768m"}

#: The loopback addresses of a cluster's nodes: node i of every service listens on CLUSTER_HOSTS[i]
#: (all of 127/8 is the loopback interface on Linux), so all nodes of a service share one port number,
#: as a Cassandra ring's native port must for the driver.
CLUSTER_HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
#: The Cassandra data centre of the cluster topology (GossipingPropertyFileSnitch; one rack per node).
CLUSTER_DATA_CENTRE = "datacenter1"


#: The settings a stack decides (:meth:`StackConfig.environment`).
STACK_VARIABLES = frozenset({
    "FEED_KAFKA_SECURITY_PROTOCOL", "FEED_CASSANDRA_TLS", "FEED_CASSANDRA_AUTH", "FEED_TLS_CA_FILE",
    "FEED_CREDENTIALS_DIR", "FEED_KAFKA_BOOTSTRAP", "FEED_CASSANDRA_HOSTS", "FEED_CASSANDRA_PORT", "FEED_CASSANDRA_REPLICATION",
    "FEED_CASSANDRA_LOCAL_DC", "FEED_CASSANDRA_WRITE_CONSISTENCY", "FEED_CASSANDRA_READ_CONSISTENCY",
    "FEED_TOPIC_REPLICATION", "FEED_TOPIC_MIN_INSYNC_REPLICAS",
})


def default_cache_dir() -> Path:
    """FEED_CACHE_DIR, else ``.stack/cache`` in the current directory; absolute, as child processes
    (Maven, the JVMs, the stream job) may run elsewhere."""
    return Path(os.environ.get("FEED_CACHE_DIR") or DEFAULT_CACHE_DIR).absolute()


def default_data_dir(topology: str = "single") -> Path:
    """FEED_STACK_DIR, else ``.stack/local`` (``.stack/cluster`` for the cluster topology) in the current
    directory; absolute."""
    default = DEFAULT_CLUSTER_DATA_DIR if topology == CLUSTER else DEFAULT_DATA_DIR
    return Path(os.environ.get("FEED_STACK_DIR") or default).absolute()


@dataclass(frozen=True, slots=True)
class StackConfig:
    """Ports and folders of one local stack: :data:`SINGLE` (Kafka broker, Cassandra node, Spark in local
    mode) or :data:`CLUSTER` (every service's node i on ``CLUSTER_HOSTS[i]``, same ports)."""

    data_dir: Path = field(default_factory=DEFAULT_DATA_DIR.absolute)
    cache_dir: Path = field(default_factory=DEFAULT_CACHE_DIR.absolute)
    host: str = LOOPBACK
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    cassandra_port: int = 9042
    cassandra_storage_port: int = 7000
    kafka_heap: str = "512m"
    cassandra_heap: str = "1g"
    topology: str = SINGLE
    spark_master_port: int = 7077
    spark_webui_port: int = 8080
    secure: bool = False
    """TLS and logins on every link, least-privilege roles (docs/security.md): the cluster topology's
    default; an opt-in for the single-node stack, which stays plaintext on loopback for speed."""

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"unknown stack topology {self.topology!r} (one of {', '.join(TOPOLOGIES)})")

    @property
    def hosts(self) -> tuple[str, ...]:
        """The addresses of the nodes of each service: one per node."""
        return CLUSTER_HOSTS if self.topology == CLUSTER else (self.host,)

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"{host}:{self.kafka_port}" for host in self.hosts)

    @property
    def spark_master_url(self) -> str | None:
        """The standalone master of a cluster stack; None for a single-node stack (Spark in local mode)."""
        return f"spark://{self.host}:{self.spark_master_port}" if self.topology == CLUSTER else None

    def settings(self, *, keyspace: str = "feed") -> "Settings":
        """The service settings that point at this stack (a cluster: replication 3, quorum reads and writes;
        a secured stack: TLS and the roles' logins, no role chosen: each component takes its own)."""
        from feed_service.settings import Settings

        settings = Settings(kafka_bootstrap=self.kafka_bootstrap, cassandra_hosts=self.hosts,
                            cassandra_port=self.cassandra_port, keyspace=keyspace)
        if self.secure:
            from feed_service.stack.stack_secrets import StackSecrets

            secrets = StackSecrets(self)
            settings = settings.replace(kafka_security_protocol="SASL_SSL", cassandra_tls=True, cassandra_auth=True,
                                        tls_ca_file=str(secrets.ca_file),
                                        credentials_dir=str(secrets.credentials_dir))
        if self.topology == SINGLE:
            return settings
        return settings.replace(
            cassandra_replication=f"NetworkTopologyStrategy:{CLUSTER_DATA_CENTRE}={len(self.hosts)}",
            cassandra_local_dc=CLUSTER_DATA_CENTRE, write_consistency="LOCAL_QUORUM",
            read_consistency="LOCAL_QUORUM", topic_replication=len(self.hosts), topic_min_insync_replicas=2)

    def environment(self) -> dict[str, str]:
        """The environment that points the CLI, the jobs and the server at this stack: where its nodes
        are and, for a cluster, replication and consistency (other settings are left to the caller)."""
        env = {name: value for name, value in self.settings().to_env().items() if name in STACK_VARIABLES}
        if self.spark_master_url:
            env["FEED_SPARK_MASTER"] = self.spark_master_url
        if self.secure:
            from feed_service.stack.stack_secrets import StackSecrets

            env.update(StackSecrets(self).environment())
        return env

    @classmethod
    def from_env(cls, *, topology: str | None = None) -> "StackConfig":
        """Defaults overridden by FEED_STACK_DIR, FEED_CACHE_DIR, FEED_KAFKA_PORT, FEED_CASSANDRA_PORT...;
        ``topology`` (else FEED_STACK_TOPOLOGY, else single) also picks the defaults of folder, ports
        and heaps (a cluster's differ, so that both stacks can run side by side)."""
        env = os.environ
        topology = topology or env.get("FEED_STACK_TOPOLOGY", SINGLE)
        base = cls(topology=topology, **({**CLUSTER_HEAPS, **CLUSTER_PORTS} if topology == CLUSTER else {}))
        from feed_service.settings import parse_flag

        secure = parse_flag(env.get("FEED_STACK_SECURE", "1" if topology == CLUSTER else "0"), "FEED_STACK_SECURE")
        return replace(
            base,
            data_dir=default_data_dir(topology),
            cache_dir=default_cache_dir(),
            kafka_port=int(env.get("FEED_KAFKA_PORT", base.kafka_port)),
            kafka_controller_port=int(env.get("FEED_KAFKA_CONTROLLER_PORT", base.kafka_controller_port)),
            cassandra_port=int(env.get("FEED_CASSANDRA_PORT", base.cassandra_port)),
            cassandra_storage_port=int(env.get("FEED_CASSANDRA_STORAGE_PORT", base.cassandra_storage_port)),
            cassandra_heap=env.get("FEED_CASSANDRA_HEAP", base.cassandra_heap),
            kafka_heap=env.get("FEED_KAFKA_HEAP", base.kafka_heap),
            spark_master_port=int(env.get("FEED_SPARK_MASTER_PORT", base.spark_master_port)),
            spark_webui_port=int(env.get("FEED_SPARK_WEBUI_PORT", base.spark_webui_port)),
            secure=secure,
        )

    @classmethod
    def with_free_ports(cls, data_dir: Path, cache_dir: Path | None = None, *, topology: str = SINGLE,
                        **changes: object) -> "StackConfig":
        """A stack beside any other: its own folder and ports the kernel reports free right now (on
        every address the topology's nodes use)."""
        hosts = CLUSTER_HOSTS if topology == CLUSTER else (LOOPBACK,)
        ports = free_ports(6, hosts=hosts)
        if topology == CLUSTER:
            changes = {**CLUSTER_HEAPS, "secure": True, **changes}
        return cls(
            data_dir=data_dir,
            cache_dir=cache_dir if cache_dir is not None else default_cache_dir(),
            kafka_port=ports[0],
            kafka_controller_port=ports[1],
            cassandra_port=ports[2],
            cassandra_storage_port=ports[3],
            spark_master_port=ports[4],
            spark_webui_port=ports[5],
            topology=topology,
            **changes,  # type: ignore[arg-type]
        )

    # The stack records its config on `up`, so `status`/`down` and other processes find it again.
    @property
    def record_file(self) -> Path:
        return self.data_dir / "stack.json"

    def save(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        record = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}
        self.record_file.write_text(json.dumps(record, indent=2))

    @classmethod
    def load(cls, data_dir: Path) -> "StackConfig | None":
        try:
            record = json.loads((data_dir / "stack.json").read_text())
        except (OSError, ValueError):
            return None
        record["data_dir"] = Path(record["data_dir"])
        record["cache_dir"] = Path(record["cache_dir"])
        record.setdefault("secure", False)  # recorded before stacks could be secured
        return cls(**record)


def free_ports(count: int, *, hosts: tuple[str, ...] = (LOOPBACK,)) -> list[int]:
    """Distinct TCP ports free on loopback right now, on every address of ``hosts`` (held open together
    so they differ)."""
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((hosts[0], 0))
            sockets.append(s)
            port = s.getsockname()[1]
            if all(_bindable(host, port) for host in hosts[1:]):
                ports.append(port)
        return ports
    finally:
        for s in sockets:
            s.close()


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
