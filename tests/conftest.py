"""Shared fixtures. Integration tests get one real local stack per pytest session.

The test stack lives in ``.stack/test/<run>`` of the repository with free ports, so it runs beside a
developer's stack, and shares the repository's download cache (``.stack/cache``, or FEED_CACHE_DIR)
wherever pytest is started from: the package itself only knows the current directory.
A run that crashed (owner process gone) leaves a folder whose services the next run stops and
removes first, so nothing it left can block the next one.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

# The shared helpers' asserts explain their failures as a test's own do.
pytest.register_assert_rewrite("tests.support")

from feed_service.settings import Settings
from feed_service.stack.config import StackConfig

#: The checkout the tests belong to (the package may be installed from anywhere).
REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_STACKS = REPO_ROOT / ".stack" / "test"
INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_configure(config: pytest.Config) -> None:
    # in the environment, so child processes (stream job, backfill) find the same jars
    os.environ.setdefault("FEED_CACHE_DIR", str(REPO_ROOT / ".stack" / "cache"))
    # Hypothesis tests that name no count of their own: its default, times FEED_TEST_SCALE
    from hypothesis import settings

    from tests.support.sizes import examples

    settings.register_profile("feed", max_examples=examples())
    settings.load_profile("feed")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    items.sort(key=_cluster_order)  # stable: the order within each group stays pytest's
    _mark_last_world_test(config, items)


def _owner_alive(run_dir: Path) -> bool:
    try:
        pid = int((run_dir / "owner.pid").read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap_stale_stacks() -> None:
    from feed_service.stack.local_stack import LocalStack

    if not TEST_STACKS.exists():
        return
    for run_dir in TEST_STACKS.iterdir():
        if run_dir.is_dir() and not _owner_alive(run_dir):
            config = StackConfig.load(run_dir)
            if config is not None:
                LocalStack(config).down()
            shutil.rmtree(run_dir, ignore_errors=True)


@contextmanager
def _test_stack(topology: str, **changes: object) -> Iterator[StackConfig]:
    """A stack of ``topology`` in its own run folder with free ports, up for the block, then stopped
    and removed (kept with FEED_KEEP_TEST_STACK=1)."""
    from feed_service.stack.local_stack import LocalStack

    _reap_stale_stacks()
    run_dir = TEST_STACKS / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}-{topology}"
    run_dir.mkdir(parents=True)
    (run_dir / "owner.pid").write_text(str(os.getpid()))
    config = StackConfig.with_free_ports(run_dir, topology=topology, **changes)
    stack = LocalStack(config)
    try:
        timings = stack.up()
        print(f"\n{topology} test stack up: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
        yield config
    finally:
        stack.down()
        if os.environ.get("FEED_KEEP_TEST_STACK") != "1":
            shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def stack_config() -> Iterator[StackConfig]:
    """A running Kafka + Cassandra for this session (started once, stopped at the end)."""
    from feed_service.stack.config import SINGLE

    with _test_stack(SINGLE) as config:
        yield config


#: Fixtures that start a cluster stack: the tests that use them run last, so that one cluster serves
#: them all and never idles beside the single-node tests (test_cluster.py, which kills nodes, runs last).
CLUSTER_FIXTURES = ("cluster_stack_config", "secure_stack_config")


#: The streamed world's phases (tests/support/world.py): the tests that take none run first, then the
#: tests of phase 1, then those of phase 2, so that the world's stream runs beside its own tests only
#: (it is stopped after the last of them: :func:`pytest_runtest_teardown`).
WORLD_PHASE_FIXTURES = ("world", "world_phase2")
#: The node id of the last test that uses the world, once the tests are ordered.
LAST_WORLD_TEST = pytest.StashKey[str]()


def _cluster_order(item: pytest.Item) -> tuple[int, int, int]:
    names = getattr(item, "fixturenames", ())
    uses = any(name in names for name in CLUSTER_FIXTURES)
    phase = max((rank for rank, name in enumerate(WORLD_PHASE_FIXTURES, 1) if name in names), default=0)
    return (int(uses), int(uses and Path(str(item.fspath)).name == "test_cluster.py"), phase)


def _mark_last_world_test(config: pytest.Config, items: list[pytest.Item]) -> None:
    using = [item for item in items if "world" in getattr(item, "fixturenames", ())]
    if using:
        config.stash[LAST_WORLD_TEST] = using[-1].nodeid


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test that uses the world, stop its stream (exit code 0 checked): nothing later
    needs it, and the cluster tests that follow need the machine's cores."""
    if nextitem is not None and item.nodeid == item.config.stash.get(LAST_WORLD_TEST, None):
        world = getattr(item, "funcargs", {}).get("world")
        if world is not None:
            world.stop()


@pytest.fixture(scope="session")
def cluster_stack_config() -> Iterator[StackConfig]:
    """A running cluster stack (three brokers, three Cassandra nodes, Spark standalone with two workers:
    docs/cluster.md), secured as the topology is by default (docs/security.md); one for the session's
    cluster tests, which run last (:data:`CLUSTER_FIXTURES`), as it holds ~6 GiB."""
    from feed_service.stack.config import CLUSTER

    with _test_stack(CLUSTER) as config:
        yield config


@pytest.fixture(scope="session")
def secure_stack_config(request: pytest.FixtureRequest) -> Iterator[StackConfig]:
    """A secured stack (TLS and logins on every link, least-privilege roles: docs/security.md): the
    session's cluster, or with FEED_TEST_SECURE_TOPOLOGY=single one node of each (quicker to iterate)."""
    from feed_service.stack.config import CLUSTER

    topology = os.environ.get("FEED_TEST_SECURE_TOPOLOGY", CLUSTER)
    if topology == CLUSTER:
        config = request.getfixturevalue("cluster_stack_config")
        assert config.secure
        yield config
        return
    with _test_stack(topology, secure=True) as config:
        yield config


@pytest.fixture(scope="session")
def settings(stack_config: StackConfig) -> Settings:
    """Settings of the test stack, provisioned (topics, keyspace ``feed_test`` and tables)."""
    from feed_service.ops.provision import provision

    settings = stack_config.settings(keyspace="feed_test")
    provision(settings)
    return settings


@pytest.fixture(scope="session")
def spark(stack_config: StackConfig):
    """One local SparkSession for the session's Spark tests (JVM start-up is the slow part)."""
    from spark_jobs.runtime.session import build_session

    session = build_session("feed-tests", cache_dir=stack_config.cache_dir)
    yield session
    session.stop()


@pytest.fixture()
def unique() -> str:
    """A short unique suffix for names (topics, tables, ids) a test creates."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if it builds a Spark session, and clear FEED_* from the environment: the jobs'
    refusals must happen before any session exists."""
    import os

    import spark_jobs.runtime.session

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("a Spark session was built")

    monkeypatch.setattr(spark_jobs.runtime.session, "build_session", refuse)
    for name in list(os.environ):
        if name.startswith("FEED_"):
            monkeypatch.delenv(name)
