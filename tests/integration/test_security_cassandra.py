"""Cassandra on a secured stack refuses whoever it should, and a refusal changes nothing (docs/security.md).

Each test tries something that must fail (no login, no TLS, the default superuser, a wrong password,
the read service writing) and then checks, as the admin, that the keyspace's rows are exactly what
they were. Runs on the cluster topology (internode mutual TLS, ``system_auth`` on every node) unless
FEED_TEST_SECURE_TOPOLOGY=single.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import pytest

from feed_service.security.roles import ADMIN, SERVER, STATE_TABLES, STREAM, cassandra_role
from feed_service.settings import Settings
from feed_service.stack.config import StackConfig

#: Rows the admin writes before the tests; every refused attempt must leave them (and only them).
SEEDED = [(f"sec-tweet-{i}", f"author-{i}", 1_700_000_000_000 + i, 1, f"text {i}", 1) for i in range(3)]
INSERT = "INSERT INTO {ks}.tweets (tweet_id, author_id, created_at, version, text, profile_version) VALUES (%s, %s, %s, %s, %s, %s)"


@pytest.fixture(scope="module")
def secured(secure_stack_config: StackConfig) -> Settings:
    """Settings of the secured stack with a keyspace of this module's, provisioned and seeded as the admin."""
    from feed_service.ops.provision import provision
    from feed_service.store.session import connect

    settings = secure_stack_config.settings(keyspace=f"feed_sec_{uuid.uuid4().hex[:8]}")
    provision(settings)
    cluster, session = connect(settings.as_role(ADMIN))
    try:
        for row in SEEDED:
            session.execute(INSERT.format(ks=settings.keyspace), row)
    finally:
        cluster.shutdown()
    return settings


def _rows(settings: Settings) -> list[tuple[Any, ...]]:
    """Every row of the tweets table, read by the admin."""
    from feed_service.store.session import connect

    cluster, session = connect(settings.as_role(ADMIN))
    try:
        return sorted(tuple(r) for r in session.execute(
            f"SELECT tweet_id, author_id, created_at, version, text, profile_version FROM {settings.keyspace}.tweets"))
    finally:
        cluster.shutdown()


@pytest.fixture()
def unchanged(secured: Settings) -> Iterator[None]:
    """Checks after the test that the tweets table holds the seeded rows exactly (nothing written)."""
    before = _rows(secured)
    assert len(before) >= len(SEEDED)
    yield
    assert _rows(secured) == before


def _client(settings: Settings, *, tls: bool, user: str | None = None, password: str = "") -> Any:
    """A driver cluster built by hand (not through ``connect``), to play a client that gets it wrong."""
    from cassandra.cluster import Cluster

    from feed_service.store.session import password_login, tls_context

    options: dict[str, Any] = {}
    if tls:
        options["ssl_context"] = tls_context(settings.tls_ca_file)
    if user is not None:
        options["auth_provider"] = password_login(user, password)
    return Cluster(list(settings.cassandra_hosts), port=settings.cassandra_port, protocol_version=5,
                   connect_timeout=5, **options)


def _refused(cluster: Any, settings: Settings) -> BaseException:
    """The error of connecting ``cluster`` and writing one row (the write must never happen)."""
    try:
        session = cluster.connect()
        session.execute(INSERT.format(ks=settings.keyspace), ("intruder", "x", 0, 1, "x", 1))
    except Exception as exc:  # noqa: BLE001 - returned to be checked
        return exc
    finally:
        cluster.shutdown()
    raise AssertionError("the connection and the write were accepted")


def _auth_failed(exc: BaseException) -> bool:
    from cassandra import AuthenticationFailed
    from cassandra.cluster import NoHostAvailable

    errors = exc.errors.values() if isinstance(exc, NoHostAvailable) else [exc]
    return any(isinstance(e, AuthenticationFailed) for e in errors)


def test_a_session_without_a_login_is_refused(secured: Settings, unchanged: None) -> None:
    from cassandra.cluster import NoHostAvailable

    exc = _refused(_client(secured, tls=True), secured)
    assert isinstance(exc, NoHostAvailable)
    assert "requires authentication" in str(exc) or _auth_failed(exc), exc


