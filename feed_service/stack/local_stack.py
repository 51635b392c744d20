"""The local stack as one object: fetch jars, start Kafka and Cassandra, wait until they answer.

``up`` is idempotent (running services are reused, never duplicated) and fails with a message that
names the service and its log file when one does not answer in time. ``down`` stops exactly the
processes recorded in the stack's pid files.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from feed_service.errors import StackError
from feed_service.stack import maven
from feed_service.stack.cassandra_node import CassandraNode
from feed_service.stack.config import StackConfig, port_open
from feed_service.stack.kafka_node import KafkaNode

log = logging.getLogger(__name__)

#: Seconds to wait for each service to answer after start.
KAFKA_READY_TIMEOUT = 90.0
CASSANDRA_READY_TIMEOUT = 240.0


class _Exited(StackError):
    """The service process is gone: waiting longer cannot help."""


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    endpoint: str
    log_file: str


def wait_until(check: Callable[[], None], *, timeout: float, interval: float = 1.0) -> Exception | None:
    """Call ``check`` until it returns without raising or ``timeout`` passes; return the last error."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            check()
            return None
        except _Exited as exc:
            return exc
        except (NameError, ImportError, AttributeError, TypeError):
            raise  # a bug in the probe, not a service that is still starting
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
            last = exc
            time.sleep(interval)
    return last or TimeoutError("timed out")


class LocalStack:
    """Kafka + Cassandra on loopback for one :class:`StackConfig` (Spark runs in-process, local mode)."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.kafka = KafkaNode(config, maven.lib_dir(config.cache_dir, "kafka"))
        self.cassandra = CassandraNode(config, maven.lib_dir(config.cache_dir, "cassandra"))

    def fetch(self) -> dict[str, float]:
        """Fetch (or find cached) every component's jars; return seconds per component."""
        timings: dict[str, float] = {}
        for component in maven.COMPONENTS:
            started = time.monotonic()
            try:
                maven.fetch(self.config.cache_dir, component)
            except maven.FetchError as exc:
                raise StackError(str(exc)) from exc
            timings[f"fetch {component}"] = time.monotonic() - started
        return timings

    def up(self) -> dict[str, float]:
        """Fetch, start and wait for both services. Returns seconds per step, for the record."""
        timings = self.fetch()
        self.config.save()
        nodes = (
            (self.kafka, self.config.kafka_port, KAFKA_READY_TIMEOUT),
            (self.cassandra, self.config.cassandra_port, CASSANDRA_READY_TIMEOUT),
        )
        started_at = time.monotonic()
        for node, port, _ in nodes:
            if not node.process.is_running() and port_open(self.config.host, port):
                raise StackError(
                    f"{node.process.name}: port {self.config.host}:{port} is taken by another process; "
                    f"set another port (see README) or stop that process"
                )
            node.start()  # both JVMs boot in parallel
        for node, _, timeout in nodes:
            def check(node=node) -> None:
                if not node.process.is_running():
                    raise _Exited("process exited")
                node.probe()

            error = wait_until(check, timeout=max(5.0, timeout - (time.monotonic() - started_at)))
            if error is not None:
                alive = "running" if node.process.is_running() else "exited"
                raise StackError(
                    f"{node.process.name} did not answer within {timeout:.0f}s ({alive}): {error}\n"
                    f"log file: {node.process.log_file}\n--- last lines ---\n{node.process.log_tail()}"
                )
            timings[f"{node.process.name} ready"] = time.monotonic() - started_at
        return timings

    def down(self) -> list[str]:
        """Stop the services this stack started; return the names of those that were running."""
        stopped = []
        for node in (self.cassandra, self.kafka):
            if node.process.stop():
                stopped.append(node.process.name)
        return stopped

    def status(self) -> list[ServiceStatus]:
        c = self.config
        return [
            ServiceStatus("kafka", self.kafka.process.is_running(), self.kafka.process.pid(),
                          c.kafka_bootstrap, str(self.kafka.process.log_file)),
            ServiceStatus("cassandra", self.cassandra.process.is_running(), self.cassandra.process.pid(),
                          f"{c.host}:{c.cassandra_port}", str(self.cassandra.process.log_file)),
        ]
