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

LOOPBACK = "127.0.0.1"


def default_cache_dir() -> Path:
    """FEED_CACHE_DIR, else ``.stack/cache`` in the current directory; absolute, as child processes
    (Maven, the JVMs, the stream job) may run elsewhere."""
    return Path(os.environ.get("FEED_CACHE_DIR") or DEFAULT_CACHE_DIR).absolute()


def default_data_dir() -> Path:
    """FEED_STACK_DIR, else ``.stack/local`` in the current directory; absolute."""
    return Path(os.environ.get("FEED_STACK_DIR") or DEFAULT_DATA_DIR).absolute()


@dataclass(frozen=True, slots=True)
class StackConfig:
    """Ports and folders of one local stack (Kafka broker, Cassandra node, Spark in local mode)."""

    data_dir: Path = field(default_factory=DEFAULT_DATA_DIR.absolute)
    cache_dir: Path = field(default_factory=DEFAULT_CACHE_DIR.absolute)
    host: str = LOOPBACK
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    cassandra_port: int = 9042
    cassandra_storage_port: int = 7000
    kafka_heap: str = "512m"
    cassandra_heap: str = "1g"

    @property
    def kafka_bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    def settings(self, *, keyspace: str = "feed") -> "Settings":
        """The service settings that point at this stack."""
        from feed_service.settings import Settings

        return Settings(kafka_bootstrap=self.kafka_bootstrap, cassandra_hosts=(self.host,),
                        cassandra_port=self.cassandra_port, keyspace=keyspace)

    @classmethod
    def from_env(cls) -> "StackConfig":
        """Defaults overridden by FEED_STACK_DIR, FEED_CACHE_DIR, FEED_KAFKA_PORT, FEED_CASSANDRA_PORT..."""
        env = os.environ
        base = cls()
        return replace(
            base,
            data_dir=default_data_dir(),
            cache_dir=default_cache_dir(),
            kafka_port=int(env.get("FEED_KAFKA_PORT", base.kafka_port)),
            kafka_controller_port=int(env.get("FEED_KAFKA_CONTROLLER_PORT", base.kafka_controller_port)),
            cassandra_port=int(env.get("FEED_CASSANDRA_PORT", base.cassandra_port)),
            cassandra_storage_port=int(env.get("FEED_CASSANDRA_STORAGE_PORT", base.cassandra_storage_port)),
            cassandra_heap=env.get("FEED_CASSANDRA_HEAP", base.cassandra_heap),
            kafka_heap=env.get("FEED_KAFKA_HEAP", base.kafka_heap),
        )

    @classmethod
    def with_free_ports(cls, data_dir: Path, cache_dir: Path | None = None) -> "StackConfig":
        """A stack beside any other: its own folder and ports the kernel reports free right now."""
        ports = free_ports(4)
        return cls(
            data_dir=data_dir,
            cache_dir=cache_dir if cache_dir is not None else default_cache_dir(),
            kafka_port=ports[0],
            kafka_controller_port=ports[1],
            cassandra_port=ports[2],
            cassandra_storage_port=ports[3],
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
        return cls(**record)


def free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on loopback (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
