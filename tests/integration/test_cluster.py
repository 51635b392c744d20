"""The whole path on a replicated cluster on loopback: three KRaft brokers, a three-node Cassandra ring
(NetworkTopologyStrategy RF 3, LOCAL_QUORUM reads and writes), the stream on a Spark standalone master
with two workers and the project's code shipped to them (docs/cluster.md).

One stream and one read server for the module (a cluster and a stream on it take a minute to start);
before the stream starts, a job of its own checks the cluster's Spark (code shipped to the executors, a
worker killed mid-job, the worker restarted); then the phases run in order, each publishing the next slice
of one history while it breaks something:

1. no failure: the timelines read through the gRPC API equal the reference, bad records dead-lettered;
2. kill -9 a Kafka broker mid-stream, then bring it back while the stream catches up;
3. kill -9 a Cassandra node mid-stream while reads run (a quorum of the other two answers them), then
   bring it back: once hints are replayed, the revived node alone holds exactly the reference;
4. kill -9 a Spark worker mid-stream: the job goes on with the other worker;
5. the stream stopped, ``feedctl backfill`` with every link secured rebuilds the reference of the whole
   history into a keyspace of its own (the secured backfill's check: the same history serves it),
   provisioned in the background while the phases above run (schema changes on the ring take ~30 s).

After each phase the timelines equal the reference of everything published so far: nothing lost,
duplicated or resurrected. Each phase prints what the failure cost (pytest -s shows it).

The cluster is secured as the topology is by default (docs/security.md): every client below speaks TLS
and logs in as its role (the producer, the stream and its executors, the read server), the read server
requires mutual TLS, Spark's RPC is authenticated and encrypted; the failures are survived with all of it on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.core.reference import reference_timelines
from feed_service.ops.provision import provision
from feed_service.server.config import ServerConfig
from feed_service.server.client_channel import ClientTLS
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.settings import Settings
from feed_service.stack.config import StackConfig
from feed_service.stack.local_stack import LocalStack
from feed_service.stack.stack_secrets import StackSecrets
from feed_service.workload.generator import generate

from tests.support.pipeline import (
    GARBAGE, StreamProcess, consume_all, publish, read_all_home_timelines, read_timelines, timelines_in,
)
from .standalone_driver import DRIVER

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Slices of one history: phase 1 publishes the first at once, then the second the way the failure
#: phases publish theirs but with nothing failing (the baseline of what a failure costs); each failure
#: phase publishes the next slice in chunks, the failure striking after the first chunk.
SLICES = (900, 300, 300, 300, 300)
CHUNKS = 6


class ClusterRun:
    """The module's cluster, its settings, the stream on it, a read server and the history so far."""

    def __init__(self, config: StackConfig, settings: Settings, stream: StreamProcess, server: ServerThread,
                 history: list[dict[str, Any]], backfill: "Future[Settings]") -> None:
        self.config = config
        self.stack = LocalStack(config)
        self.settings = settings
        self.stream = stream
        self.server = server
        self.history = history
        self.published = 0
        self.backfill = backfill
        """The backfill's own keyspace, being provisioned (phase 5)."""

    def next_slice(self, size: int) -> list[dict[str, Any]]:
        events = self.history[self.published : self.published + size]
        self.published += size
        return events

    def published_history(self) -> list[dict[str, Any]]:
        return self.history[: self.published]

    def users(self) -> list[str]:
        return sorted({e[k] for e in self.history for k in ("author_id", "follower_id", "followee_id", "user_id")
                       if k in e})

    def assert_matches_reference(self) -> None:
        """Every home timeline through the gRPC API equals the reference of what was published."""
        expected = reference_timelines(self.published_history(), inbox_cap=self.settings.inbox_cap)
        assert expected and all(len(entries) < self.settings.inbox_cap for entries in expected.values())
        got = read_all_home_timelines(self.server, self.users(), page_size=50)
        assert got == {user: entries for user, entries in expected.items() if entries}

    def publish_with_failure(self, events: list[dict[str, Any]], fail: Callable[[], None],
                             recover: Callable[[], None] = lambda: None) -> float:
        """Publish ``events`` in chunks, calling ``fail`` after the first and ``recover`` after the last
        (the stream catches up meanwhile); returns seconds from the failure until the stream has caught
        up with all of them."""
        chunks = [events[i::CHUNKS] for i in range(CHUNKS)]
        publish(self.settings, chunks[0])
        self.stream.wait_caught_up(timeout=240)
        fail()
        failed_at = time.monotonic()
        for chunk in chunks[1:]:
            publish(self.settings, chunk)
            time.sleep(1)
        recover()
        self.stream.wait_caught_up(timeout=300)
        return time.monotonic() - failed_at


