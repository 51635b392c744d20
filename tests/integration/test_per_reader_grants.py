"""The roles' grants on the per-reader tables, on a secured stack (docs/security.md): the stream writes
and reads all four, the read service reads ``home_extras``, ``user_reposts`` and ``reader_visible``
but not the steps' state, and a keyspace provisioned when the server held SELECT on the whole keyspace
loses that grant on the next provisioning without the server losing a table it reads. Runs on the
cluster topology unless FEED_TEST_SECURE_TOPOLOGY=single."""

from __future__ import annotations

import time
import uuid

import pytest

from feed_service.core.per_reader.messages import ExtrasDelta, VisibleDelta
from feed_service.core.rows import AuthorTimelineWrite, Entry
from feed_service.security.roles import ADMIN, SERVER, SERVER_TABLES, STREAM, cassandra_role
from feed_service.settings import Settings
from feed_service.stack.config import StackConfig


@pytest.fixture(scope="module")
def secured(secure_stack_config: StackConfig) -> Settings:
    from feed_service.ops.provision import provision

    settings = secure_stack_config.settings(keyspace=f"feed_grants_{uuid.uuid4().hex[:8]}")
    provision(settings)
    return settings


def _eventually(session, statement: str, *, allowed: bool) -> None:  # type: ignore[no-untyped-def]
    """``statement`` is allowed (or refused) within the node's permission cache's lifetime (2 s by
    default: a grant or revoke shows after it)."""
    from cassandra import Unauthorized

    deadline = time.monotonic() + 30
    while True:
        try:
            session.execute(statement)
            if allowed:
                return
        except Unauthorized:
            if not allowed:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"still {'refused' if allowed else 'allowed'}: {statement}")
        time.sleep(0.5)


def test_the_stream_writes_the_per_reader_tables_and_the_server_reads_all_but_the_state(secured: Settings) -> None:
    from cassandra import Unauthorized

    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.session import connect
    from feed_service.store.stage_inputs import CassandraStageInputs

    ks = secured.keyspace
    repost = Entry("t1", "bob", 1_000, 1, "hi", 1, None, None, "cat", 2_000, 1)
    cluster, session = connect(secured.as_role(STREAM))
    try:
        counts = CassandraWriter(session, ks).write(
            extras=[ExtrasDelta("insert", "ann", repost, 5)], user_reposts=[AuthorTimelineWrite("insert", repost, 5)],
            visible=[VisibleDelta("insert", "ann", "cat", 5)])
        assert (counts.extras_upserts, counts.user_reposts, counts.visible) == (1, 1, 1)
        inputs = CassandraStageInputs(session, ks)
        assert inputs.save("s", [(("clock",), 3, None)], 1).rows == 1
        assert inputs.load("s", 2) == [(("clock",), 3)]
    finally:
        cluster.shutdown()

    cluster, session = connect(secured.as_role(SERVER))
    try:
        for table in SERVER_TABLES:
            session.execute(f"SELECT * FROM {ks}.{table} LIMIT 1")
        assert session.execute(f"SELECT tweet_id FROM {ks}.home_extras WHERE timeline_id = 'ann'").one() == ("t1",)
        assert session.execute(f"SELECT user_id FROM {ks}.reader_visible WHERE reader_id = 'ann'").one() == ("cat",)
        with pytest.raises(Unauthorized):
            session.execute(f"SELECT * FROM {ks}.per_reader_inputs LIMIT 1")
        for statement in (f"INSERT INTO {ks}.reader_visible (reader_id, user_id) VALUES ('ann', 'eve')",
                          f"DELETE FROM {ks}.home_extras WHERE timeline_id = 'ann'",
                          f"TRUNCATE {ks}.user_reposts"):
            with pytest.raises(Unauthorized):
                session.execute(statement)
    finally:
        cluster.shutdown()


def test_provisioning_revokes_the_servers_keyspace_wide_select_of_earlier_releases(secured: Settings) -> None:
    from feed_service.ops.provision import provision
    from feed_service.store.session import connect

    ks, server = secured.keyspace, cassandra_role(SERVER)
    admin_cluster, admin = connect(secured.as_role(ADMIN))
    try:
        admin.execute(f"GRANT SELECT ON KEYSPACE {ks} TO {server}")  # as an earlier release granted it
        listed = f"LIST SELECT ON KEYSPACE {ks} OF {server} NORECURSIVE"
        assert list(admin.execute(listed))
        cluster, session = connect(secured.as_role(SERVER))
        try:
            _eventually(session, f"SELECT * FROM {ks}.per_reader_inputs LIMIT 1", allowed=True)  # what it allowed
            provision(secured)
            assert not list(admin.execute(listed))
            _eventually(session, f"SELECT * FROM {ks}.per_reader_inputs LIMIT 1", allowed=False)
            for table in SERVER_TABLES:  # every table it reads, throughout
                session.execute(f"SELECT * FROM {ks}.{table} LIMIT 1")
        finally:
            cluster.shutdown()
        provision(secured)  # again: nothing held, nothing revoked
        assert not list(admin.execute(listed))
    finally:
        admin_cluster.shutdown()