def test_a_client_without_tls_is_refused(secured: Settings, unchanged: None) -> None:
    from cassandra.cluster import NoHostAvailable
    from feed_service.security.secrets import login

    user, password = login(secured.credentials_dir, STREAM, "cassandra")  # a good login, but in clear text
    exc = _refused(_client(secured, tls=False, user=user, password=password), secured)
    assert isinstance(exc, NoHostAvailable), exc
    assert not _auth_failed(exc)  # refused before any login: the node only speaks TLS


def test_the_default_superuser_can_no_longer_log_in(secured: Settings, unchanged: None) -> None:
    from feed_service.store.session import connect

    exc = _refused(_client(secured, tls=True, user="cassandra", password="cassandra"), secured)
    assert _auth_failed(exc), exc
    cluster, session = connect(secured.as_role(ADMIN))
    try:
        row = session.execute("SELECT can_login FROM system_auth.roles WHERE role = 'cassandra'").one()
        assert row is not None and row.can_login is False
    finally:
        cluster.shutdown()


def test_the_server_role_reads_but_cannot_write(secured: Settings, unchanged: None) -> None:
    from cassandra import Unauthorized

    from feed_service.store.session import connect

    ks = secured.keyspace
    cluster, session = connect(secured.as_role(SERVER))
    try:
        tables = [r.table_name for r in session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (ks,))]
        assert {"home_timeline", "tweets", "profiles", "author_timeline"} <= set(tables)
        for table in tables:  # every table of the view reads; the per-reader stage's inputs are refused
            if table in STATE_TABLES:
                with pytest.raises(Unauthorized):
                    session.execute(f"SELECT * FROM {ks}.{table} LIMIT 1")
            else:
                session.execute(f"SELECT * FROM {ks}.{table} LIMIT 1")
        ids = {r.tweet_id for r in session.execute(f"SELECT tweet_id FROM {ks}.tweets")}
        assert {row[0] for row in SEEDED} <= ids
        refused = [
            INSERT.format(ks=ks) % ("'server-write'", "'x'", 0, 1, "'x'", 1),
            f"UPDATE {ks}.tweets SET text = 'defaced' WHERE tweet_id = '{SEEDED[0][0]}'",
            f"DELETE FROM {ks}.tweets WHERE tweet_id = '{SEEDED[1][0]}'",
            f"TRUNCATE {ks}.tweets",
            f"DROP TABLE {ks}.tweets",
        ]
        for statement in refused:
            with pytest.raises(Unauthorized):
                session.execute(statement)
    finally:
        cluster.shutdown()


def test_the_stream_role_writes_and_a_wrong_password_is_refused(secured: Settings) -> None:
    from feed_service.store.session import connect

    ks = secured.keyspace
    written = ("stream-write", "author-s", 1_700_000_001_000, 1, "by the stream", 1)
    cluster, session = connect(secured.as_role(STREAM))
    try:
        session.execute(INSERT.format(ks=ks), written)
        session.execute(f"DELETE FROM {ks}.tweets WHERE tweet_id = %s", ("stream-write-gone",))
    finally:
        cluster.shutdown()
    assert written in _rows(secured)

    before = _rows(secured)
    exc = _refused(_client(secured, tls=True, user=cassandra_role(STREAM), password="not-the-password"), secured)
    assert _auth_failed(exc), exc
    assert _rows(secured) == before


def test_logins_survive_the_loss_of_a_node(secure_stack_config: StackConfig, secured: Settings) -> None:
    """On a cluster ``system_auth`` has a replica on every node (losing one never loses a login); a
    single node keeps Cassandra's default."""
    from feed_service.stack.cassandra_roles import system_auth_replication
    from feed_service.store.session import connect

    cluster, session = connect(secured.as_role(ADMIN))
    try:
        row = session.execute("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = 'system_auth'").one()
    finally:
        cluster.shutdown()
    replication = dict(row.replication)
    if system_auth_replication(secure_stack_config) is None:
        assert replication == {"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "1"}
    else:
        assert replication == {"class": "org.apache.cassandra.locator.NetworkTopologyStrategy",
                               "datacenter1": str(len(secure_stack_config.hosts))}