def _kill(pid: int | None) -> None:
    assert pid is not None, "the process to kill is not running"
    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def cluster(cluster_stack_config: StackConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterRun]:
    config = cluster_stack_config
    assert config.secure, "the cluster topology is secured by default"
    # A cap above every timeline of the history: below the cap the view is exact, entry for entry.
    settings = replace(config.settings(keyspace="feed_cluster"), inbox_cap=2000)
    started = time.monotonic()
    provision(settings)
    print(f"\ncluster provisioned in {time.monotonic() - started:.1f}s")
    history = list(generate(users=30, events=sum(SLICES), seed=7, mean_following=6, prefix="c-"))
    # The backfill's keyspace (phase 5) and its grants, provisioned beside the phases: it waits on schema
    # agreement of the ring most of the time (the topics exist).
    background = ThreadPoolExecutor(1, thread_name_prefix="provision-backfill")
    backfill = background.submit(_provisioned, replace(settings, keyspace="feed_cluster_backfill"))
    background.shutdown(wait=False)
    tmp = tmp_path_factory.mktemp("cluster")
    stream = StreamProcess(settings, tmp / "ckpt", log_file=tmp / "stream.log",
                           env=config.environment())  # the standalone master and, secured, Spark's secret
    # every read goes to Cassandra (no read cache): the reads during the node outage are quorum reads.
    # Secured (docs/security.md): TLS, and mutual TLS with the stack's client certificate.
    tls = StackSecrets(config)
    server_cert, client_cert = tls.ca.files("grpc-server"), tls.ca.files("grpc-client")
    server_config = ServerConfig(auth_secret=TEST_SECRET, metrics_port=None, settings=settings,
                                 pull_cache_ttl_s=0, read_cache_keys=0, tls_cert_file=str(server_cert.cert),
                                 tls_key_file=str(server_cert.key), client_ca_file=str(tls.ca_file))
    client = ClientTLS(str(tls.ca_file), str(client_cert.cert), str(client_cert.key))
    stream.start()
    try:
        with ServerThread(server_config, client=client) as server:
            server.feed_live()
            yield ClusterRun(config, settings, stream, server, history, backfill)
    finally:
        code = stream.stop()
        print(f"stream stopped with {code}; log {stream.log_file}")
    # The stream is gone: stopping the cluster's Spark ends every daemon (the stack's stop repeats it).
    spark = LocalStack(config).spark
    assert spark is not None
    stopped = spark.stop(grace=10)
    assert "spark-master" in stopped and not any(s.running for s in spark.status())


