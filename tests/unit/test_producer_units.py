"""The producer without a broker: validation, keys, versions, delivery failures, replay and workload sinks."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from feed_service import resources
from feed_service.core.events import (
    BlockChange,
    FollowChange,
    MuteChange,
    ProfileVersion,
    TweetDelete,
    TweetUpsert,
    parse_event,
)
from feed_service.kafka.keys import ROLE_OF_TYPE, record_key, topic_role
from feed_service.kafka.producer import DeliveryFailed, EventProducer, EventRejected, ProducerClosed
from feed_service.kafka.replay import publish_lines
from feed_service.kafka.versions import VersionClock
from feed_service.settings import Settings
from feed_service.workload import sinks
from tests.support.fake_producer import FakeClient, make_producer


def test_version_clock_increases_and_survives_restart() -> None:
    clock = VersionClock(now_ms=lambda: 7)
    versions = [clock.next() for _ in range(5)]
    assert versions == [7000, 7001, 7002, 7003, 7004]
    restarted = VersionClock(now_ms=lambda: 8)  # a later run, wall clock moved on by 1 ms
    assert restarted.next() > versions[-1]
    clock.observe(10**12)
    assert clock.next() == 10**12 + 1
    clock.observe(5)  # lower than what was issued: no effect
    assert clock.next() == 10**12 + 2


def test_record_keys_follow_topics_json() -> None:
    declared = {role: spec["key"] for role, spec in resources.read_json(resources.TOPICS)["topics"].items()}
    assert declared["tweets"] == "tweet_id"
    assert declared["follows"] == "follower_id|followee_id"
    assert declared["profiles"] == "user_id|version"
    assert record_key(TweetUpsert("t1", "ann", 3, 0, "x", 1)) == "t1"
    assert record_key(TweetDelete("t1", "ann", 4)) == "t1"
    assert record_key(FollowChange("bob", "ann", 2, "follow")) == "bob|ann"
    assert record_key(ProfileVersion("ann", 9, "Ann")) == "ann|9"


def test_record_keys_of_ids_with_separator_stay_distinct() -> None:
    a = record_key(FollowChange("a|b", "c", 1, "follow"))
    b = record_key(FollowChange("a", "b|c", 1, "follow"))
    assert a != b and a == "a%7Cb|c" and record_key(FollowChange("50%", "x", 1, "follow")) == "50%25|x"


def test_block_and_mute_keys_name_the_edge_and_its_kind() -> None:
    """Blocks and mutes share a topic: each edge has its own key, and a block and a mute of the same
    pair are two entities (compaction keeps the latest change of each); ops share the edge's key."""
    declared = resources.read_json(resources.TOPICS)["topics"]["blocks_mutes"]
    assert declared["name"] == "feed.blocks-mutes.v1" and declared["key"].startswith("type|")
    block, unblock = BlockChange("ann", "bob", 1, "block"), BlockChange("ann", "bob", 2, "unblock")
    mute, unmute = MuteChange("ann", "bob", 3, "mute"), MuteChange("ann", "bob", 4, "unmute")
    assert record_key(block) == record_key(unblock) == "block|ann|bob"
    assert record_key(mute) == record_key(unmute) == "mute|ann|bob"
    assert record_key(BlockChange("bob", "ann", 1, "block")) == "block|bob|ann"  # the other direction
    assert record_key(BlockChange("a|b", "c", 1, "block")) == "block|a%7Cb|c" != record_key(
        BlockChange("a", "b|c", 1, "block")) == "block|a|b%7Cc"
    assert record_key(MuteChange("50%", "x", 1, "mute")) == "mute|50%25|x"
    assert {topic_role(e) for e in (block, unblock, mute, unmute)} == {"blocks_mutes"}
    assert ROLE_OF_TYPE["block"] == ROLE_OF_TYPE["mute"] == "blocks_mutes"


def test_block_and_mute_helpers_publish_versioned_edges() -> None:
    producer, (client,) = make_producer()
    block = producer.block("ann", "bob")
    mute = producer.mute("ann", "cat")
    unmute = producer.unmute("ann", "cat")
    unblock = producer.unblock("ann", "bob")
    explicit = producer.block("bob", "ann", version=7)
    producer.close()
    assert block.version < mute.version < unmute.version < unblock.version  # the clock, like follow edges
    assert explicit.version == 7  # an explicit version is passed through
    assert [t for t, _, _ in client.sent] == ["feed.blocks-mutes.v1"] * 5
    assert [k for _, _, k in client.sent] == ["block|ann|bob", "mute|ann|cat", "mute|ann|cat", "block|ann|bob",
                                              "block|bob|ann"]
    assert [parse_event(value) for _, value, _ in client.sent] == [block, mute, unmute, unblock, explicit]
    assert [(e.op, e.hiding) for e in (block, mute, unmute, unblock)] == [
        ("block", True), ("mute", True), ("unmute", False), ("unblock", False)]


