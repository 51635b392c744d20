"""A single Cassandra 5.0 node on loopback, run from ``cassandra-all`` with a project-written config.

The binary tarball of Cassandra 5.0 is not on Maven Central, so the node is started the way
``bin/cassandra`` would start it: ``CassandraDaemon`` in the foreground of a detached JVM, with the
JVM options of Cassandra's own ``jvm17-server.options`` and a small heap for a 2-core machine. The
start script's refusal to run as root (``-R``) lives in the script only, so it does not apply here.
"""

from __future__ import annotations

import logging
from pathlib import Path

from feed_service.stack.config import StackConfig
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

    def __init__(self, config: StackConfig, lib_dir: Path) -> None:
        self.config = config
        self.lib_dir = lib_dir
        self.home = config.data_dir / "cassandra"
        self.process = ServiceProcess(NAME, self.home / "cassandra.pid", self.home / "cassandra.log")

    @property
    def yaml_file(self) -> Path:
        return self.home / "conf" / "cassandra.yaml"

    def _render(self) -> None:
        c = self.config
        data = self.home / "data"
        conf = self.home / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        yaml = f"""\
cluster_name: feed-local
num_tokens: 16
allocate_tokens_for_local_replication_factor: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
data_file_directories: [{data / 'data'}]
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
      - seeds: "{c.host}:{c.cassandra_storage_port}"
listen_address: {c.host}
rpc_address: {c.host}
storage_port: {c.cassandra_storage_port}
ssl_storage_port: {c.cassandra_storage_port}
native_transport_port: {c.cassandra_port}
start_native_transport: true
endpoint_snitch: SimpleSnitch
concurrent_reads: 16
concurrent_writes: 16
concurrent_counter_writes: 8
memtable_heap_space: 256MiB
memtable_offheap_space: 256MiB
key_cache_size: 32MiB
disk_access_mode: mmap_index_only
# A single node on a small machine: no need to wait for gossip or peers.
auto_bootstrap: false
# Timeline deletes leave tombstones that a page may scan; warn late, fail later.
tombstone_warn_threshold: 10000
tombstone_failure_threshold: 200000
# The writers send small UNLOGGED batches of rows (feed_service/store/writer.py).
batch_size_warn_threshold: 64KiB
batch_size_fail_threshold: 640KiB
unlogged_batch_across_partitions_warn_threshold: 100
materialized_views_enabled: false
sasi_indexes_enabled: false
user_defined_functions_enabled: false
"""
        self.yaml_file.write_text(yaml)
        (conf / "logback.xml").write_text(LOGBACK_XML)

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

    def probe(self, timeout: float = 10.0) -> None:
        """Run a CQL query against the node; raises if it does not answer."""
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile

        from cassandra.policies import WhiteListRoundRobinPolicy

        logging.getLogger("cassandra").setLevel(logging.CRITICAL)  # refused connections are expected here
        cluster = Cluster(
            [self.config.host],
            port=self.config.cassandra_port,
            connect_timeout=timeout,
            execution_profiles={
                EXEC_PROFILE_DEFAULT: ExecutionProfile(
                    load_balancing_policy=WhiteListRoundRobinPolicy([self.config.host]), request_timeout=timeout
                )
            },
            protocol_version=5,
        )
        try:
            session = cluster.connect()
            row = session.execute("SELECT release_version FROM system.local").one()
            if row is None:
                raise RuntimeError("system.local returned no row")
        finally:
            cluster.shutdown()
            logging.getLogger("cassandra").setLevel(logging.NOTSET)

