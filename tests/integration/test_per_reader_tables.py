"""The per-reader tables on the real Cassandra (docs/reposts-and-replies.md, docs/idempotent-writes.md):
``home_extras``, ``user_reposts``, ``reader_visible`` and the lists' stores (``reader_excluded``,
``lists``, the statics ``list_owner``, ``list_policy``; docs/lists.md#in-the-engine) written in any
order, batching and duplication end as the newest write of each row, equal to MemoryStore's outcome
of the same writes;
absent fields are stored as '' and 0; the per-reader stage's inputs load by the batch rule, a
replayed batch from what it started from; and a keyspace made before the tables gains them. With pull reposters on at a small threshold, the
stream's per-reader path writes the tables a read of pull reposters needs (``reader_hidden``,
``home_timeline.pull_reposters``, the indexes ``reposts_by_tweet`` and ``home_extras_reposts``) as
``Materializer(pull_reposters=True)``'s view has them, and the reader's lookups answer from them."""

from __future__ import annotations

import random

import pytest

from feed_service.core.per_reader.list_stage import ListFact
from feed_service.core.per_reader.messages import ExcludedDelta, ExtrasDelta, VisibleDelta
from feed_service.core.rows import AuthorTimelineWrite, Entry
from feed_service.settings import Settings

from tests.support.isolation import isolated

NEW_TABLES = ("home_extras", "user_reposts", "reader_visible", "per_reader_inputs", "reader_hidden", "reposts_by_tweet",
              "home_extras_reposts", "reader_excluded", "lists")
ENTRY_COLUMNS = ("tweet_id, author_id, created_at, version, text, profile_version, in_reply_to_tweet_id,"
                 " in_reply_to_author_id, reposted_by, reposted_at, reposter_profile_version")


def _drop(session, keyspace: str) -> None:  # type: ignore[no-untyped-def]
    session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)


def _tweet(n: int, version: int, **fields: object) -> Entry:
    return Entry(f"t{n}", f"author{n % 3}", 1_000 + n, version, f"v{version}", 1)._replace(**fields)


def _history(rnd: random.Random) -> tuple[list[ExtrasDelta], list[AuthorTimelineWrite], list[VisibleDelta]]:
    """Writes of a few rows by three readers, one reposter and their visible sets: inserts, updates,
    deletes, ties of an upsert and a delete, repost entries moved to another time."""
    extras: list[ExtrasDelta] = []
    reposts: list[AuthorTimelineWrite] = []
    visible: list[VisibleDelta] = []
    for ts in range(1, 25):
        reader = f"reader{ts % 3}"
        n = rnd.randrange(6)
        reply = {"in_reply_to_tweet_id": f"t{n + 10}", "in_reply_to_author_id": "dan"} if n % 2 else {}
        plain = _tweet(n, ts, **reply)
        repost = _tweet(n, ts, reposted_by="cat", reposted_at=5_000 + rnd.randrange(3), reposter_profile_version=ts,
                        **reply)
        op = rnd.choice(("insert", "update", "delete"))
        extras.append(ExtrasDelta(op, reader, rnd.choice((plain, repost)), ts))
        if rnd.random() < 0.3:  # a tie: the delete wins it
            extras.append(ExtrasDelta("delete", reader, extras[-1].entry, ts))
        reposts.append(AuthorTimelineWrite(op, repost, ts))
        visible.append(VisibleDelta(rnd.choice(("insert", "delete")), reader, f"user{rnd.randrange(4)}", ts))
    return extras, reposts, visible


def _list_history(rnd: random.Random) -> tuple[list[ListFact], list[ExcludedDelta]]:
    """Facts of two lists moving between owners, deleted and created again, and the owners' excluded
    sources set and taken back, ties of an insert and a delete among them."""
    facts: list[ListFact] = []
    excluded: list[ExcludedDelta] = []
    owners: dict[str, str | None] = {"L1": None, "L2": None}
    for ts in range(1, 13):
        lid = rnd.choice(("L1", "L2"))
        was, owner = owners[lid], rnd.choice(("ann", "bob", None, None))
        if owner is None and was is None:
            owner = "cat"
        moved = was if was is not None and was != owner else None
        policy = rnd.choice(("followed", "list", "none"))
        facts.append(ListFact(lid, owner, None if owner is None else rnd.choice((None, f"n{ts}")),
                              None if owner is None else policy, owner is not None and ts % 2 == 0, ts, moved))
        owners[lid] = owner
        excluded.append(ExcludedDelta(rnd.choice(("insert", "delete")), rnd.choice(("ann", "bob")),
                                      f"user{rnd.randrange(3)}", ts))
        if rnd.random() < 0.3:
            excluded.append(excluded[-1]._replace(op="delete"))
    return facts, excluded


