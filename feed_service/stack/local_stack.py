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
from feed_service.stack.config import CLUSTER, StackConfig, port_open
from feed_service.stack.kafka_node import KafkaNode

log = logging.getLogger(__name__)

#: Seconds to wait for each service to answer after start.
KAFKA_READY_TIMEOUT = 90.0
CASSANDRA_READY_TIMEOUT = 240.0
SPARK_READY_TIMEOUT = 240.0


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
    """Kafka + Cassandra on loopback for one :class:`StackConfig`: one node each (Spark runs in the job's
    process, local mode), or for the cluster topology three of each plus a Spark standalone master and
    two workers (docs/cluster.md)."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        kafka_lib = maven.lib_dir(config.cache_dir, "kafka")
        cassandra_lib = maven.lib_dir(config.cache_dir, "cassandra")
        self.kafka_nodes = [KafkaNode(config, kafka_lib, i) for i in range(len(config.hosts))]
        self.cassandra_nodes = [CassandraNode(config, cassandra_lib, i) for i in range(len(config.hosts))]
        self.spark = None
        if config.topology == CLUSTER:
            from feed_service.stack.spark_standalone import SparkStandalone

            self.spark = SparkStandalone.for_stack(config)

    @property
    def kafka(self) -> KafkaNode:
        """The first broker (the only one of a single-node stack)."""
        return self.kafka_nodes[0]

    @property
    def cassandra(self) -> CassandraNode:
        """The first Cassandra node (the only one of a single-node stack)."""
        return self.cassandra_nodes[0]

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
        """Fetch, start and wait for every service. Returns seconds per step, for the record."""
        self._refuse_changed_security()
        timings = self.fetch()
        self.config.save()
        if self.config.secure:
            from feed_service.stack.stack_secrets import StackSecrets

            started = time.monotonic()
            StackSecrets(self.config).prepare()  # before any node renders a config that names the files
            timings["secrets"] = time.monotonic() - started
        nodes = [(node, self.config.kafka_port, KAFKA_READY_TIMEOUT) for node in self.kafka_nodes]
        nodes += [(node, self.config.cassandra_port, CASSANDRA_READY_TIMEOUT) for node in self.cassandra_nodes]
        started_at = time.monotonic()
        for node, port, _ in nodes:
            if not node.process.is_running() and port_open(node.host, port):
                raise StackError(
                    f"{node.process.name}: port {node.host}:{port} is taken by another process; "
                    f"set another port (see README) or stop that process"
                )
            node.start()  # all JVMs boot in parallel
        if self.spark is not None:
            self.spark.start()
        for node, _, timeout in nodes:
            self._wait(node.process, node.probe, timeout, started_at)
            timings[f"{node.process.name} ready"] = time.monotonic() - started_at
        if self.config.secure:
            started = time.monotonic()
            self._ensure_cassandra_roles()
            timings["cassandra roles"] = time.monotonic() - started
        if self.spark is not None:
            self._wait_spark(started_at)
            timings["spark standalone ready"] = time.monotonic() - started_at
        return timings

    def _ensure_cassandra_roles(self) -> None:
        """The secured stack's Cassandra logins (made on its first start, checked after: cassandra_roles)."""
        from feed_service.stack.cassandra_roles import ensure_roles

        try:
            ensure_roles(self.config, self.cassandra)
        except Exception as exc:  # noqa: BLE001 - reported with the node's log
            process = self.cassandra.process
            raise StackError(f"cassandra roles could not be set up: {type(exc).__name__}: {exc}\n"
                             f"log file: {process.log_file}") from exc

    def _refuse_changed_security(self) -> None:
        """A stack's data is made plaintext or secured once: brokers get their logins when their storage
        is formatted and Cassandra its roles on the first start, so the other mode cannot reuse it."""
        recorded = StackConfig.load(self.config.data_dir)
        formatted = any((node.home / "data").exists() for node in (*self.kafka_nodes, *self.cassandra_nodes))
        if recorded is not None and recorded.secure != self.config.secure and formatted:
            made = "secured" if recorded.secure else "plaintext"
            raise StackError(f"the stack in {self.config.data_dir} was made {made}; its data cannot be "
                             f"{'secured' if self.config.secure else 'made plaintext'} in place: stop it and remove "
                             f"the folder, or start it {'with --secure' if recorded.secure else 'with --no-secure'} "
                             "as before (docs/security.md)")

    def wait_healthy(self, node: KafkaNode | CassandraNode, timeout: float | None = None) -> None:
        """Until ``node`` (started again after a crash, say) answers its probe; :class:`StackError` if not."""
        default = KAFKA_READY_TIMEOUT if isinstance(node, KafkaNode) else CASSANDRA_READY_TIMEOUT
        self._wait(node.process, node.probe, timeout or default, time.monotonic())

    def _wait(self, process, probe: Callable[[], None], timeout: float, started_at: float) -> None:
        def check() -> None:
            if not process.is_running():
                raise _Exited("process exited")
            probe()

        error = wait_until(check, timeout=max(5.0, timeout - (time.monotonic() - started_at)))
        if error is not None:
            alive = "running" if process.is_running() else "exited"
            raise StackError(
                f"{process.name} did not answer within {timeout:.0f}s ({alive}): {error}\n"
                f"log file: {process.log_file}\n--- last lines ---\n{process.log_tail()}"
            )

    def _wait_spark(self, started_at: float) -> None:
        assert self.spark is not None
        try:
            self.spark.wait_ready(max(5.0, SPARK_READY_TIMEOUT - (time.monotonic() - started_at)))
        except Exception as exc:  # noqa: BLE001 - reported with the logs' location
            raise StackError(f"spark standalone did not get ready: {exc}") from exc

    def down(self) -> list[str]:
        """Stop the services this stack started; return the names of those that were running. The nodes
        of a cluster stop side by side (each one's SIGTERM grace would otherwise add up)."""
        from concurrent.futures import ThreadPoolExecutor

        stopped = list(self.spark.stop()) if self.spark is not None else []
        nodes = (*self.cassandra_nodes, *self.kafka_nodes)
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            results = list(pool.map(lambda node: node.process.stop(), nodes))
        return stopped + [node.process.name for node, was_running in zip(nodes, results) if was_running]

    def status(self) -> list[ServiceStatus]:
        c = self.config
        statuses = [ServiceStatus(node.process.name, node.process.is_running(), node.process.pid(), node.bootstrap,
                                  str(node.process.log_file)) for node in self.kafka_nodes]
        statuses += [ServiceStatus(node.process.name, node.process.is_running(), node.process.pid(),
                                   f"{node.host}:{c.cassandra_port}", str(node.process.log_file))
                     for node in self.cassandra_nodes]
        if self.spark is not None:
            statuses += [ServiceStatus(*status) for status in self.spark.status()]
        return statuses
