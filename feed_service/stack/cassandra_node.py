"""A Cassandra 5.0 node on loopback, run from ``cassandra-all`` with a project-written config.

A single-node stack runs one (SimpleSnitch); a cluster stack one per address of ``StackConfig.hosts``,
all of them seeds, in one data centre with a rack each (GossipingPropertyFileSnitch), each owning one
evenly spaced token given up front: the three can boot at the same time, without bootstrap streaming
or token allocation waiting for the ring (docs/cluster.md).

The binary tarball of Cassandra 5.0 is not on Maven Central, so the node is started the way
``bin/cassandra`` would start it: ``CassandraDaemon`` in the foreground of a detached JVM, with the
JVM options of Cassandra's own ``jvm17-server.options`` and a small heap for a 2-core machine. The
start script's refusal to run as root (``-R``) lives in the script only, so it does not apply here.

A secured stack's node (``StackConfig.secure``, docs/security.md) speaks TLS only, to clients and to
the other nodes (mutual TLS), with PEM key material from the stack's CA, and takes logins
(``PasswordAuthenticator``) checked against permissions (``CassandraAuthorizer``); its roles are
made on the stack's first start (feed_service/stack/cassandra_roles.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

from typing import Any

from feed_service.security.secrets import write_private
from feed_service.stack.config import CLUSTER_DATA_CENTRE, StackConfig
from feed_service.stack.process import ServiceProcess

NAME = "cassandra"

#: From Cassandra's conf/jvm17-server.options (JPMS opens that Cassandra 5 needs on Java 17+).
JVM17_OPTIONS = (
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports", "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
)

LOGBACK_XML = """\
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
  <logger name="org.apache.cassandra" level="INFO"/>
</configuration>
"""


class CassandraNode:
    """Renders ``cassandra.yaml``, starts the daemon and probes it with a CQL query."""

    def __init__(self, config: StackConfig, lib_dir: Path, index: int = 0) -> None:
        """Node ``index`` of ``config.hosts``."""
        self.config = config
        self.lib_dir = lib_dir
        self.index = index
        self.host = config.hosts[index]
        self.clustered = len(config.hosts) > 1
        self.name = f"{NAME}-{index + 1}" if self.clustered else NAME
        self.home = config.data_dir / self.name
        self.process = ServiceProcess(self.name, self.home / "cassandra.pid", self.home / "cassandra.log")

    def _topology_yaml(self) -> str:
        """Snitch and tokens: one node alone, or node ``index`` of a ring that boots all at once."""
        if not self.clustered:
            return "num_tokens: 16\nallocate_tokens_for_local_replication_factor: 1\nendpoint_snitch: SimpleSnitch\n"
        token = -(2**63) + self.index * (2**64 // len(self.config.hosts))
        return f"num_tokens: 1\ninitial_token: {token}\nendpoint_snitch: GossipingPropertyFileSnitch\n"

    @property
    def yaml_file(self) -> Path:
        return self.home / "conf" / "cassandra.yaml"

    def _render(self) -> None:
        c = self.config
        data = self.home / "data"
        conf = self.home / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        topology = self._topology_yaml()
        seeds = '"' + ",".join(f"{host}:{c.cassandra_storage_port}" for host in c.hosts) + '"'
        memtable = max(64, _mib(self.config.cassandra_heap) // 4)
        yaml = f"""\
