"""The inbox partition's static ``pull_authors`` on the real Cassandra: a copy of ``pull_follows``
that converges like the rows under any order and replay of the writes, comes back with every inbox
slice (one read per page), is added to a keyspace created before it existed, and is never counted as
an inbox row (docs/fan-out.md, docs/idempotent-writes.md, docs/api.md#pagination)."""

from __future__ import annotations

import asyncio
import random

from feed_service.core.rows import Entry, PullFollowWrite, TimelineWrite
from feed_service.settings import Settings

from tests.support.isolation import isolated


def test_the_static_copy_converges_like_the_rows_and_comes_with_every_slice(settings: Settings, unique: str) -> None:
    from feed_service.store.cassandra_reader import CassandraReader
    from feed_service.store.cassandra_trimmer import CassandraTrimmer
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.session import connect

    pipeline = isolated(settings, unique)
    rnd = random.Random(5)
    # follows and unfollows of three pull authors by two users, with ties (a removal wins them)
    history = [PullFollowWrite(op, user, author, ts)
               for user in ("ann", "bob") for author in ("star", "idol", "moon")
               for op, ts in (("insert", 10), ("delete", rnd.choice((10, 20))), ("insert", rnd.choice((15, 30))))]
    history.append(PullFollowWrite("insert", "cat", "star", 5))  # cat: pull follows and no inbox row at all
    cluster, session = connect(pipeline)
    try:
        writer = CassandraWriter(session, pipeline.keyspace)
        writer.write(timeline=[TimelineWrite("insert", "ann", Entry(f"t{n}", "bob", 1_000 + n, 1, "hi", 1), 1)
                               for n in range(5)])
        for _ in range(3):  # any order, any batching, replays: the same result
            shuffled = rnd.sample(history, len(history))
            cut = rnd.randrange(len(shuffled))
            writer.write(pull_follows=shuffled[:cut])
            writer.write(pull_follows=shuffled[cut:])
        rows = session.execute(f"SELECT follower_id, author_id FROM {pipeline.keyspace}.pull_follows")
        expected: dict[str, list[str]] = {}
        for follower, author in rows:
            expected.setdefault(follower, []).append(author)
        statics = {t: sorted(a) for t, a in session.execute(
            f"SELECT DISTINCT timeline_id, pull_authors FROM {pipeline.keyspace}.home_timeline") if a}
        assert statics == {f: sorted(a) for f, a in expected.items()} and "cat" in statics

        async def slices() -> tuple:
            reader = CassandraReader(session, pipeline.keyspace)
            return (await reader.inbox("ann", before=None, limit=3, timeout=10),
                    await reader.inbox("ann", before=(1_002, "t2"), limit=3, timeout=10),
                    await reader.inbox("ann", before=(1_000, "t0"), limit=3, timeout=10),
                    await reader.inbox("cat", before=None, limit=3, timeout=10),
                    await reader.inbox("nobody", before=None, limit=3, timeout=10),
                    await reader.pull_authors("cat", timeout=10))

        first, lower, below_all, cat, nobody, cat_authors = asyncio.run(slices())
        assert [e.tweet_id for e in first.entries] == ["t4", "t3", "t2"]
        assert first.pull_authors == lower.pull_authors == sorted(expected.get("ann", []))
        assert [e.tweet_id for e in lower.entries] == ["t1", "t0"]
        assert below_all.entries == [] and below_all.pull_authors is None  # no row: the list cannot come
        assert cat.entries == [] and cat.pull_authors == ["star"] == cat_authors
        assert nobody.entries == [] and nobody.pull_authors == []
        # a partition holding only the static column has no inbox row to keep or to trim
        trimmer = CassandraTrimmer(session, pipeline.keyspace, inbox_cap=3, trim_slack=0)
        assert trimmer.trim(["cat", "ann"]).kept == {"cat": 0, "ann": 3}
    finally:
        cluster.shutdown()


def test_a_keyspace_from_before_the_column_gains_it(settings: Settings, unique: str) -> None:
    from feed_service.store.schema import apply_schema, schema_statements
    from feed_service.store.session import connect

    keyspace = f"feed_{unique}"
    cluster, session = connect(settings)
    try:
        for statement in schema_statements(keyspace):  # the schema as it was: no pull_authors
            if statement.startswith("ALTER TABLE"):
                continue
            if "home_timeline" in statement:
                statement = "\n".join(line for line in statement.splitlines() if "pull_authors" not in line)
            session.execute(statement, timeout=60)
        columns = f"SELECT column_name, kind FROM system_schema.columns WHERE keyspace_name = '{keyspace}'" \
                  " AND table_name = 'home_timeline'"
        assert "pull_authors" not in {r.column_name for r in session.execute(columns)}
        apply_schema(session, keyspace)
        apply_schema(session, keyspace)  # and again: nothing to do
        kinds = {r.column_name: r.kind for r in session.execute(columns)}
        assert kinds["pull_authors"] == kinds["pull_reposters"] == "static"  # and pull reposters' copy
        session.execute(f"DROP KEYSPACE {keyspace}", timeout=60)
    finally:
        cluster.shutdown()