def test_cluster_spark_runs_shipped_code_and_survives_a_worker_crash(cluster_stack_config: StackConfig,
                                                                     tmp_path: Path) -> None:
    """The cluster's Spark runs the project's code from the shipped zip, and a job survives the crash
    (SIGKILL) of one worker. First in the module: the stream (``cluster``) would hold every worker's core."""
    standalone = LocalStack(cluster_stack_config).spark
    assert standalone is not None
    try:
        started = time.monotonic()
        standalone.wait_ready(90)
        ready_s = time.monotonic() - started
        assert standalone.start() == [s.pid for s in standalone.status()]  # idempotent: nothing new

        spec = {"home": str(standalone.home), "master_host": standalone.master_host,
                "master_port": standalone.master_port, "master_webui_port": standalone.master_webui_port,
                "worker_hosts": list(standalone.worker_hosts), "worker_ports": list(standalone.worker_ports),
                "worker_webui_ports": list(standalone.worker_webui_ports)}
        (tmp_path / "driver.py").write_text(DRIVER)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FEED_SPARK_MASTER")}
        env.update({k: v for k, v in cluster_stack_config.environment().items() if k == "FEED_SPARK_AUTH_SECRET_FILE"})
        proc = subprocess.run([sys.executable, "driver.py", json.dumps(spec)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, f"driver failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        out = json.loads(lines[-1][len("RESULT "):])
        print(f"\nstandalone ready {ready_s:.1f}s; worker 0 ran {out['executor_processes']}; after its "
              f"SIGKILL: " + ", ".join(f"{k} {out.get(k, -1):.2f}" for k in
                                      ("executor_gone_s", "driver_lost_s", "master_lost_s", "slow_job_s", "after_s")))

        assert out["master"] == standalone.master_url and out["executors"] == 2
        code_zip = Path(out["py_files"].split(",")[-1])
        assert code_zip.name.startswith("feed-code-") and code_zip.is_file()
        for feed_file, jobs_file, cwd, topics in out["where"]:
            # The executor's copy of the zip, in its own folder under its worker's work dir (SparkFiles'
            # root on an executor is its working directory, so the path is relative to it).
            shipped = Path(cwd) / code_zip.name
            assert os.path.normpath(Path(cwd) / feed_file) == str(shipped / "feed_service" / "__init__.py"), feed_file
            assert os.path.normpath(Path(cwd) / jobs_file) == str(shipped / "spark_jobs" / "__init__.py"), jobs_file
            # The stack's run folder is in the checkout's .stack/: the copy is the worker's, not the sources.
            assert shipped.is_relative_to(standalone.home) and topics > 0
            assert not any(shipped.is_relative_to(REPO_ROOT / package) for package in ("feed_service", "spark_jobs"))
        workers_used = {Path(cwd).relative_to(standalone.home).parts[0] for _, _, cwd, _ in out["where"]}
        assert workers_used == {"worker-0", "worker-1"}  # both executors ran tasks
        assert out["pandas_ok"]

        assert out["killed_pid"] and out["executor_processes"], "worker 0 had no executor to lose"
        assert "executor_gone_s" in out, f"executor outlived its worker: {out['leftover']}"
        assert out["slow_rows"] == list(range(8))  # lost tasks were run again on worker 1
        assert {Path(cwd).relative_to(standalone.home).parts[0] for _, _, cwd, _ in out["after"]} == {"worker-1"}
        assert not standalone.workers[0].is_running()
    finally:
        # the module's stream needs both workers: worker 0 back (also when a check above failed)
        standalone.start_worker(0)
        standalone.wait_ready(60)


def test_stream_on_the_cluster_matches_the_reference_through_grpc(cluster: ClusterRun) -> None:
    events = cluster.next_slice(SLICES[0])
    started = time.monotonic()
    publish(cluster.settings, events, GARBAGE)
    cluster.stream.wait_caught_up(timeout=420)
    print(f"\nphase 1: {len(events)} events caught up {time.monotonic() - started:.1f}s after publishing "
          "(includes the stream's start on the cluster)")
    cluster.assert_matches_reference()
    letters = consume_all(cluster.settings, cluster.settings.topic("dead_letter"), expect=len(GARBAGE))
    assert len(letters) == len(GARBAGE)
    took = cluster.publish_with_failure(cluster.next_slice(SLICES[1]), lambda: None)
    print(f"baseline, nothing failing: caught up {took:.1f}s after the point where a failure would strike")
    cluster.assert_matches_reference()


def test_killing_a_kafka_broker_mid_stream_loses_nothing(cluster: ClusterRun) -> None:
    """The broker is started again once the slice is published and the controller has fenced it (its
    partitions led by the others): the stream catches up while it rejoins (its start overlaps the
    catch-up), then every timeline equals the reference and the broker is healthy."""
    broker = cluster.stack.kafka_nodes[1]
    restarted: list[float] = []

    def restart() -> None:
        _wait_fenced(cluster.settings, len(cluster.config.hosts))
        restarted.append(time.monotonic())
        broker.start()

    took = cluster.publish_with_failure(cluster.next_slice(SLICES[2]), lambda: _kill(broker.process.pid()), restart)
    print(f"\nbroker {broker.name} killed: caught up {took:.1f}s after the kill (restarted meanwhile)")
    cluster.assert_matches_reference()
    cluster.stack.wait_healthy(broker)
    print(f"broker {broker.name} back in {time.monotonic() - restarted[0]:.1f}s")


def test_killing_a_cassandra_node_mid_stream_keeps_reads_answering(cluster: ClusterRun) -> None:
    node = cluster.stack.cassandra_nodes[2]
    reads: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    def read_during_outage() -> None:
        stub = cluster.server.stub()
        users = cluster.users()
        while not stop.is_set():
            started = time.monotonic()
            try:
                stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=users[len(reads) % len(users)], page_size=20),
                                     metadata=cluster.server.auth("checker", "service"), timeout=10)
                reads.append(time.monotonic() - started)
            except Exception as exc:  # noqa: BLE001 - every failed read is reported below
                errors.append(repr(exc))
            time.sleep(0.05)

    reader = threading.Thread(target=read_during_outage, daemon=True)
    reader.start()
    try:
        took = cluster.publish_with_failure(cluster.next_slice(SLICES[3]), lambda: _kill(node.process.pid()))
        cluster.assert_matches_reference()
    finally:
        stop.set()
        reader.join(30)
    reads.sort()
    print(f"\ncassandra {node.name} killed: caught up {took:.1f}s after the kill; {len(reads)} reads during the "
          f"outage, p50 {reads[len(reads) // 2] * 1000:.0f} ms, max {reads[-1] * 1000:.0f} ms, {len(errors)} failed")
    assert reads and not errors, errors[:5]

    started = time.monotonic()
    node.start()
    cluster.stack.wait_healthy(node)
    print(f"cassandra {node.name} back in {time.monotonic() - started:.1f}s")
    # The revived node alone: once the others' hints reach it, it holds every change it missed.
    expected = reference_timelines(cluster.published_history(), inbox_cap=cluster.settings.inbox_cap)
    alone = _node_timelines(cluster.settings, node.host)
    deadline = time.monotonic() + 120
    while alone != expected and time.monotonic() < deadline:
        time.sleep(2)
        alone = _node_timelines(cluster.settings, node.host)
    print(f"revived node converged {time.monotonic() - started:.1f}s after its restart")
    assert alone == {u: e for u, e in expected.items() if e}


