"""A role that lacks a Cassandra grant stops the job at once with the reason, never a restart loop
(docs/operations.md#failure-modes-the-streams-inputs-and-grants), on a secured stack: the stream's
role loses MODIFY on one table of its keyspace (every other table still granted), and the stream
ends with exit code 2 naming the role, the permission and the table, without a restart. The backfill
takes the same path from the text of its failed Spark job (tests/unit/test_backfill_write.py), so
this module pays for one Spark job only. Runs on the cluster topology unless
FEED_TEST_SECURE_TOPOLOGY=single."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from feed_service.security.roles import ADMIN, STREAM, cassandra_role
from feed_service.settings import Settings
from feed_service.stack.config import StackConfig
from feed_service.workload.generator import generate

from tests.support.pipeline import StreamProcess, publish

#: The table whose MODIFY the stream's role loses: its first batch of tweets writes it.
WITHHELD = "tweets"


@pytest.fixture(scope="module")
def withheld(secure_stack_config: StackConfig) -> Settings:
    """Own keyspace and topics, provisioned, with a history published; then the stream's role holds
    MODIFY on every table of the keyspace but :data:`WITHHELD`."""
    from feed_service.ops.provision import provision
    from feed_service.store.session import connect

    unique = uuid.uuid4().hex[:8]
    settings = secure_stack_config.settings(keyspace=f"feed_grant_{unique}").with_topic_suffix(f".grant.{unique}")
    provision(settings)
    publish(settings, generate(users=20, events=120, seed=5, mean_following=4, prefix="gr-"))
    ks = settings.keyspace
    cluster, session = connect(settings.as_role(ADMIN))
    try:
        tables = [r.table_name for r in session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (ks,))]
        assert WITHHELD in tables
        role = cassandra_role(STREAM)
        session.execute(f"REVOKE MODIFY ON KEYSPACE {ks} FROM {role}")
        for table in tables:
            if table != WITHHELD:
                session.execute(f"GRANT MODIFY ON TABLE {ks}.{table} TO {role}")
    finally:
        cluster.shutdown()
    return settings


def test_the_stream_stops_at_once_naming_the_missing_grant(withheld: Settings, tmp_path: Path) -> None:
    stream = StreamProcess(withheld, tmp_path / "ckpt", log_file=tmp_path / "stream.log").start()
    try:
        code = stream.wait_exited(timeout=300)
    finally:
        stream.stop()
    text = (tmp_path / "stream.log").read_text(errors="replace")
    assert code == 2, f"exit code {code}; log:\n{text[-4000:]}"
    reason = f"cassandra role {cassandra_role(STREAM)} lacks MODIFY on {withheld.keyspace}.{WITHHELD}"
    refusal = next(line for line in text.splitlines() if line.startswith("feedctl stream: "))
    assert reason in refusal
    assert "stopped, not restarted: StorePermissionDenied" in text
    progress = json.loads(stream.status_file.read_text())
    assert progress["restarts"] == 0 and progress["fatal"]["error"] == "StorePermissionDenied"
    assert reason in progress["fatal"]["message"]

