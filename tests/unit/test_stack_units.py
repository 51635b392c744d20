"""Stack plumbing that needs no running services."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pyspark

from feed_service.stack.config import StackConfig, free_ports
from feed_service.stack.process import ServiceProcess
from feed_service.stack.versions import SPARK_VERSION
from feed_service.store.schema import schema_statements

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_spark_pin_matches_pyproject_and_installed_wheel() -> None:
    pin = re.search(r'"pyspark==([^"]+)"', (REPO_ROOT / "pyproject.toml").read_text())
    assert pin and pin.group(1) == SPARK_VERSION == pyspark.__version__


def test_free_ports_are_distinct() -> None:
    ports = free_ports(6)
    assert len(set(ports)) == 6


def test_config_round_trips_through_its_record(tmp_path: Path) -> None:
    config = StackConfig.with_free_ports(tmp_path / "s")
    config.save()
    assert StackConfig.load(tmp_path / "s") == config


def test_service_process_start_is_idempotent_and_stop_kills_group(tmp_path: Path) -> None:
    service = ServiceProcess("sleeper", tmp_path / "p.pid", tmp_path / "p.log")
    cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
    pid = service.start(cmd)
    assert service.start(cmd) == pid  # no duplicate
    assert service.is_running()
    assert service.stop(grace=5)
    assert not service.is_running()
    assert not service.stop()


def test_stale_pid_file_is_not_trusted(tmp_path: Path) -> None:
    service = ServiceProcess("ghost", tmp_path / "g.pid", tmp_path / "g.log")
    (tmp_path / "g.pid").write_text('{"pid": 1, "cmdline": ["not-init"]}')
    assert service.pid() is None  # pid 1 exists but is not our command


def test_schema_statements_substitute_keyspace() -> None:
    statements = schema_statements("feed_x")
    assert statements[0].startswith("CREATE KEYSPACE IF NOT EXISTS feed_x")
    assert all("feed." not in s for s in statements)
    assert all("IF NOT EXISTS" in s for s in statements)