def test_killing_a_spark_worker_mid_stream_recovers_on_the_other(cluster: ClusterRun) -> None:
    spark = cluster.stack.spark
    assert spark is not None
    took = cluster.publish_with_failure(cluster.next_slice(SLICES[4]), lambda: spark.kill_worker(0))
    print(f"\nspark worker 1 killed: caught up {took:.1f}s after the kill")
    cluster.assert_matches_reference()
    assert cluster.stream.proc is not None and cluster.stream.proc.poll() is None, "the stream is still running"
    spark.start_worker(0)


def test_the_backfill_with_every_link_secured_rebuilds_the_reference(cluster: ClusterRun, tmp_path: Path) -> None:
    """``feedctl backfill`` as an operator runs it on the secured cluster, over the changelogs the phases
    above filled: Spark on the authenticated standalone master, the changelogs read over SASL_SSL as the
    backfill role, the view written over TLS as the backfill role (into a keyspace of its own, beside
    the stream's); the result is the batch reference, and no password is printed. Last in the module:
    the stream is stopped first, as it holds every worker's core."""
    code = cluster.stream.stop()
    print(f"\nstream stopped with {code} for the backfill")
    spark = cluster.stack.spark
    assert spark is not None
    spark.start()  # idempotent: brings worker 0 back too if the phase before failed before restarting it
    spark.wait_ready(90)
    backfill = cluster.backfill.result(timeout=300)  # the keyspace and its grants (the topics exist)
    env = {**os.environ, **cluster.config.environment(), **backfill.to_env()}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "feed_service", "backfill", "--out", str(tmp_path / "backfill")],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    print(f"secured backfill of {cluster.published} events: exit {proc.returncode} in {time.monotonic() - started:.1f}s")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "stage write: done" in proc.stderr
    expected = reference_timelines(cluster.published_history(), inbox_cap=backfill.inbox_cap)
    assert read_timelines(backfill) == {user: entries for user, entries in expected.items() if entries}
    assert not any(secret in proc.stderr + proc.stdout for secret in _passwords(cluster.config)), \
        "a password in the backfill's output"


def _wait_fenced(settings: Settings, brokers: int, timeout: float = 60) -> None:
    """Until the cluster's metadata lists fewer than ``brokers`` brokers: the controller fenced the
    killed one (after its session timeout) and moved its partitions' leadership to the others."""
    from confluent_kafka.admin import AdminClient

    from feed_service.kafka.client_config import client_config
    from feed_service.security.roles import ADMIN

    admin = AdminClient({**client_config(settings.as_role(ADMIN), ADMIN), "log_level": 0})
    deadline = time.monotonic() + timeout
    listed = brokers
    while time.monotonic() < deadline:
        try:
            listed = len(admin.list_topics(timeout=5).brokers)
        except Exception:  # noqa: BLE001 - a metadata request to the dead broker: ask again
            listed = brokers
        if listed < brokers:
            return
        time.sleep(0.5)
    raise AssertionError(f"{listed} of {brokers} brokers still listed {timeout}s after the kill")


def _provisioned(settings: Settings) -> Settings:
    provision(settings)
    return settings


def _passwords(config: StackConfig) -> list[str]:
    folder = StackSecrets(config).credentials_dir
    return [p.read_text().strip() for p in folder.glob("*/*.password")]


def _node_timelines(settings: Settings, host: str) -> dict[str, list[dict[str, Any]]]:
    """Every home timeline as stored on the node at ``host`` alone (consistency ONE, routed only there)."""
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    from feed_service.store.session import security_options

    profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([host]),
                               consistency_level=ConsistencyLevel.ONE, request_timeout=30)
    cluster = Cluster([host], port=settings.cassandra_port, protocol_version=5,
                      execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                      **security_options(settings.as_role("server")))
    try:
        return timelines_in(cluster.connect(settings.keyspace))
    finally:
        cluster.shutdown()
