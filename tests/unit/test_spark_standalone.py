"""Which master a session asks for, what it ships to a cluster's executors, and the standalone
cluster's plumbing that needs no running JVM."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import feed_service
from spark_jobs.runtime.code_archive import build_code_archive, package_files
from spark_jobs.runtime.session import (
    CLUSTER_EXECUTOR_CONF,
    DEFAULT_MASTER,
    MASTER_ENV,
    SPARK_CONF_ENV,
    is_local_master,
    launched_by_spark_submit,
    resolve_master,
    session_conf,
)
from feed_service.stack.spark_standalone import SparkStandalone, scala_version, spark_home

SUBMITTED = {"PYSPARK_GATEWAY_PORT": "40123", "PYSPARK_GATEWAY_SECRET": "s"}
DATA_DIR = Path(feed_service.__file__).parent / "_data"


# -- master resolution -------------------------------------------------------------------------

def test_an_explicit_master_wins_over_the_environment_and_spark_submit() -> None:
    assert resolve_master("spark://a:1", {MASTER_ENV: "spark://b:2", **SUBMITTED}) == "spark://a:1"


def test_the_environment_names_the_master_when_the_caller_does_not() -> None:
    assert resolve_master(None, {MASTER_ENV: " spark://b:2 "}) == "spark://b:2"
    assert resolve_master(None, {MASTER_ENV: "spark://b:2", **SUBMITTED}) == "spark://b:2"


def test_under_spark_submit_the_submitted_master_is_kept() -> None:
    assert launched_by_spark_submit(SUBMITTED)
    assert resolve_master(None, SUBMITTED) is None  # build_session calls no .master()
    assert resolve_master(None, {MASTER_ENV: "", **SUBMITTED}) is None


def test_otherwise_local_mode_as_before() -> None:
    assert not launched_by_spark_submit({})
    assert resolve_master(None, {}) == resolve_master(None, {MASTER_ENV: "  "}) == DEFAULT_MASTER == "local[2]"


def test_only_local_mode_runs_tasks_on_the_drivers_installation() -> None:
    assert all(map(is_local_master, ("local", "local[2]", "local[*]")))
    assert not any(map(is_local_master, ("spark://127.0.0.1:7077", "k8s://https://k:443", "local-cluster[2,1,1024]")))


# -- session settings --------------------------------------------------------------------------

def test_local_mode_settings_ship_no_code() -> None:
    conf = session_conf(jars=[Path("/j/a.jar"), Path("/j/b.jar")], code_zip=None, submitted=False, env={})
    assert conf["spark.jars"] == "/j/a.jar,/j/b.jar" and conf["spark.driver.host"] == "127.0.0.1"
    assert "spark.submit.pyFiles" not in conf and "spark.executor.memory" not in conf


def test_a_cluster_gets_the_code_zip_and_executor_sizing(tmp_path: Path) -> None:
    code_zip = tmp_path / "feed-code-x.zip"
    conf = session_conf(jars=[], code_zip=code_zip, submitted=False, env={},
                        extra_conf={"spark.submit.pyFiles": "/mine.zip", "spark.executor.memory": "2g"})
    assert conf["spark.submit.pyFiles"] == f"/mine.zip,{code_zip}"
    assert conf["spark.executor.memory"] == "2g"  # the caller's setting wins
    assert conf["spark.executor.cores"] == CLUSTER_EXECUTOR_CONF["spark.executor.cores"]
    assert "spark.cores.max" not in conf
    env_conf = session_conf(jars=[], code_zip=code_zip, submitted=False, env={SPARK_CONF_ENV: "spark.executor.cores=2"})
    assert env_conf["spark.executor.cores"] == "2"


def test_spark_submit_keeps_what_only_its_launch_sets(tmp_path: Path) -> None:
    conf = session_conf(jars=[Path("/j/a.jar")], code_zip=tmp_path / "z.zip", submitted=True, env={})
    for key in ("spark.jars", "spark.driver.host", "spark.driver.bindAddress", "spark.driver.memory",
                "spark.submit.pyFiles", "spark.executor.memory"):
        assert key not in conf  # the zip is added with addPyFile once the context exists
    assert conf["spark.sql.streaming.stateStore.providerClass"].endswith("RocksDBStateStoreProvider")


# -- code archive ------------------------------------------------------------------------------

def test_archive_holds_both_packages_and_the_package_data(tmp_path: Path) -> None:
    names = set(zipfile.ZipFile(build_code_archive(tmp_path)).namelist())
    assert {"feed_service/__init__.py", "feed_service/resources.py", "spark_jobs/__init__.py",
            "spark_jobs/stream/__main__.py", "feed_service/stack/maven/spark-kafka.pom.xml"} <= names
    data = {f"feed_service/_data/{p.relative_to(DATA_DIR).as_posix()}" for p in DATA_DIR.rglob("*") if p.is_file()}
    assert data and data <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or "_pb2" in n]


def test_same_content_same_file_and_bytes(tmp_path: Path) -> None:
    first = build_code_archive(tmp_path / "a")
    mtime = first.stat().st_mtime_ns
    assert build_code_archive(tmp_path / "a") == first and first.stat().st_mtime_ns == mtime  # reused
    other = build_code_archive(tmp_path / "b")
    assert other.name == first.name and other.read_bytes() == first.read_bytes()
    assert first.parent.name == "pyfiles" and first.name.startswith("feed-code-")


def test_changed_content_gets_another_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "src" / "shipme"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.pyc").write_bytes(b"junk")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    before = build_code_archive(tmp_path / "cache", ("shipme",))
    assert zipfile.ZipFile(before).namelist() == ["shipme/__init__.py"]
    (package / "__init__.py").write_text("VALUE = 2\n")
    after = build_code_archive(tmp_path / "cache", ("shipme",))
    assert after != before and before.is_file()  # the old zip stays for whoever still serves it


def test_executor_code_imports_from_the_archive_alone(tmp_path: Path) -> None:
    """What a Spark task may import (all of spark_jobs, feed_service but the gRPC server and client) and the package
    data load from the zip, with the editable install's finder out of the way."""
    archive = build_code_archive(tmp_path)
    script = f"""
import importlib, pkgutil, sys
sys.meta_path[:] = [f for f in sys.meta_path if "Editable" not in getattr(f, "__name__", type(f).__name__)]
sys.path.insert(0, {str(archive)!r})
import feed_service, spark_jobs
from feed_service import resources
assert feed_service.__file__.startswith({str(archive)!r}), feed_service.__file__
assert resources.read_json(resources.TOPICS) and "CREATE TABLE" in resources.read_text(resources.CQL)
failed = []
server = ("feed_service.api", "feed_service.server", "feed_service.client")  # the gRPC stubs are not shipped
for package in (spark_jobs, feed_service):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + ".",
                                        onerror=lambda name: name.startswith(server) or failed.append(name)):
        if module.name.endswith("__main__") or module.name.startswith(server):
            continue
        loaded = importlib.import_module(module.name)
        assert loaded.__file__.startswith({str(archive)!r}), loaded.__file__
print("ok", failed)
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok []"


def test_the_tracked_files_are_the_ones_shipped() -> None:
    names = [name for name, _ in package_files()]
    assert names == sorted(names) and len(names) == len(set(names))


# -- standalone cluster ------------------------------------------------------------------------

def test_standalone_layout_and_urls(tmp_path: Path) -> None:
    cluster = SparkStandalone(tmp_path, master_port=7177, master_webui_port=8180, worker_ports=(7178, 7179))
    assert cluster.master_url == "spark://127.0.0.1:7177"
    assert [w.name for w in cluster.workers] == ["spark-worker-0", "spark-worker-1"]
    assert len({w.pid_file for w in cluster.workers} | {cluster.master.pid_file}) == 3
    rows = cluster.status()
    assert [(r.name, r.running, r.pid) for r in rows] == [
        ("spark-master", False, None), ("spark-worker-0", False, None), ("spark-worker-1", False, None)]
    assert rows[1].endpoint == "127.0.0.2:7178"
    assert cluster.stop() == [] and cluster.kill_worker(0) is None
    with pytest.raises(ValueError):
        SparkStandalone(tmp_path, master_port=1, master_webui_port=2, worker_ports=(3,))


def test_free_ports_are_free_on_each_address(tmp_path: Path) -> None:
    cluster = SparkStandalone.with_free_ports(tmp_path, worker_cores=2)
    assert all(cluster.worker_ports) and all(cluster.worker_webui_ports) and cluster.worker_cores == 2


def test_the_wheel_is_a_spark_home() -> None:
    home = spark_home()
    assert (home / "bin" / "spark-class").is_file() and (home / "jars").is_dir()
    assert scala_version(home) == "2.13"


def test_for_stack_puts_workers_on_the_other_cluster_addresses(tmp_path: Path) -> None:
    from feed_service.stack.config import StackConfig

    config = StackConfig(data_dir=tmp_path, topology="cluster", spark_master_port=7377, spark_webui_port=8380)
    cluster = SparkStandalone.for_stack(config)
    assert cluster.master_url == "spark://127.0.0.1:7377" and cluster.worker_hosts == ("127.0.0.2", "127.0.0.3")
    assert cluster.worker_ports == (7377, 7377) and cluster.home == tmp_path / "spark"


def test_a_taken_port_is_refused_before_any_jvm_starts(tmp_path: Path) -> None:
    import socket

    from feed_service.errors import StackError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cluster = SparkStandalone(tmp_path, master_port=taken.getsockname()[1], master_webui_port=0)
        with pytest.raises(StackError, match="spark-master: port .* is taken"):
            cluster.start()
    assert not cluster.master.pid_file.exists()
