"""Reposts and replies at the event layer: the envelope rules, keys and topic, the producer's helpers,
``feedctl publish``, the rows the stream hands the engine, and the workload's shares.

What a repost or a reply does to the view is the engine's (docs/event-kinds.md, "Meaning"); nothing
here steps the engine.
"""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from feed_service.core.event_kinds import EDGE_KINDS
from feed_service.core.events import (
    InvalidEvent,
    RepostChange,
    TweetUpsert,
    event_to_json,
    join_key,
    join_keys,
    parse_event,
)
from feed_service.kafka.keys import record_key, topic_role
from feed_service.kafka.producer import EventRejected
from feed_service.workload.generator import RepostMix, WorkloadModel, generate
from spark_jobs.envelope import EVENT_COLUMNS
from spark_jobs.timeline_join import events_from_rows
from tests.support.fake_producer import make_producer

UPSERT = {"type": "tweet", "op": "upsert", "tweet_id": "t2", "author_id": "bob", "version": 2, "created_at": 10,
          "text": "yes", "profile_version": 1}
REPOST = {"type": "repost", "op": "repost", "reposter_id": "cat", "tweet_id": "t1", "author_id": "ann", "version": 3,
          "created_at": 20, "profile_version": 4}


def _code(envelope: dict[str, Any]) -> str:
    with pytest.raises(InvalidEvent) as info:
        parse_event(envelope)
    return info.value.code


# --- replies -------------------------------------------------------------------------------------

@pytest.mark.parametrize("parent", [
    {}, {"in_reply_to_tweet_id": None, "in_reply_to_author_id": None}, {"in_reply_to_tweet_id": None},
])
def test_a_tweet_without_a_parent_is_not_a_reply(parent: dict[str, Any]) -> None:
    tweet = parse_event({**UPSERT, **parent})
    assert tweet == TweetUpsert("t2", "bob", 2, 10, "yes", 1) and not tweet.is_reply
    assert "in_reply_to_tweet_id" not in event_to_json(tweet)


def test_a_reply_names_its_parent_and_its_author_and_keeps_them_through_json() -> None:
    reply = parse_event({**UPSERT, "in_reply_to_tweet_id": "t1", "in_reply_to_author_id": "ann"})
    assert reply == TweetUpsert("t2", "bob", 2, 10, "yes", 1, "t1", "ann") and reply.is_reply
    assert parse_event(event_to_json(reply)) == reply
    assert join_keys(reply) == ("bob",)  # a reply belongs to its author, like any tweet
    self_reply = parse_event({**UPSERT, "in_reply_to_tweet_id": "t0", "in_reply_to_author_id": "bob"})
    assert self_reply.in_reply_to_author_id == self_reply.author_id  # a thread is allowed


@pytest.mark.parametrize(("parent", "code"), [
    ({"in_reply_to_tweet_id": "t1"}, "incomplete_reply"),
    ({"in_reply_to_author_id": "ann"}, "incomplete_reply"),
    ({"in_reply_to_tweet_id": "t1", "in_reply_to_author_id": None}, "incomplete_reply"),
    ({"in_reply_to_tweet_id": None, "in_reply_to_author_id": "ann"}, "incomplete_reply"),
    ({"in_reply_to_tweet_id": "", "in_reply_to_author_id": "ann"}, "empty_id"),
    ({"in_reply_to_tweet_id": "t1", "in_reply_to_author_id": ""}, "empty_id"),
    ({"in_reply_to_tweet_id": 1, "in_reply_to_author_id": "ann"}, "wrong_type"),
    ({"in_reply_to_tweet_id": "t1", "in_reply_to_author_id": ["ann"]}, "wrong_type"),
])
def test_a_reply_gives_both_ids_or_neither(parent: dict[str, Any], code: str) -> None:
    assert _code({**UPSERT, **parent}) == code