@pytest.mark.parametrize("publish, code", [
    (lambda p: p.block("ann", "ann"), "self_block"),
    (lambda p: p.unmute("ann", "ann"), "self_mute"),
    (lambda p: p.mute("ann", ""), "empty_id"),
])
def test_invalid_block_and_mute_edges_are_rejected(publish: Any, code: str) -> None:
    producer, (client,) = make_producer()
    with pytest.raises(EventRejected) as info:
        publish(producer)
    producer.close()
    assert info.value.code == code and client.sent == [] and producer.stats.rejected == 1


def test_typed_helpers_route_key_and_encode_envelopes() -> None:
    producer, (client,) = make_producer(new_id=lambda: "t-fixed")
    profile = producer.publish_profile("ann", "Ann", bio="hi")
    tweet = producer.publish_tweet("ann", "hello")
    edit = producer.publish_edit(tweet, "hello, world")
    delete = producer.publish_delete(tweet.tweet_id, "ann")
    follow = producer.follow("bob", "ann")
    unfollow = producer.unfollow("bob", "ann")
    producer.close()
    assert tweet.profile_version == profile.version and tweet.tweet_id == "t-fixed"
    assert edit.tweet_id == tweet.tweet_id and edit.created_at == tweet.created_at
    assert profile.version < tweet.version < edit.version < delete.version
    assert follow.version < unfollow.version
    topics = [t for t, _, _ in client.sent]
    assert topics == ["feed.profiles.v1"] + ["feed.tweets.v1"] * 3 + ["feed.follows.v1"] * 2
    keys = [k for _, _, k in client.sent]
    assert keys == [f"ann|{profile.version}", "t-fixed", "t-fixed", "t-fixed", "bob|ann", "bob|ann"]
    parsed = [parse_event(value) for _, value, _ in client.sent]
    assert parsed == [profile, tweet, edit, delete, follow, unfollow]
    assert client.config["enable.idempotence"] is True and client.config["acks"] == "all"


@pytest.mark.parametrize("envelope, code", [
    ({"type": "follow", "op": "follow", "follower_id": "a", "followee_id": "a", "version": 1}, "self_follow"),
    ({"type": "follow", "op": "follow", "follower_id": "a", "followee_id": "b", "version": -1}, "negative_value"),
    ({"type": "tweet", "op": "upsert", "tweet_id": "t", "author_id": "a", "version": 1}, "missing_field"),
    ({"type": "profile", "user_id": "", "version": 1, "display_name": "x"}, "empty_id"),
    ({"type": "poll", "id": "x"}, "unknown_type"),
    ({"type": "profile", "user_id": "u", "version": 1, "display_name": "x", "bio": 3}, "wrong_type"),
])
def test_invalid_events_raise_and_send_nothing(envelope: dict[str, Any], code: str) -> None:
    producer, (client,) = make_producer()
    with pytest.raises(EventRejected) as info:
        producer.publish_event(envelope)
    assert info.value.code == code and info.value.reason
    producer.close()
    assert client.sent == [] and producer.stats.rejected == 1 and producer.stats.produced == 0


def test_tweet_without_known_profile_version_is_rejected() -> None:
    producer, (client,) = make_producer()
    with pytest.raises(EventRejected, match="profile_version"):
        producer.publish_tweet("ann", "hi")
    producer.close()
    assert client.sent == []


def test_integral_float_is_rejected_although_the_schema_would_accept_it() -> None:
    """The producer applies parse_event's rules, stricter than the schema: 1.0 is not an integer."""
    producer, (client,) = make_producer()
    with pytest.raises(EventRejected) as info:
        producer.publish_event({"type": "follow", "op": "follow", "follower_id": "a", "followee_id": "b",
                                "version": 1.0})
    assert info.value.code == "wrong_type"
    producer.close()
    assert client.sent == []


def test_failed_delivery_raises_once_on_flush() -> None:
    producer, (client,) = make_producer()
    client.fail_keys.add("bob|ann")
    producer.follow("carl", "ann")
    producer.follow("bob", "ann")
    with pytest.raises(DeliveryFailed) as info:
        producer.flush()
    assert info.value.count == 1 and info.value.errors[0].key == "bob|ann"
    assert "MSG_SIZE_TOO_LARGE" in str(info.value)
    producer.follow("dan", "ann")
    producer.close()  # the failure was raised already; nothing new
    assert producer.stats.failed == 1 and producer.stats.delivered == 2


def test_context_manager_flushes_and_closed_producer_refuses() -> None:
    producer, (client,) = make_producer()
    with producer:
        producer.follow("bob", "ann")
    assert len(client.sent) == 1 and producer.closed
    with pytest.raises(ProducerClosed):
        producer.follow("bob", "ann")


