"""The package as users get it: a wheel built from a clean copy of the sources, installed into a fresh
virtualenv outside the checkout and run from another directory, with no source tree to fall back on.

It covers what an editable install hides: package data read through importlib.resources
(``feed_service/_data/``, the Maven poms), the gRPC stubs generated at build time (with their
canonical descriptor names), and the ``feedctl`` console script. Building needs the build
requirements of pyproject.toml (pip fetches them, or takes them from its cache). The new virtualenv
gets the third-party dependencies of the running interpreter through a ``.pth`` line placed after
its own site-packages, so nothing is downloaded for them and the wheel's copy of the package wins.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc as pb_grpc
from feed_service.core.reference import reference_timelines
from feed_service.stack.config import free_ports

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
#: What an sdist of the project carries: the wheel is built from a copy of these alone, so nothing an
#: editable install generated in the checkout (feed_service/_data/, stubs, build/) can leak into it.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "feed_service", "spark_jobs", "schemas", "proto")
GENERATED = shutil.ignore_patterns("__pycache__", "*.pyc", "_data", "*_pb2.py", "*_pb2_grpc.py", ".*.tmp")

EVENTS = [
    '{"type":"follow","op":"follow","follower_id":"ann","followee_id":"bob","version":1}',
    '{"type":"tweet","op":"upsert","tweet_id":"t1","author_id":"bob","version":1,"created_at":10,"text":"hi","profile_version":1}',
    '{"type":"profile","user_id":"bob","version":1,"display_name":"Bob"}',
    '{"type":"follow","op":"follow","follower_id":"cat","followee_id":"cat","version":1}',
]


@dataclass(frozen=True)
class Installed:
    venv: Path
    workdir: Path  # an empty directory outside the checkout: the cwd of every command
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def feedctl(self) -> Path:
        return self.venv / "bin" / "feedctl"

    def run(self, *cmd: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(c) for c in cmd], cwd=self.workdir, env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)


def _checked(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _clean_env() -> dict[str, str]:
    """This environment without anything that could point the child at the checkout or a local stack."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP") and not k.startswith("FEED_")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=GENERATED)
        else:
            shutil.copy2(path, src / name)
    env = _clean_env()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    # build isolation on purpose: the wheel must build from its declared build requirements alone
    _checked(subprocess.run([*pip, "wheel", "--no-deps", "-q", "-w", str(root / "dist"), str(src)],
                            cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False))
    (wheel,) = (root / "dist").glob("feed_service-*.whl")

    venv = root / "venv"
    _checked(subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True,
                            text=True, timeout=120, check=False))
    _checked(subprocess.run([*pip, "--python", str(venv / "bin" / "python"), "install", "--no-deps", "-q",
                             str(wheel)], cwd=root, env=env, capture_output=True, text=True, timeout=120,
                            check=False))
    site = _checked(subprocess.run([str(venv / "bin" / "python"), "-c",
                                    "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, timeout=60, check=False)).stdout.strip()
    # the running interpreter's dependencies, searched after the venv's own site-packages (so the
    # wheel's feed_service comes first); a plain path line: that folder's own .pth files (the
    # checkout's editable-install hook among them) are not run
    ours = sysconfig.get_paths()
    Path(site, "zz_test_dependencies.pth").write_text(
        "".join(f"{p}\n" for p in dict.fromkeys((ours["purelib"], ours["platlib"]))))

    workdir = root / "elsewhere"
    workdir.mkdir()
    return Installed(venv=venv, workdir=workdir, env=env)


def test_the_package_imported_is_the_wheel_with_its_data(installed: Installed) -> None:
    probe = """
import json
from importlib import resources
import feed_service, feed_service.resources as r
from feed_service.api import timeline_pb2
from feed_service.stack import maven
print(json.dumps({
    "package": feed_service.__file__,
    "stubs": timeline_pb2.__file__,
    "proto_file": timeline_pb2.DESCRIPTOR.name,
    "data": {name: r.read_text(name) for name in (r.TOPICS, r.CQL, r.EVENT_SCHEMA, r.TIMELINE_PROTO)},
    "poms": sorted(p.name for p in resources.files("feed_service.stack").joinpath("maven").iterdir()),
    "fingerprint": maven._fingerprint("kafka"),
}))
"""
    facts = json.loads(_checked(installed.run(installed.python, "-c", probe)).stdout)
    for key in ("package", "stubs"):
        assert Path(facts[key]).is_relative_to(installed.venv), facts
    assert facts["proto_file"] == "feed/v1/timeline.proto"  # canonical, as reflection clients see it
    for name, text in facts["data"].items():  # copies of the canonical files at the repository root
        assert text == (REPO_ROOT / name).read_text(encoding="utf-8"), name
    assert facts["poms"] == ["cassandra.pom.xml", "kafka.pom.xml", "settings.xml", "spark-kafka.pom.xml"]


def test_feedctl_help(installed: Installed) -> None:
    out = _checked(installed.run(installed.feedctl, "--help")).stdout
    for command in ("materialize", "serve", "stack", "stream"):
        assert command in out


def test_feedctl_materialize(installed: Installed) -> None:
    events = installed.workdir / "events.jsonl"
    events.write_text("\n".join(EVENTS) + "\n")
    proc = _checked(installed.run(installed.feedctl, "materialize", events.name))
    document = json.loads(proc.stdout)
    assert document["rejected"] == 1
    assert [entry["tweet_id"] for entry in document["timelines"]["ann"]] == ["t1"]
    assert document["timelines"] == reference_timelines(EVENTS)
    assert "line 4: self_follow" in proc.stderr  # validated against the packaged event schema


def test_feedctl_serve_demo(installed: Installed) -> None:
    port, no_cassandra = free_ports(2)
    log = installed.workdir / "serve.log"
    env = {**installed.env, "FEED_CASSANDRA_HOSTS": "127.0.0.1", "FEED_CASSANDRA_PORT": str(no_cassandra)}
    with log.open("w") as out:
        proc = subprocess.Popen([str(installed.feedctl), "serve", "--demo", "--host", "127.0.0.1", "--port",
                                 str(port), "--metrics-port", "0"], cwd=installed.workdir, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            status = _health(channel, timeout=60, log=log)
            # no Cassandra behind it: up, and saying it cannot serve reads yet
            assert status == health_pb2.HealthCheckResponse.NOT_SERVING

            reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(file_containing_symbol="feed.v1.TimelineService")
            (reply,) = reflection.ServerReflectionInfo(iter([request]), timeout=10)
            names = {descriptor_pb2.FileDescriptorProto.FromString(raw).name
                     for raw in reply.file_descriptor_response.file_descriptor_proto}
            assert "feed/v1/timeline.proto" in names

            token = log.read_text().split("Service token (24 h):\n", 1)[1].split()[0]
            with pytest.raises(grpc.RpcError) as call:
                pb_grpc.TimelineServiceStub(channel).GetHomeTimeline(
                    pb.GetHomeTimelineRequest(user_id="u1"), metadata=[("authorization", f"Bearer {token}")],
                    timeout=10)
            assert call.value.code() == grpc.StatusCode.UNAVAILABLE, call.value  # authenticated, store down
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _health(channel: grpc.Channel, *, timeout: float, log: Path) -> int:
    """The first health status the server answers with (it binds a moment after it starts)."""
    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
        except grpc.RpcError:
            time.sleep(0.3)
    raise AssertionError(f"feedctl serve did not answer health checks within {timeout}s:\n{log.read_text()[-3000:]}")