def test_incomplete_reply_reason_names_both_fields() -> None:
    with pytest.raises(InvalidEvent, match="'in_reply_to_tweet_id' needs 'in_reply_to_author_id'"):
        parse_event({**UPSERT, "in_reply_to_tweet_id": "t1"})
    with pytest.raises(InvalidEvent, match="'in_reply_to_author_id' needs 'in_reply_to_tweet_id'"):
        parse_event({**UPSERT, "in_reply_to_author_id": "ann"})


# --- reposts -------------------------------------------------------------------------------------

def test_a_repost_carries_its_time_and_profile_version_and_an_unrepost_neither() -> None:
    repost = parse_event(REPOST)
    assert repost == RepostChange("cat", "t1", "ann", 3, "repost", 20, 4) and repost.reposting
    assert event_to_json(repost) == REPOST
    unrepost_envelope = {k: v for k, v in REPOST.items() if k not in ("created_at", "profile_version")}
    unrepost = parse_event({**unrepost_envelope, "op": "unrepost", "version": 5})
    assert unrepost == RepostChange("cat", "t1", "ann", 5, "unrepost") and not unrepost.reposting
    # Present on an unrepost: accepted and dropped, whatever the value (like an unknown field).
    assert parse_event({**REPOST, "op": "unrepost", "created_at": "x", "profile_version": None}) == RepostChange(
        "cat", "t1", "ann", 3, "unrepost")
    assert event_to_json(RepostChange("cat", "t1", "ann", 5, "unrepost", 20, 4)) == {
        **unrepost_envelope, "op": "unrepost", "version": 5}


@pytest.mark.parametrize(("change", "code"), [
    ({"created_at": None}, "wrong_type"), ({"profile_version": True}, "wrong_type"),
    ({"created_at": 1.0}, "wrong_type"), ({"profile_version": -2}, "negative_value"),
    ({"author_id": ""}, "empty_id"), ({"reposter_id": 3}, "wrong_type"), ({"op": "retweet"}, "unknown_op"),
])
def test_a_malformed_repost_is_rejected_with_a_code(change: dict[str, Any], code: str) -> None:
    assert _code({**REPOST, **change}) == code


@pytest.mark.parametrize("name", ["reposter_id", "tweet_id", "author_id", "version", "created_at", "profile_version",
                                  "op"])
def test_a_repost_needs_every_field(name: str) -> None:
    assert _code({k: v for k, v in REPOST.items() if k != name}) == "missing_field"
    if name not in ("created_at", "profile_version", "op"):
        unrepost = {k: v for k, v in REPOST.items() if k not in ("created_at", "profile_version", name)}
        assert _code({**unrepost, "op": "unrepost"}) == "missing_field"


def test_a_repost_goes_to_its_join_keys_each_once_and_an_own_repost_is_valid() -> None:
    """The registry routes a repost to the original author's key (the engine's author step holds the
    repost edges of the author's tweets) and, as declared, the reposter's (reposter first)."""
    kind = EDGE_KINDS["repost"]
    assert "author_id" in kind.join_keys and set(kind.join_keys) <= {"reposter_id", "author_id"}
    repost = parse_event(REPOST)
    assert join_keys(repost) == tuple(REPOST[name] for name in kind.join_keys)
    if len(kind.join_keys) > 1:
        with pytest.raises(ValueError, match="2 keys"):
            join_key(repost)
    own = parse_event({**REPOST, "reposter_id": "ann"})  # no self-edge rule: reposting one's own tweet is fine
    assert join_keys(own) == ("ann",)


def test_join_keys_name_each_key_once() -> None:
    """A kind of two join keys whose two fields hold one user goes to that key once (in the stream too:
    routed_changes takes the distinct keys)."""
    from feed_service.core.events import BlockChange

    assert join_keys(BlockChange("ann", "bob", 1, "block")) == ("ann", "bob")
    assert join_keys(BlockChange("ann", "ann", 1, "block")) == ("ann",)  # never valid, but never doubled