def test_writes_in_any_order_converge_to_the_newest_as_in_memory(settings: Settings, unique: str) -> None:
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.memory import MemoryStore
    from feed_service.store.session import connect

    pipeline = isolated(settings, unique)
    ks = pipeline.keyspace
    rnd = random.Random(11)
    extras, reposts, visible = _history(rnd)
    facts, excluded = _list_history(rnd)
    model = MemoryStore()
    model.write(extras=extras, user_reposts=reposts, visible=visible, lists=facts, excluded=excluded)
    cluster, session = connect(pipeline)
    try:
        for batch_rows in (16, 1):  # batched and one request per row: the same rows
            writer = CassandraWriter(session, ks, batch_rows=batch_rows)
            for _ in range(2):  # shuffled, cut in two calls, with replays of a third of the writes
                def mixed(rows: list) -> tuple[list, list]:  # type: ignore[type-arg]
                    rows = rnd.sample(rows, len(rows)) + rnd.sample(rows, len(rows) // 3)
                    cut = rnd.randrange(len(rows))
                    return rows[:cut], rows[cut:]

                (e1, e2), (r1, r2), (v1, v2) = mixed(extras), mixed(reposts), mixed(visible)
                (f1, f2), (x1, x2) = mixed(facts), mixed(excluded)
                first = writer.write(extras=e1, user_reposts=r1, visible=v1, lists=f1, excluded=x1)
                second = writer.write(extras=e2, user_reposts=r2, visible=v2, lists=f2, excluded=x2)
                total = first + second
                assert (total.lists, total.excluded) == (len(f1) + len(f2), len(x1) + len(x2))
                assert total.extras_upserts + total.extras_deletes == len(e1) + len(e2)
                assert total.extras_deletes == sum(1 for r in e1 + e2 if r.op == "delete")
                assert (total.user_reposts, total.visible) == (len(r1) + len(r2), len(v1) + len(v2))
                assert total.timeline_upserts == total.tweets == 0

        def rows(table: str, key: str) -> dict[str, dict]:  # type: ignore[type-arg]
            out: dict[str, dict] = {}  # type: ignore[type-arg]
            for row in session.execute(f"SELECT {key}, at, {ENTRY_COLUMNS} FROM {ks}.{table}"):
                out.setdefault(row[0], {})[(row[1], row[2])] = row[2:]
            return out

        def as_stored(e: Entry) -> tuple:  # type: ignore[type-arg]
            return (e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.profile_version,
                    e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or "", e.reposted_by or "",
                    e.reposted_at or 0, e.reposter_profile_version or 0)

        expected = {r: {c: as_stored(e) for c, e in part.items()} for r, part in model.extras.items()}
        assert rows("home_extras", "timeline_id") == expected and expected
        expected = {u: {c: as_stored(e) for c, e in part.items()} for u, part in model.user_reposts.items()}
        assert rows("user_reposts", "user_id") == expected and expected
        stored_visible: dict[str, set[str]] = {}
        for reader, user in session.execute(f"SELECT reader_id, user_id FROM {ks}.reader_visible"):
            stored_visible.setdefault(reader, set()).add(user)
        assert stored_visible == model.visible and stored_visible
        stored_excluded: dict[str, set[str]] = {}
        for reader, user in session.execute(f"SELECT reader_id, user_id FROM {ks}.reader_excluded"):
            stored_excluded.setdefault(reader, set()).add(user)
        assert stored_excluded == model.excluded and stored_excluded
        stored_lists: dict[str, dict[str, tuple]] = {}  # type: ignore[type-arg]
        for owner, lid, *row in session.execute(
                f"SELECT owner_id, list_id, name, replies_policy, exclusive FROM {ks}.lists"):
            stored_lists.setdefault(owner, {})[lid] = tuple(row)
        assert stored_lists == model.list_rows
        rules = {r[0]: (r[1], r[2]) for r in session.execute(
            f"SELECT DISTINCT timeline_id, list_owner, list_policy FROM {ks}.home_timeline") if r[1] or r[2]}
        assert rules == model.list_rules
        assert rules and any(not f.live for f in facts) and any(f.previous_owner and f.live for f in facts)

        # '' and 0, never null, for what an entry lacks; the repost fields of a repost entry as given
        writer = CassandraWriter(session, ks)
        plain = Entry("p1", "bob", 7_000, 1, "plain", 3)
        repost = Entry("p2", "bob", 7_001, 1, "shared", 3, "p1", "bob", "cat", 9_000, 4)
        writer.write(extras=[ExtrasDelta("insert", "zed", plain, 100), ExtrasDelta("insert", "zed", repost, 100)])
        raw = {r.tweet_id: r for r in session.execute(
            f"SELECT at, {ENTRY_COLUMNS} FROM {ks}.home_extras WHERE timeline_id = 'zed'")}
        assert (raw["p1"].at, raw["p1"].in_reply_to_tweet_id, raw["p1"].in_reply_to_author_id, raw["p1"].reposted_by,
                raw["p1"].reposted_at, raw["p1"].reposter_profile_version) == (7_000, "", "", "", 0, 0)
        assert (raw["p2"].at, raw["p2"].in_reply_to_tweet_id, raw["p2"].reposted_by, raw["p2"].reposted_at,
                raw["p2"].reposter_profile_version) == (9_000, "p1", "cat", 9_000, 4)
        # one write timestamp per row, the step's clock: what a trim or a later step compares
        times = {r[0]: r[1:] for r in session.execute(
            f"SELECT tweet_id, WRITETIME(version), WRITETIME(reposted_by), WRITETIME(reposted_at)"
            f" FROM {ks}.home_extras WHERE timeline_id = 'zed'")}
        assert times == {"p1": (100, 100, 100), "p2": (100, 100, 100)}
        with pytest.raises(ValueError):  # no partition to write it to: refused before anything is sent
            writer.write(user_reposts=[AuthorTimelineWrite("insert", plain, 101)],
                         extras=[ExtrasDelta("delete", "zed", plain, 101)])
        assert session.execute(f"SELECT tweet_id FROM {ks}.home_extras WHERE timeline_id = 'zed'"
                               " AND at = 7000 AND tweet_id = 'p1'").one() is not None
        _drop(session, ks)
    finally:
        cluster.shutdown()


def test_stage_inputs_load_by_the_batch_rule_and_a_replay_recomputes_the_same(settings: Settings,
                                                                             unique: str) -> None:
    from feed_service.errors import StoreError, WriteFailed
    from feed_service.store.session import connect
    from feed_service.store.stage_inputs import BUCKETS, CassandraStageInputs, MemoryStageInputs

    pipeline = isolated(settings, unique)
    cluster, session = connect(pipeline)
    try:
        inputs = CassandraStageInputs(session, pipeline.keyspace)
        model = MemoryStageInputs()
        # more inputs than one page of a bucket, more than one round of concurrent writes
        identities = [("rel", f"user{i}", "bob") for i in range(12_000)] + [("clock",)]

        def step(store, batch_id: int, touched: list) -> dict:  # type: ignore[no-untyped-def]
            """A toy step: an input's new value is its old one plus this batch's id."""
            before = dict(store.load("s", batch_id))
            new = {k: (before.get(k) or ()) + (batch_id,) for k in touched}
            assert store.save("s", [(k, new[k], before.get(k)) for k in touched], batch_id).rows == len(touched)
            return new

        for store in (inputs, model):
            assert store.load("s", 1) == []
            first = step(store, 1, identities)
            # batch 2 saves part of its inputs, then fails; its replay sees batch 1's values everywhere
            step(store, 2, identities[:500])
            assert dict(store.load("s", 2)) == first
            replay = step(store, 2, identities)
            assert replay == {k: first[k] + (2,) for k in identities}
            assert step(store, 2, identities) == replay  # and once more: the same
            third = step(store, 3, identities[::2])
            store.save("s", [(identities[1], None, replay[identities[1]])], 3)  # an input withdrawn
            assert dict(store.load("s", 4)) == {k: v for k, v in (replay | third).items() if k != identities[1]}
            assert store.load("other", 4) == []  # stages apart
        assert len({r.bucket for r in session.execute(
            f"SELECT DISTINCT stage, bucket FROM {pipeline.keyspace}.per_reader_inputs")}) == BUCKETS

        session.execute(f"DROP TABLE {pipeline.keyspace}.per_reader_inputs", timeout=60)
        with pytest.raises(WriteFailed):
            inputs.save("s", [(("clock",), 1, None)], 9)
        with pytest.raises(StoreError):
            inputs.load("s", 9)
        _drop(session, pipeline.keyspace)
    finally:
        cluster.shutdown()


def test_a_keyspace_from_before_the_tables_gains_them(settings: Settings, unique: str) -> None:
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.schema import apply_schema, schema_statements
    from feed_service.store.stage_inputs import CassandraStageInputs
    from feed_service.store.session import connect

    keyspace = f"feed_{unique}"
    cluster, session = connect(settings)
    try:
        for statement in schema_statements(keyspace):  # the schema as it was: none of the four tables
            if not any(f"{keyspace}.{table} " in statement for table in NEW_TABLES):
                session.execute(statement, timeout=60)
        query = f"SELECT table_name FROM system_schema.tables WHERE keyspace_name = '{keyspace}'"
        assert not {r.table_name for r in session.execute(query)} & set(NEW_TABLES)
        apply_schema(session, keyspace, gc_grace_seconds=3_600)
        apply_schema(session, keyspace, gc_grace_seconds=3_600)  # and again: nothing to do
        assert set(NEW_TABLES) <= {r.table_name for r in session.execute(query)}
        grace = {r.table_name: r.gc_grace_seconds for r in session.execute(
            f"SELECT table_name, gc_grace_seconds FROM system_schema.tables WHERE keyspace_name = '{keyspace}'")}
        assert grace["home_extras"] == grace["user_reposts"] == grace["reader_visible"] == 3_600
        # and the writers use them
        CassandraWriter(session, keyspace).write(visible=[VisibleDelta("insert", "ann", "bob", 1)])
        CassandraStageInputs(session, keyspace).save("s", [(("clock",), 7, None)], 1)
        assert CassandraStageInputs(session, keyspace).load("s", 2) == [(("clock",), 7)]
        _drop(session, keyspace)
    finally:
        cluster.shutdown()


def test_the_streams_per_reader_path_with_pull_reposters_writes_the_materializers_tables(settings: Settings,
                                                                                         unique: str) -> None:
    """The stream's per-reader stage (:class:`StreamStage`, batch by batch, some batches twice as a
    replayed micro-batch would, some by a new driver) on the real writer and inputs table, against
    the in-memory view."""
    import asyncio
    import json

    from feed_service.core.events import event_to_json
    from feed_service.core.view import Materializer
    from feed_service.store.cassandra_reader import CassandraReader
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.session import connect
    from feed_service.store.stage_inputs import CassandraStageInputs
    from tests.support.backfill_stages import generated_history
    from tests.support.per_reader_stream import Fakes, reset_fakes, run_stream
    from tests.support.repost_indexes import view_indexes
    from tests.support.repost_runs import Run

    pipeline = isolated(settings, unique)
    ks = pipeline.keyspace
    lines = [json.dumps(event_to_json(e)) for e in generated_history(2, 600)]
    cuts = sorted(random.Random(2).sample(range(1, len(lines)), 5))
    batches = [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)])]
    threshold = 6  # some reposters pull, some push (tests/unit/test_pull_reposters_storage.py)
    engine = Materializer(inbox_cap=500, pull_threshold=threshold, pull_reposters=True)
    for batch in batches:
        engine.process_batch(batch)
    view = engine.view
    cluster, session = connect(pipeline)
    try:
        reset_fakes()
        Fakes.store, Fakes.inputs = CassandraWriter(session, ks), CassandraStageInputs(session, ks)  # type: ignore[assignment]
        run_stream(Run([], batches, 0), inbox_cap=500, pull_threshold=threshold, replay=random.Random(4),
                   pull_reposters=True)

        def sets(cql: str) -> dict[str, set[str]]:
            out: dict[str, set[str]] = {}
            for key, value in session.execute(cql):
                if value:
                    out.setdefault(key, set()).update({value} if isinstance(value, str) else value)
            return out

        pull = sets(f"SELECT DISTINCT timeline_id, pull_reposters FROM {ks}.home_timeline")
        assert pull == {r: p for r, p in view.pull_reposters.items() if p} and pull
        assert sets(f"SELECT reader_id, user_id FROM {ks}.reader_hidden") == {
            r: u for r, u in view.hidden.items() if u} and view.hidden
        assert sets(f"SELECT reader_id, user_id FROM {ks}.reader_visible") == {r: u for r, u in view.visible.items() if u}
        extras = {(r.timeline_id, r.tweet_id): (r.at, r.reposted_by or None) for r in session.execute(
            f"SELECT timeline_id, tweet_id, at, reposted_by FROM {ks}.home_extras")}
        assert extras == {(reader, e.tweet_id): (e.at, e.reposted_by)
                          for reader, rows in view.extras.items() for e in rows.values()}
        reposts = {(r.user_id, r.tweet_id, r.at) for r in session.execute(
            f"SELECT user_id, tweet_id, at FROM {ks}.user_reposts")}
        assert reposts == {(p, e.tweet_id, e.at) for p, rows in view.own_reposts.items() for e in rows.values()}
        indexes = view_indexes(view)
        stored = {(r.reader_id, r.tweet_id): (r.author_id, r.reposted_at, r.reposted_by) for r in session.execute(
            f"SELECT reader_id, tweet_id, author_id, reposted_at, reposted_by FROM {ks}.home_extras_reposts")}
        assert stored == indexes["home_extras_reposts"] and stored
        stored = {(r.tweet_id, r.reposter_id): (r.author_id, r.reposted_at, r.reposter_id) for r in session.execute(
            f"SELECT tweet_id, reposter_id, author_id, reposted_at FROM {ks}.reposts_by_tweet")}
        assert stored == indexes["reposts_by_tweet"] and stored

        # the reader's lookups answer from them, for the reader who merges in the most pull reposters
        reader_id = max(sorted(pull), key=lambda r: len(pull[r]))
        tweets = [(e.author_id, e.tweet_id) for rows in view.own_reposts.values() for e in rows.values()]
        pushed = {(e.author_id, e.tweet_id): (e.reposted_at, e.reposted_by)
                  for e in view.extras.get(reader_id, {}).values() if e.reposted_by}
        users = sorted({u for rows in view.hidden.values() for u in rows} | {reader_id})

        async def lookups() -> tuple:
            reader = CassandraReader(session, ks)
            return (await reader.reposts_of(tweets, pull[reader_id], timeout=10),
                    await reader.pushed_reposts(reader_id, [*tweets, *pushed], timeout=10),
                    await reader.hidden_among(reader_id, users, timeout=10),
                    await reader.pull_reposters(reader_id, timeout=10),
                    (await reader.inbox(reader_id, before=None, limit=1, timeout=10)).pull_reposters)

        of, got_pushed, hidden, reposters, with_inbox = asyncio.run(lookups())
        want: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for p in pull[reader_id]:
            for e in view.own_reposts.get(p, {}).values():
                want.setdefault((e.author_id, e.tweet_id), []).append((e.reposted_at, p))  # type: ignore[arg-type]
        assert of == {k: sorted(v) for k, v in want.items()} and of
        assert got_pushed == pushed
        assert hidden == view.hidden.get(reader_id, set())
        assert reposters == with_inbox == sorted(pull[reader_id])
        _drop(session, ks)
    finally:
        reset_fakes()
        cluster.shutdown()