cluster_name: feed-local
{topology}partitioner: org.apache.cassandra.dht.Murmur3Partitioner
{self._security_yaml()}data_file_directories: [{data / 'data'}]
commitlog_directory: {data / 'commitlog'}
saved_caches_directory: {data / 'saved_caches'}
hints_directory: {data / 'hints'}
cdc_raw_directory: {data / 'cdc_raw'}
commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 32MiB
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: {seeds}
listen_address: {self.host}
rpc_address: {self.host}
storage_port: {c.cassandra_storage_port}
ssl_storage_port: {c.cassandra_storage_port}
native_transport_port: {c.cassandra_port}
start_native_transport: true
concurrent_reads: 16
concurrent_writes: 16
concurrent_counter_writes: 8
memtable_heap_space: {memtable}MiB
memtable_offheap_space: {memtable}MiB
key_cache_size: 32MiB
disk_access_mode: mmap_index_only
# Nodes of an empty ring on a small machine: no data to stream in, no need to wait for peers.
auto_bootstrap: false
# Timeline deletes leave tombstones that a page may scan; warn late, fail later.
tombstone_warn_threshold: 10000
tombstone_failure_threshold: 200000
# The writers send small UNLOGGED batches of rows (feed_service/store/writer.py).
# A quorum write waits for a second replica on the same 2 cores as everything else: wait longer than
# the default 2 s before reporting a timeout the writer would retry anyway.
write_request_timeout: 5000ms
read_request_timeout: 5000ms
batch_size_warn_threshold: 64KiB
batch_size_fail_threshold: 640KiB
unlogged_batch_across_partitions_warn_threshold: 100
materialized_views_enabled: false
sasi_indexes_enabled: false
user_defined_functions_enabled: false
"""
        self.yaml_file.write_text(yaml)
        (conf / "logback.xml").write_text(LOGBACK_XML)
        if self.clustered:
            (conf / "cassandra-rackdc.properties").write_text(
                f"dc={CLUSTER_DATA_CENTRE}\nrack=rack{self.index + 1}\nprefer_local=true\n")

    @property
    def keystore_file(self) -> Path:
        """The node's key and certificate chain in one PEM file (PEMBasedSslContextFactory's keystore)."""
        return self.home / "conf" / "node-keystore.pem"

    def _security_yaml(self) -> str:
        """Logins, permissions and TLS of a secured node; the plaintext stack's open defaults otherwise."""
        if not self.config.secure:
            return "authenticator: AllowAllAuthenticator\nauthorizer: AllowAllAuthorizer\n"
        from feed_service.stack.stack_secrets import StackSecrets

        secrets = StackSecrets(self.config)
        files = secrets.ca.files(secrets.node_name("cassandra", self.index))
        # the key, then the certificate chain (leaf, CA); rebuilt on every start, so a rotation applies
        write_private(self.keystore_file, files.key.read_bytes().rstrip(b"\n") + b"\n" + files.cert.read_bytes())
        tls = f"""\
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: {self.keystore_file}
  truststore: {secrets.ca_file}
  accepted_protocols: [TLSv1.2, TLSv1.3]
"""
        return f"""\
authenticator: PasswordAuthenticator
authorizer: CassandraAuthorizer
role_manager: CassandraRoleManager
client_encryption_options:
  enabled: true
  optional: false
  require_client_auth: false
{tls}server_encryption_options:
  internode_encryption: all
  optional: false
  legacy_ssl_storage_port_enabled: false
  # mutual TLS: a peer must present a certificate of the stack's CA. No endpoint verification:
  # Cassandra 5.0 applies it to inbound connections too, where the JDK refuses it (no ring forms).
  require_client_auth: true
{tls}"""

    def _command(self) -> list[str]:
        heap = self.config.cassandra_heap
        return [
            "java",
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:+ParallelRefProcEnabled",
            "-XX:MaxTenuringThreshold=1",
            "-XX:MaxGCPauseMillis=300",
            "-XX:+AlwaysPreTouch",
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:MaxDirectMemorySize=512m",
            "-Xss256k",
            *JVM17_OPTIONS,
            "-Djava.net.preferIPv4Stack=true",
            "-Dcassandra-foreground=yes",
            f"-Dcassandra.config=file://{self.yaml_file}",
            f"-Dcassandra.storagedir={self.home / 'data'}",
            f"-Dcassandra.logdir={self.home / 'logs'}",
            f"-Dlogback.configurationFile={self.home / 'conf' / 'logback.xml'}",
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
            "-Dcassandra.ring_delay_ms=1000",
            # every node of the ring boots at once with its own tokens (see the module docstring)
            "-Dcassandra.consistent.rangemovement=false",
            "-Dcassandra.superuser_setup_delay_ms=0",
            "-cp",
            f"{self.home / 'conf'}:{self.lib_dir}/*",
            "org.apache.cassandra.service.CassandraDaemon",
        ]

    def start(self) -> int:
        if self.process.is_running():
            return self.process.pid() or 0
        self._render()
        return self.process.start(self._command())

    def open_session(self, login: tuple[str, str] | None = None, timeout: float = 10.0) -> tuple[Any, Any]:
        """A (cluster, session) to this node alone, over TLS on a secured stack, logged in as ``login``
        (user, password) when given; the caller shuts the cluster down."""
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import WhiteListRoundRobinPolicy

        options: dict[str, Any] = {}
        if self.config.secure:
            from feed_service.stack.stack_secrets import StackSecrets
            from feed_service.store.session import tls_context

            options["ssl_context"] = tls_context(str(StackSecrets(self.config).ca_file))
        if login is not None:
            from feed_service.store.session import password_login

            options["auth_provider"] = password_login(*login)
        cluster = Cluster(
            [self.host],
            port=self.config.cassandra_port,
            connect_timeout=timeout,
            execution_profiles={
                EXEC_PROFILE_DEFAULT: ExecutionProfile(
                    load_balancing_policy=WhiteListRoundRobinPolicy([self.host]), request_timeout=timeout
                )
            },
            protocol_version=5,
            **options,
        )
        try:
            return cluster, cluster.connect()
        except Exception:
            cluster.shutdown()
            raise

    def probe(self, timeout: float = 10.0) -> None:
        """Run a CQL query against the node; raises if it does not answer. A secured node is asked as
        the stack's admin, or as the default superuser while the roles do not exist yet."""
        logging.getLogger("cassandra").setLevel(logging.CRITICAL)  # refused connections are expected here
        try:
            cluster, session = self._probe_session(timeout)
            try:
                row = session.execute("SELECT release_version FROM system.local").one()
                if row is None:
                    raise RuntimeError("system.local returned no row")
                if self.clustered:
                    up = len(session.execute("SELECT peer FROM system.peers_v2").all()) + 1
                    if up < len(self.config.hosts):
                        raise RuntimeError(f"{up} of {len(self.config.hosts)} ring members known")
            finally:
                cluster.shutdown()
        finally:
            logging.getLogger("cassandra").setLevel(logging.NOTSET)

    def _probe_session(self, timeout: float) -> tuple[Any, Any]:
        if not self.config.secure:
            return self.open_session(None, timeout)
        from feed_service.stack.cassandra_roles import auth_refused, superuser_logins

        logins = superuser_logins(self.config)
        for i, login in enumerate(logins):
            try:
                return self.open_session(login, timeout)
            except Exception as exc:  # noqa: BLE001 - a refused login tries the next one
                if i == len(logins) - 1 or not auth_refused(exc):
                    raise
        raise AssertionError("unreachable")


def _mib(heap: str) -> int:
    """MiB of a JVM heap size such as ``768m`` or ``1g``.

    >>> (_mib("768m"), _mib("1g"), _mib("2G"))
    (768, 1024, 2048)
    """
    number, unit = int(heap[:-1]), heap[-1].lower()
    return number * {"m": 1, "g": 1024}[unit]