def test_full_local_queue_is_retried() -> None:
    producer, (client,) = make_producer()
    client.full_once = True
    producer.follow("bob", "ann")
    producer.close()
    assert len(client.sent) == 1


def test_publish_lines_counts_rejects_and_sends_lines_verbatim() -> None:
    producer, (client,) = make_producer()
    good = b'{"type":"follow","op":"follow","follower_id":"b","followee_id":"a","version":1,"via":"kcat"}'
    lines = [good + b"\n", b"\n", b"{oops\n", b'{"type":"follow"}\n', b"[1]\n", good + b"\r\n"]
    rejects: list[tuple[int, str]] = []
    stats = publish_lines(producer, lines, on_reject=lambda n, code, reason: rejects.append((n, code)))
    assert (stats.lines, stats.sent, stats.rejected) == (5, 2, 3)
    assert rejects == [(3, "bad_json"), (4, "missing_field"), (5, "not_object")]
    assert [value for _, value, _ in client.sent] == [good, good]


def test_publish_cli_sends_block_and_mute_changes(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    from feed_service.cli.main import main as feedctl
    from feed_service.kafka import producer as producer_module

    made: list[FakeClient] = []

    def producer_for(settings: Settings) -> EventProducer:
        producer, (client,) = make_producer()
        made.append(client)
        return producer

    monkeypatch.setattr(producer_module, "EventProducer", producer_for)
    assert feedctl(["publish", "block", "--blocker", "ann", "--blocked", "bob"]) == 0
    assert feedctl(["publish", "unblock", "--blocker", "ann", "--blocked", "bob", "--version", "9"]) == 0
    assert feedctl(["publish", "mute", "--muter", "cat", "--muted", "ann"]) == 0
    assert feedctl(["publish", "unmute", "--muter", "cat", "--muted", "ann"]) == 0
    assert feedctl(["publish", "mute", "--muter", "cat", "--muted", "cat"]) == 2
    out = [parse_event(line) for line in capsys.readouterr().out.splitlines()]
    assert [(type(e).__name__, e.op) for e in out] == [
        ("BlockChange", "block"), ("BlockChange", "unblock"), ("MuteChange", "mute"), ("MuteChange", "unmute")]
    assert out[1] == BlockChange("ann", "bob", 9, "unblock")
    assert [client.sent[0][2] for client in made[:4]] == ["block|ann|bob"] * 2 + ["mute|cat|ann"] * 2
    assert made[4].sent == []


# --- the Kafka workload sink ------------------------------------------------------------------------

FOLLOW = {"type": "follow", "op": "follow", "follower_id": "b", "followee_id": "a", "version": 1}
SELF_FOLLOW = {**FOLLOW, "follower_id": "a", "version": 2}


def _own_producers(monkeypatch: pytest.MonkeyPatch, fail_keys: set[str]) -> list[EventProducer]:
    """Make ``publish_workload`` build producers on fake clients that fail ``fail_keys`` on delivery."""
    made: list[EventProducer] = []

    def producer_for(settings: Settings) -> EventProducer:
        producer, (client,) = make_producer()
        client.fail_keys.update(fail_keys)
        made.append(producer)
        return producer

    monkeypatch.setattr(sinks, "EventProducer", producer_for)
    return made


def test_publish_workload_raises_the_first_error_not_the_close_failure(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Closing after a failure must not replace that failure with its own (here: a failed delivery)."""
    made = _own_producers(monkeypatch, fail_keys={"b|a"})
    with caplog.at_level(logging.ERROR), pytest.raises(EventRejected) as info:
        sinks.publish_workload(Settings(), [FOLLOW, SELF_FOLLOW])
    assert info.value.code == "self_follow"
    assert any("not delivered" in note for note in getattr(info.value, "__notes__", []))
    assert "not delivered" in caplog.text
    assert made[0].closed


def test_publish_workload_closes_its_producer_and_reports_failed_deliveries(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _own_producers(monkeypatch, fail_keys={"b|a"})
    with pytest.raises(DeliveryFailed):
        sinks.publish_workload(Settings(), [FOLLOW])
    assert made[0].closed
    made = _own_producers(monkeypatch, fail_keys=set())
    stats = sinks.publish_workload(Settings(), [FOLLOW, {**FOLLOW, "follower_id": "c"}])
    assert stats.sent == 2 and made[0].closed and made[0].stats.delivered == 2


def test_publish_workload_flushes_but_does_not_close_a_given_producer() -> None:
    producer, (client,) = make_producer()
    stats = sinks.publish_workload(None, [FOLLOW], producer=producer)
    assert stats.sent == 1 and len(client.sent) == 1 and not producer.closed
    with pytest.raises(EventRejected):
        sinks.publish_workload(None, [SELF_FOLLOW], producer=producer)
    assert not producer.closed
    producer.close()