def test_repost_keys_name_the_edge_escaped_and_go_to_the_reposts_topic() -> None:
    repost = RepostChange("cat", "t1", "ann", 3, "repost", 20, 4)
    assert record_key(repost) == record_key(RepostChange("cat", "t1", "ann", 4, "unrepost")) == "repost|cat|t1"
    assert record_key(RepostChange("a|b", "c", "x", 1, "unrepost")) == "repost|a%7Cb|c"
    assert record_key(RepostChange("a", "b|c", "x", 1, "unrepost")) == "repost|a|b%7Cc"
    assert record_key(RepostChange("50%", "t|", "x", 1, "unrepost")) == "repost|50%25|t%7C"
    assert topic_role(repost) == "reposts"


# --- the producer and feedctl publish ---------------------------------------------------------------

def test_producer_publishes_replies_and_reposts_with_their_keys_and_topics() -> None:
    producer, (client,) = make_producer()
    producer.publish_profile("ann", "Ann")
    cat_profile = producer.publish_profile("cat", "Cat")
    tweet = producer.publish_tweet("ann", "hello", tweet_id="t1")
    reply = producer.publish_tweet("ann", "and more", tweet_id="t2", in_reply_to=tweet)
    edit = producer.publish_edit(reply, "and more, edited")
    repost = producer.repost("cat", tweet)
    explicit = producer.repost("cat", ("t9", "bob"), created_at=5, profile_version=1, version=10**15)
    unrepost = producer.unrepost("cat", tweet)
    producer.close()
    assert (reply.in_reply_to_tweet_id, reply.in_reply_to_author_id) == ("t1", "ann")
    assert (edit.in_reply_to_tweet_id, edit.in_reply_to_author_id) == ("t1", "ann")  # an edit keeps the parent
    assert repost == RepostChange("cat", "t1", "ann", repost.version, "repost", repost.created_at,
                                  cat_profile.version)
    assert repost.created_at is not None and repost.version < unrepost.version
    assert explicit == RepostChange("cat", "t9", "bob", 10**15, "repost", 5, 1)
    assert unrepost == RepostChange("cat", "t1", "ann", unrepost.version, "unrepost")
    sent = [(topic, key, json.loads(value)) for topic, value, key in client.sent]
    assert [(t, k) for t, k, _ in sent[-3:]] == [("feed.reposts.v1", "repost|cat|t1"),
                                                ("feed.reposts.v1", "repost|cat|t9"),
                                                ("feed.reposts.v1", "repost|cat|t1")]
    assert "created_at" not in sent[-1][2] and sent[3][2]["in_reply_to_author_id"] == "ann"


def test_producer_rejects_an_incomplete_reply_and_a_repost_without_a_profile() -> None:
    producer, _ = make_producer()
    with pytest.raises(EventRejected) as info:
        producer.publish_tweet("ann", "x", profile_version=1, in_reply_to_tweet_id="t1")
    assert info.value.code == "incomplete_reply"
    with pytest.raises(EventRejected, match="profile_version of 'dan' unknown"):
        producer.repost("dan", ("t1", "ann"))
    with pytest.raises(TypeError, match="no field 'created_at'"):
        producer.publish_edge("repost", "unrepost", "dan", "t1", author_id="ann", created_at=5)
    with pytest.raises(EventRejected) as info:
        producer.publish_edge("repost", "repost", "dan", "t1", profile_version=1)  # no author_id
    assert info.value.code == "missing_field"
    assert producer.stats.produced == 0


