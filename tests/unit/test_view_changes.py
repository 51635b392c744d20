"""The view's own change stream (docs/view-changes.md), without a stack: the message codec against
its JSON Schema, splitting, decode errors, the source time of each output (feed_service/core/change_sources.py),
the output rows -> changes mapping, and the sink publishing each chunk's changes after its write."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from feed_service import resources
from feed_service.core.change_sources import BatchSources, step_sources
from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    TweetDelete,
    TweetUpsert,
)
from feed_service.core.join import StepResult, step
from feed_service.core.rows import Entry
from feed_service.core.view_changes import (
    MAX_IDS_PER_MESSAGE,
    AuthorChange,
    BlockRowChange,
    ChangeDecodeError,
    ProfileChange,
    PullFollowChange,
    TimelineChange,
    ViewChange,
    decode,
    encode,
    message_key,
    split,
    to_json,
)
from feed_service.errors import ConfigError, DeliveryFailed
from feed_service.settings import Settings
from feed_service.store.ports import WriteCounts
from spark_jobs.output_rows import OUTPUT_COLUMNS, dead_letter_rows, result_rows, view_changes_of, writes_of

SCHEMA_NAME = "schemas/view-changes/view-change.schema.json"
INT64 = st.integers(-(2**63), 2**63 - 1)
NATURAL = st.integers(0, 2**63 - 1)
IDS = st.text(min_size=1, max_size=6)

# --- the codec ------------------------------------------------------------------------------------

entries = st.builds(Entry, IDS, IDS, NATURAL, NATURAL, st.text(max_size=20), NATURAL,
                    *(st.one_of(st.none(), strategy) for strategy in (IDS, IDS, IDS, NATURAL, NATURAL)))
"""Entries with or without a reply's parent and a repost's reposter (docs/reposts-and-replies.md)."""
sources = st.none() | INT64
delta_ops = st.sampled_from(["insert", "update", "delete"])
follow_ops = st.sampled_from(["insert", "delete"])
id_lists = st.lists(IDS, min_size=1, max_size=5).map(tuple)
changes = st.one_of(
    st.builds(TimelineChange, delta_ops, entries, id_lists, INT64, sources),
    st.builds(AuthorChange, delta_ops, entries, INT64, sources),
    st.builds(PullFollowChange, follow_ops, IDS, id_lists, INT64, sources),
    st.builds(ProfileChange, IDS, NATURAL, INT64, sources),
    st.builds(BlockRowChange, follow_ops, IDS, IDS, INT64, sources),
)
E1 = Entry("t1", "bob", 10, 2, "héllo \"quoted\" ☃", 1)
ONE_OF_EACH: list[ViewChange] = [
    TimelineChange("insert", E1, ("ann", "cat"), 101, 1_700_000_000_000),
    AuthorChange("delete", E1, 101, None),
    PullFollowChange("delete", "bob", ("ann",), 7, 5),
    ProfileChange("bob", 3, 8, 6),
    BlockRowChange("insert", "bob", "ann", 9, 7),
]


class _Validator:
    """The schema compiled by fastjsonschema, the validator the project uses for its event schema."""

    def __init__(self, schema: dict) -> None:
        import fastjsonschema

        self._validate = fastjsonschema.compile(schema, use_formats=False)

    def validate(self, obj: Any) -> None:
        self._validate(obj)

    def is_valid(self, obj: Any) -> bool:
        import fastjsonschema

        try:
            self._validate(obj)
        except fastjsonschema.JsonSchemaException:
            return False
        return True


@functools.cache
def _validator() -> _Validator:
    return _Validator(resources.read_json(SCHEMA_NAME))


@pytest.fixture
def validator() -> Any:
    return _validator()


@hypothesis_settings(deadline=None)  # a loaded machine is not a failure
@given(changes)
def test_every_change_round_trips_and_matches_the_schema(change: ViewChange) -> None:
    value = encode(change)
    back = decode(value)
    assert back == change and type(back) is type(change)
    assert decode(value.decode()) == change  # text works as well as bytes
    assert json.loads(value) == to_json(change)
    assert message_key(back) == message_key(change)


@hypothesis_settings(deadline=None)  # the first example compiles the schema
@given(changes)
def test_to_json_of_every_change_is_valid_by_the_schema(change: ViewChange) -> None:
    _validator().validate(to_json(change))


@pytest.mark.parametrize("change", ONE_OF_EACH, ids=lambda c: type(c).__name__)
def test_each_kind_by_example(change: ViewChange, validator: Any) -> None:
    obj = to_json(change)
    validator.validate(obj)
    assert decode(encode(change)) == change
    assert set(obj) >= {"kind", "ts", "source_ms"}


def test_the_schema_refuses_what_decode_refuses(validator: Any) -> None:
    good = to_json(ONE_OF_EACH[0])
    for bad in ({**good, "kind": "tweet"}, {**good, "op": "upsert"}, {**good, "ts": "1"}, {**good, "timeline_ids": []},
                {k: v for k, v in good.items() if k != "source_ms"}, {**good, "entry": {**good["entry"], "version": -1}}):
        assert not validator.is_valid(bad), bad


def test_message_keys_are_the_join_key_that_wrote_the_rows() -> None:
    assert [message_key(c) for c in ONE_OF_EACH] == ["bob", "bob", "bob", "bob", "bob"]
    assert message_key(BlockRowChange("delete", "cat", "bob", 1, None)) == "cat"  # the blocker's key writes it


def test_split_keeps_order_and_contents() -> None:
    ids = tuple(f"u{i}" for i in range(7))
    change = TimelineChange("insert", E1, ids, 5, 9)
    parts = list(split(change, 3))
    assert [p.timeline_ids for p in parts] == [ids[0:3], ids[3:6], ids[6:]]
    assert all(p._replace(timeline_ids=ids) == change for p in parts)
    pull = PullFollowChange("insert", "bob", ids, 5, 9)
    assert [p.follower_ids for p in split(pull, 4)] == [ids[:4], ids[4:]]
    assert list(split(change, 7)) == [change] and list(split(ONE_OF_EACH[1], 1)) == [ONE_OF_EACH[1]]
    big = TimelineChange("insert", E1, tuple(str(i) for i in range(MAX_IDS_PER_MESSAGE + 1)), 5, 9)
    assert [len(p.timeline_ids) for p in split(big)] == [MAX_IDS_PER_MESSAGE, 1]
    assert len(encode(next(split(TimelineChange("insert", E1, tuple("x" * 40 for _ in range(MAX_IDS_PER_MESSAGE)),
                                                               5, 9))))) < 1_000_000  # under Kafka's 1 MB default
    with pytest.raises(ValueError):
        list(split(change, 0))


@pytest.mark.parametrize("value", [
    b"not json", b"\xff\xfe", b"[1, 2]", b'"a string"', b"{}",
    b'{"kind":"tweet","ts":1,"source_ms":null}',
    b'{"kind":"profile","user_id":"a","version":1}',  # no ts
    b'{"kind":"profile","user_id":"a","version":1,"ts":"1"}',
    b'{"kind":"profile","user_id":"a","version":1.5,"ts":1}',
    b'{"kind":"profile","user_id":"a","version":Infinity,"ts":1}',
    b'{"kind":"profile","user_id":"a","version":NaN,"ts":1}',
    b'{"kind":"profile","user_id":"a","version":1,"ts":true}',
    b'{"kind":"profile","user_id":7,"version":1,"ts":1}',
    b'{"kind":"profile","user_id":"a","version":1,"ts":1,"source_ms":"5"}',
    b'{"kind":"block","op":"block","blocker_id":"a","blocked_id":"b","ts":1}',
    b'{"kind":"pull_follow","op":"insert","author_id":"a","follower_ids":"abc","ts":1}',
    b'{"kind":"pull_follow","op":"insert","author_id":"a","follower_ids":[1],"ts":1}',
    b'{"kind":"timeline","op":"insert","entry":[],"timeline_ids":["a"],"ts":1}',
    b'{"kind":"timeline","op":"insert","entry":{"tweet_id":"t"},"timeline_ids":["a"],"ts":1}',
    b'{"kind":"author","op":"upsert","entry":{"tweet_id":"t","author_id":"a","created_at":1,"version":1,'
    b'"text":"x","profile_version":1},"ts":1}',
    b"[" * 100_000,
])
def test_anything_else_is_a_decode_error(value: bytes) -> None:
    with pytest.raises(ChangeDecodeError):
        decode(value)


# --- source times ---------------------------------------------------------------------------------

def follow(follower: str, followee: str = "bob", version: int = 1, op: str = "follow") -> FollowChange:
    return FollowChange(follower, followee, version, op)  # type: ignore[arg-type]


def tweet(tid: str, created_at: int, text: str = "x", version: int = 1) -> TweetUpsert:
    return TweetUpsert(tid, "bob", version, created_at, text, 1)


SEED: list[Event] = [follow("ann"), follow("cat"), tweet("t1", 10), tweet("t2", 20)]
PROFILE = ProfileVersion("bob", 9, "Bob")  # a bystander in the batches below: the batch's latest event


def sourced(state: Any, batch: list[tuple[Event, int | None]], **kwargs: Any) -> tuple[StepResult, Any]:
    events = [e for e, _ in batch]
    result = step(state, events, **kwargs)
    return result, step_sources(result, events, [t for _, t in batch])


def deltas(result: StepResult, src: Any) -> list[tuple[str, str, tuple[str, ...], int | None]]:
    return [(d.op, d.entry.tweet_id, d.timeline_ids, s) for d, s in zip(result.deltas, src.deltas)]


def seeded(**kwargs: Any) -> Any:
    return step(None, SEED, **kwargs).state


def test_a_new_tweet_takes_its_own_time() -> None:
    result, src = sourced(seeded(), [(tweet("t3", 30), 5_000), (PROFILE, 9_000)])
    assert deltas(result, src) == [("insert", "t3", ("ann", "cat"), 5_000)]
    assert src.tweets == (5_000,) and src.author_timeline == (5_000,) and src.profiles == (9_000,)


def test_an_edit_and_a_delete_take_the_latest_event_of_their_tweet() -> None:
    batch = [(tweet("t1", 10, "v2", 2), 4_000), (tweet("t1", 10, "v3", 3), 6_000), (TweetDelete("t2", "bob", 1), 5_000),
             (PROFILE, 9_000)]
    result, src = sourced(seeded(), batch)
    assert deltas(result, src) == [("update", "t1", ("ann", "cat"), 6_000), ("delete", "t2", ("ann", "cat"), 5_000)]
    assert [(t.tweet_id, s) for t, s in zip(result.tweets, src.tweets)] == [("t1", 6_000), ("t2", 5_000)]


def test_a_follow_that_brings_old_tweets_takes_the_follows_time() -> None:
    batch = [(follow("dan"), 3_000), (follow("eve"), 4_000), (follow("fay", "bob", 2, "unfollow"), 8_500),
             (PROFILE, 9_000)]
    result, src = sourced(seeded(), batch)
    # one delta per tweet for both newcomers: the latest of their follows, not the batch's latest event
    assert deltas(result, src) == [("insert", "t2", ("dan", "eve"), 4_000), ("insert", "t1", ("dan", "eve"), 4_000)]


def test_an_unfollow_block_and_mute_take_their_own_times() -> None:
    result, src = sourced(seeded(), [(follow("cat", "bob", 2, "unfollow"), 3_000), (PROFILE, 9_000)])
    assert deltas(result, src) == [("delete", "t2", ("cat",), 3_000), ("delete", "t1", ("cat",), 3_000)]
    # a block at the blocker's key: the rows leave the blocked reader, the blocks row is written
    result, src = sourced(seeded(), [(BlockChange("bob", "ann", 1, "block"), 4_000), (PROFILE, 9_000)])
    assert deltas(result, src) == [("delete", "t2", ("ann",), 4_000), ("delete", "t1", ("ann",), 4_000)]
    assert [(b.blocked_id, s) for b, s in zip(result.blocks, src.blocks)] == [("ann", 4_000)]
    # the blocked user's key, a block by the reader: the same rule from the other side
    result, src = sourced(seeded(), [(BlockChange("cat", "bob", 1, "block"), 4_200), (PROFILE, 9_000)])
    assert deltas(result, src) == [("delete", "t2", ("cat",), 4_200), ("delete", "t1", ("cat",), 4_200)]
    assert result.blocks == ()
    result, src = sourced(seeded(), [(MuteChange("ann", "bob", 1, "mute"), 4_500), (PROFILE, 9_000)])
    assert deltas(result, src) == [("delete", "t2", ("ann",), 4_500), ("delete", "t1", ("ann",), 4_500)]


def test_a_tweet_pushed_out_by_the_cap_takes_the_latest_event_of_the_batch() -> None:
    result, src = sourced(seeded(inbox_cap=2), [(tweet("t3", 30), 8_000), (follow("dan"), 3_000)], inbox_cap=2)
    assert sorted(deltas(result, src)) == sorted([
        ("delete", "t1", ("ann", "cat"), 8_000),  # evicted: no event of t1, none of ann's or cat's edges
        ("insert", "t3", ("ann", "cat", "dan"), 8_000),
        ("insert", "t2", ("dan",), 3_000),
    ])


def test_profiles_and_pull_follows() -> None:
    batch = [(ProfileVersion("bob", 1, "B"), 1_000), (ProfileVersion("bob", 2, "Bo"), 2_000),
             (ProfileVersion("bob", 2, "Bob"), 1_500)]
    result, src = sourced(None, batch)
    assert [(p.version, s) for p, s in zip(result.profiles, src.profiles)] == [(1, 1_000), (2, 2_000)]
    star = step(None, [follow("ann", "star"), follow("cat", "star")], pull_threshold=2).state
    assert star.pull
    result, src = sourced(star, [(follow("dan", "star"), 3_000), (follow("cat", "star", 2, "unfollow"), 2_500),
                                 (TweetUpsert("t9", "star", 1, 5, "x", 1), 9_000)], pull_threshold=2)
    assert [(f.op, f.follower_ids, s) for f, s in zip(result.pull_follows, src.pull_follows)] == [
        ("delete", ("cat",), 2_500), ("insert", ("dan",), 3_000)]
    assert src.author_timeline == (9_000,)


def test_late_changes_cause_nothing_and_missing_times_give_none() -> None:
    events = [follow("dan"), tweet("t3", 30)]
    index = BatchSources(events, [7_000, 1_000], skip={0})
    assert index.latest == 1_000 and index.readers(("dan",)) is None
    result, src = sourced(seeded(), [(tweet("t3", 30), None), (follow("dan"), None)])
    assert all(s is None for part in src for s in part) and result.deltas
    result, src = sourced(seeded(), [(tweet("t3", 30), None), (follow("dan"), 2_000)])
    assert ("insert", "t3", ("ann", "cat", "dan"), 2_000) in deltas(result, src)  # t3 has no time: dan's follow
    with pytest.raises(ValueError):
        BatchSources(events, [1])


def test_a_follower_list_is_looked_up_once() -> None:
    index = BatchSources([follow("dan"), follow("eve")], [3_000, 4_000])
    ids = ("ann", "dan", "zed")
    assert index.readers(ids) == 3_000
    index._readers["zed"] = 9_999  # the memo answers for the same list object
    assert index.readers(ids) == 3_000 and index.readers(tuple(list(ids))) == 9_999
    many = tuple(f"u{i}" for i in range(100)) + ("eve",)
    assert index.readers(many) == 4_000  # more ids than readers: the other way round
    assert BatchSources([tweet("t1", 1)], [5]).readers(ids) is None


# --- output rows -> changes ------------------------------------------------------------------------

def rows_of(result: StepResult, src: Any = None) -> list[dict[str, Any]]:
    return [dict(zip(OUTPUT_COLUMNS, r)) for r in result_rows(result, src)]


def test_output_rows_map_to_one_change_each_and_still_to_the_same_writes() -> None:
    star = step(None, [follow("ann", "star"), follow("cat", "star")], pull_threshold=2).state
    result, src = sourced(star, [(follow("dan", "star"), 3_000), (TweetUpsert("t9", "star", 1, 5, "x", 1), 9_000),
                                 (BlockChange("star", "cat", 1, "block"), 4_000),
                                 (ProfileVersion("star", 1, "Star"), 1_000)], pull_threshold=2)
    rows = rows_of(result, src)
    assert writes_of(rows) == writes_of(rows_of(result))  # source_ms adds nothing to the writes
    e9 = Entry("t9", "star", 5, 1, "x", 1)
    ts = result.ts
    assert view_changes_of(rows) == [
        ProfileChange("star", 1, ts, 1_000),
        AuthorChange("insert", e9, ts, 9_000),
        PullFollowChange("delete", "star", ("cat",), ts, 4_000),
        PullFollowChange("insert", "star", ("dan",), ts, 3_000),
        BlockRowChange("insert", "star", "cat", ts, 4_000),
    ]
    assert {r["kind"] for r in rows} == {"tweet", "profile", "author", "pull_follow", "block"}
    result, src = sourced(seeded(), [(tweet("t3", 30), 5_000), (TweetDelete("t1", "bob", 1), 6_000)])
    changes = view_changes_of(rows_of(result, src))
    e1, e3 = Entry("t1", "bob", 10, 1, "x", 1), Entry("t3", "bob", 30, 1, "x", 1)
    assert changes == [TimelineChange("delete", e1, ("ann", "cat"), result.ts, 6_000),
                       TimelineChange("insert", e3, ("ann", "cat"), result.ts, 5_000),
                       AuthorChange("delete", e1, result.ts, 6_000),
                       AuthorChange("insert", e3, result.ts, 5_000)]
    # tweets-table rows and dead letters are not published
    class Letter:
        dl_key, dl_value = "feed.tweets.v1/0/1", "{}"
    assert view_changes_of([dict(zip(OUTPUT_COLUMNS, r)) for r in dead_letter_rows([Letter()])]) == []
    assert all(r["source_ms"] is None for r in rows_of(result))


def test_run_key_fills_source_ms_from_the_event_times() -> None:
    from tests.support.run_key_inputs import Routed, no_edges
    from spark_jobs.timeline_join import JoinConfig, run_key

    def timed(event: Event, t: Any) -> Routed:
        r = Routed(event)
        r.event_time = t
        return r

    for horizon in (None, 10**9):
        config = JoinConfig(800, 2000, 0, horizon)
        _, out = run_key(None, no_edges, [timed(follow("ann"), 1_000), timed(tweet("t1", 10), 2_000)], config)
        source = OUTPUT_COLUMNS.index("source_ms")
        assert [(r[0], r[source]) for r in out] == [("timeline", 2_000), ("tweet", 2_000), ("author", 2_000),
                                                    ("per_reader", 2_000)]
    config = JoinConfig(800, 2000, 0, None)
    for missing in (None, float("nan")):
        _, out = run_key(None, no_edges, [timed(follow("ann"), missing), timed(tweet("t1", 10), missing)], config)
        assert [r[OUTPUT_COLUMNS.index("source_ms")] for r in out] == [None] * 4
    _, out = run_key(None, no_edges, [Routed(follow("ann")), Routed(tweet("t1", 10))], config)  # no column at all
    assert [r[OUTPUT_COLUMNS.index("source_ms")] for r in out] == [None] * 4


def test_the_operator_carries_source_ms() -> None:
    from tests.support.processor_harness import BOB, Harness, routed, seeded_state

    harness = Harness()
    harness.seed(BOB, seeded_state())
    big = 2**53 + 1
    out = harness.feed(BOB, [routed(tweet("t3", 30), big, offset=1), routed(follow("dan"), 1_000, offset=2),
                             routed(ProfileVersion("bob", 4, "B"), None, offset=3)])
    assert sorted((r.kind, r.tweet_id, r.source_ms) for r in out) == sorted([
        ("timeline", "t3", big), ("timeline", "t2", 1_000), ("timeline", "t1", 1_000), ("tweet", "t3", big),
        ("author", "t3", big), ("profile", None, big)])  # the profile has no time: the batch's latest


# --- the sink ------------------------------------------------------------------------------------

class FakeWriter:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def write(self, *, timeline_fanout=(), tweets=(), **_: Any) -> WriteCounts:  # type: ignore[no-untyped-def]
        timeline, tweets = [r for f in timeline_fanout for r in f.rows()], list(tweets)
        self.log.append(("write", len(timeline)))
        deletes = sum(1 for w in timeline if w.op == "delete")
        return WriteCounts(len(timeline) - deletes, deletes, len(tweets))


def test_write_partition_publishes_each_chunk_after_its_write() -> None:
    import spark_jobs.stream.sink as sink

    log: list[Any] = []
    published: list[ViewChange] = []

    def publish(settings: Settings, changes: list[ViewChange]) -> int:
        log.append(("publish", len(changes)))
        published.extend(changes)
        return sum(len(list(split(c))) for c in changes)

    outputs = sink.SinkOutputs(writer_for=lambda settings: FakeWriter(log), publish_view_changes=publish,
                               publish_dead_letters=lambda settings, letters: log.append(("letters", len(letters))))
    result, src = sourced(seeded(), [(tweet("t3", 30), 5_000), (follow("dan"), 1_000)])

    class Letter:
        def __init__(self, value: str) -> None:
            self.dl_key, self.dl_value = "k", value

    letters = [Letter('{"reason_code":"bad_json"}'), Letter('{"reason_code":"bad_json"}'), Letter("{}")]
    rows = rows_of(result, src) + [dict(zip(OUTPUT_COLUMNS, r)) for r in dead_letter_rows(letters)]
    expected = view_changes_of(rows)
    report = sink.write_partition(Settings(), iter(rows), outputs=outputs, chunk_rows=3)
    assert published == expected and report.changes_published == len(expected)
    kinds = [k for k, _ in log]
    assert kinds[0] == "write" and all(kinds[i - 1] in ("write", "letters") for i, k in enumerate(kinds) if k == "publish")
    assert kinds.count("write") == -(-len(rows) // 3)
    assert report.upserts == {"ann": 1, "cat": 1, "dan": 3}
    assert report.counts == WriteCounts(timeline_upserts=5, tweets=1)
    assert report.dead_letters == {"bad_json": 2, "unknown": 1}

    log.clear()
    published.clear()
    off = sink.write_partition(Settings(view_changes=False), iter(rows), outputs=outputs, chunk_rows=3)
    assert published == [] and off.changes_published == 0 and "publish" not in [k for k, _ in log]
    assert off.upserts == report.upserts


def test_merge_reports_sums_every_field() -> None:
    from spark_jobs.stream.sink import PartitionReport, merge_reports

    merged = merge_reports([PartitionReport({"a": 1}, WriteCounts(1, 0, 1), {"x": 1}, 3),
                            PartitionReport({"a": 2, "b": 1}, WriteCounts(2, 1), {"x": 2, "y": 1}, 4)])
    assert merged == PartitionReport({"a": 3, "b": 1}, WriteCounts(3, 1, 1), {"x": 3, "y": 1}, 7)
    assert merge_reports([]) == PartitionReport({}, WriteCounts(), {}, 0)


class FakeProducer:
    def __init__(self, fail: bool = False, remaining: int = 0) -> None:
        self.messages: list[tuple[str, bytes, bytes]] = []
        self.pending: list[Any] = []
        self.fail, self.remaining = fail, remaining

    def produce(self, topic: str, *, key: bytes, value: bytes, on_delivery: Any) -> None:
        self.messages.append((topic, key, value))
        self.pending.append(on_delivery)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        for report in self.pending:
            report("broker down" if self.fail else None, None)
        self.pending.clear()
        return self.remaining


def test_the_publisher_splits_keys_and_waits_for_every_ack() -> None:
    import feed_service.kafka.stream_publisher as publisher

    settings = Settings(kafka_bootstrap="fake:1").with_topic_suffix(".t")
    producer = publisher._producers[publisher.producer_key(settings)] = FakeProducer()
    try:
        many = TimelineChange("insert", E1, tuple(str(i) for i in range(MAX_IDS_PER_MESSAGE + 1)), 5, 9)
        assert publisher.publish_view_changes(settings, [*ONE_OF_EACH, many]) == len(ONE_OF_EACH) + 2
        assert {t for t, _, _ in producer.messages} == {"feed.timeline-changes.v1.t"}
        assert [decode(v) for _, _, v in producer.messages] == [*ONE_OF_EACH, *split(many)]
        assert [k for _, k, _ in producer.messages] == [message_key(c).encode() for c in [*ONE_OF_EACH, many, many]]
        assert publisher.publish_view_changes(settings, []) == 0
        for failing in (FakeProducer(fail=True), FakeProducer(remaining=1)):
            publisher._producers[publisher.producer_key(settings)] = failing
            with pytest.raises(DeliveryFailed):
                publisher.publish_view_changes(settings, ONE_OF_EACH[:1])
            assert publisher.producer_key(settings) not in publisher._producers  # the retry gets a fresh producer
    finally:
        publisher._producers.pop(publisher.producer_key(settings), None)


def test_the_setting() -> None:
    assert Settings().view_changes is True and Settings.from_env({}).view_changes is True
    assert Settings.from_env({"FEED_VIEW_CHANGES": "0"}).view_changes is False
    assert Settings.from_env({"FEED_VIEW_CHANGES": " true "}).view_changes is True
    with pytest.raises(ConfigError, match="FEED_VIEW_CHANGES"):
        Settings.from_env({"FEED_VIEW_CHANGES": "maybe"})
    with pytest.raises(ConfigError):
        Settings(view_changes=1)  # type: ignore[arg-type]
    off = Settings(view_changes=False)
    assert Settings.from_env(off.to_env()).view_changes is False
    assert off.topic("timeline_changes") == "feed.timeline-changes.v1"