class _RecordingProducer:
    """What ``feedctl publish`` calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs))


def _publish_args(*argv: str) -> Any:
    import argparse

    from feed_service.cli.commands import publish

    parser = argparse.ArgumentParser()
    publish.register(parser.add_subparsers())
    return parser.parse_args(["publish", *argv])


def test_feedctl_publish_has_repost_and_unrepost_with_flags_named_after_the_fields() -> None:
    from feed_service.cli.commands.publish import _publish_one

    producer = _RecordingProducer()
    _publish_one(producer, _publish_args("repost", "--reposter", "cat", "--tweet", "t1", "--author", "ann",
                                         "--profile-version", "4"))
    _publish_one(producer, _publish_args("repost", "--reposter", "cat", "--tweet", "t1", "--author", "ann",
                                         "--profile-version", "4", "--created-at", "20", "--version", "9"))
    _publish_one(producer, _publish_args("unrepost", "--reposter", "cat", "--tweet", "t1", "--author", "ann"))
    _publish_one(producer, _publish_args("tweet", "--author", "bob", "--text", "yes", "--profile-version", "1",
                                         "--in-reply-to-tweet-id", "t1", "--in-reply-to-author-id", "ann"))
    (_, a1, k1), (_, a2, k2), (_, a3, k3), (name4, _, k4) = producer.calls
    assert a1 == a2 == ("repost", "repost", "cat", "t1") and a3 == ("repost", "unrepost", "cat", "t1")
    assert k1 == {"version": None, "author_id": "ann", "created_at": None, "profile_version": 4}
    assert k2 == {"version": 9, "author_id": "ann", "created_at": 20, "profile_version": 4}
    assert k3 == {"version": None, "author_id": "ann"}
    assert name4 == "publish_tweet"
    assert (k4["in_reply_to_tweet_id"], k4["in_reply_to_author_id"]) == ("t1", "ann")
    with pytest.raises(SystemExit):  # the profile version is required, as for a tweet
        _publish_args("repost", "--reposter", "cat", "--tweet", "t1", "--author", "ann")


# --- the stream's rows -----------------------------------------------------------------------------

def _row(**values: Any) -> Any:
    return SimpleNamespace(**{name: values.get(name) for name, _ in EVENT_COLUMNS})


def test_stream_rows_become_reposts_and_replies() -> None:
    """What parse_changes hands the engine (an unrepost's created_at is null there) and what pandas
    frames give (NaN for null)."""
    nan = float("nan")
    rows = [
        _row(type="repost", op="repost", reposter_id="cat", tweet_id="t1", author_id="ann", version=3, created_at=20,
             profile_version=4),
        _row(type="repost", op="unrepost", reposter_id="cat", tweet_id="t1", author_id="ann", version=5,
             created_at=nan, profile_version=nan),
        _row(type="tweet", op="upsert", tweet_id="t2", author_id="bob", version=2, created_at=10, text="yes",
             profile_version=1, in_reply_to_tweet_id="t1", in_reply_to_author_id="ann"),
        _row(type="tweet", op="upsert", tweet_id="t3", author_id="bob", version=2, created_at=10, text="no",
             profile_version=1, in_reply_to_tweet_id=nan, in_reply_to_author_id=None),
    ]
    assert events_from_rows(rows) == [
        RepostChange("cat", "t1", "ann", 3, "repost", 20, 4), RepostChange("cat", "t1", "ann", 5, "unrepost"),
        TweetUpsert("t2", "bob", 2, 10, "yes", 1, "t1", "ann"), TweetUpsert("t3", "bob", 2, 10, "no", 1)]


# --- the workload ----------------------------------------------------------------------------------

def _stream(**kwargs: Any) -> list[dict[str, Any]]:
    return list(generate(users=200, events=6000, seed=5, setup=False, **kwargs))


def test_repost_and_reply_shares_are_seeded_and_default_to_none() -> None:
    plain = _stream()
    assert not any(e["type"] == "repost" or "in_reply_to_tweet_id" in e for e in plain)
    assert plain == _stream(repost_share=0, reply_share=0)
    assert _stream(repost_share=0.1, reply_share=0.3) == _stream(repost_share=0.1, reply_share=0.3)
    assert _stream(repost_share=0.1, reply_share=0.3) != list(generate(users=200, events=6000, seed=6, setup=False,
                                                                       repost_share=0.1, reply_share=0.3))
    for name in ("repost_share", "reply_share"):
        for bad in (-0.1, 1.5, float("nan")):
            with pytest.raises(ValueError, match=name):
                WorkloadModel(users=10, **{name: bad})
    with pytest.raises(ValueError, match="own_repost"):
        WorkloadModel(users=10, repost_mix=RepostMix(own_repost=2))


def test_replies_answer_tweets_published_before_them() -> None:
    events = list(generate(users=200, events=6000, seed=5, reply_share=0.3))
    tweets: dict[str, str] = {}  # tweet_id -> author, of the tweets published so far
    replies = threads = 0
    new_tweets = 0
    for e in events:
        parse_event(e)  # valid, the both-or-neither rule included
        if e["type"] != "tweet" or e["op"] != "upsert":
            continue
        fresh = e["tweet_id"] not in tweets
        new_tweets += fresh
        if "in_reply_to_tweet_id" in e:
            parent = e["in_reply_to_tweet_id"]
            assert tweets.get(parent) == e["in_reply_to_author_id"], "a reply answers an earlier tweet, its author named"
            assert parent != e["tweet_id"]
            replies += fresh
            threads += fresh and e["in_reply_to_author_id"] == e["author_id"]
        tweets.setdefault(e["tweet_id"], e["author_id"])
    assert 0.25 < replies / new_tweets < 0.35
    assert 0.1 < threads / replies < 0.3  # RepostMix.self_reply: a thread now and then


def test_a_reply_s_edits_keep_its_parent() -> None:
    parents: dict[str, tuple[str, str] | None] = {}
    for e in generate(users=100, events=6000, seed=8, reply_share=0.5):
        if e["type"] == "tweet" and e["op"] == "upsert":
            parent = (e["in_reply_to_tweet_id"], e["in_reply_to_author_id"]) if "in_reply_to_tweet_id" in e else None
            assert parents.setdefault(e["tweet_id"], parent) == parent


def test_reposts_are_of_earlier_tweets_with_versions_rising_per_edge() -> None:
    model = WorkloadModel(users=300, seed=9, repost_share=0.2)
    events = list(model.setup()) + [model.step() for _ in range(8000)]
    tweets: dict[str, str] = {}
    in_force: dict[tuple[str, str], int] = {}
    last_version: dict[tuple[str, str], int] = {}
    ops: Counter = Counter()
    own = 0
    for e in events:
        event = parse_event(e)
        if e["type"] == "tweet":
            tweets.setdefault(e["tweet_id"], e["author_id"])
            continue
        if e["type"] != "repost":
            continue
        assert isinstance(event, RepostChange)
        edge = (event.reposter_id, event.tweet_id)
        assert tweets.get(event.tweet_id) == event.author_id, "a repost names an earlier tweet and its author"
        assert event.version > last_version.get(edge, -1)
        last_version[edge] = event.version
        ops[event.op] += 1
        if event.reposting:
            assert edge not in in_force, "no repost of an edge already reposted"
            assert event.created_at is not None and event.profile_version is not None
            in_force[edge] = event.version
            own += event.reposter_id == event.author_id
        else:
            del in_force[edge]  # an unrepost ends a repost in force
    assert 0.17 < sum(ops.values()) / 8000 < 0.23
    assert 0.05 < ops["unrepost"] / sum(ops.values()) < 0.15
    assert 0 < own / ops["repost"] < 0.12  # RepostMix.own_repost: mostly other users' tweets
    assert sorted(model.active_reposts()) == sorted(in_force)


def test_reposts_and_replies_interleave_into_the_same_other_events() -> None:
    def without_time(e: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in e.items() if k not in ("version", "created_at", "profile_version", "author_id")
                and not k.startswith("in_reply_to")}

    mixed = _stream(repost_share=0.1, reply_share=0.2)
    plain = _stream()
    others = [without_time(e) for e in mixed if e["type"] != "repost"]
    assert others == [without_time(e) for e in plain[:len(others)]]


def test_workload_cli_repost_and_reply_shares(tmp_path) -> None:
    from feed_service.cli.main import main as feedctl

    out = tmp_path / "events.jsonl"
    assert feedctl(["workload", "--users", "40", "--count", "400", "--seed", "3", "--no-progress",
                    "--repost-share", "0.2", "--reply-share", "0.3", "--out", str(out)]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert got == list(generate(users=40, events=400, seed=3, repost_share=0.2, reply_share=0.3))
    assert any(e["type"] == "repost" for e in got) and any("in_reply_to_tweet_id" in e for e in got)
