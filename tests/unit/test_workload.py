"""The workload generator without a broker: pure, reproducible, valid, versioned, power-law shaped.

The Kafka sink is tested with the producer's fake client in ``test_producer_units.py``.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections import Counter
from itertools import islice

import pytest

from feed_service.core.events import FollowChange, ProfileVersion, TweetDelete, TweetUpsert, parse_event
from feed_service.kafka.envelope_schema import load_envelope_check
from feed_service.workload.generator import Mix, generate, in_degrees
from feed_service.workload.sinks import paced, write_jsonl


def test_generator_does_no_io() -> None:
    """Importing the generator pulls in no producer, Kafka client or sink."""
    code = ("import json, sys\nimport feed_service.workload.generator\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = set(json.loads(proc.stdout))
    assert not loaded & {"confluent_kafka", "feed_service.kafka.producer", "feed_service.workload.sinks"}


def test_same_seed_same_events_and_other_seed_other_events() -> None:
    a = list(generate(users=300, events=3000, seed=11))
    assert a == list(generate(users=300, events=3000, seed=11))
    assert a != list(generate(users=300, events=3000, seed=12))


def test_endless_stream_is_a_prefix_of_itself() -> None:
    finite = list(generate(users=50, events=500, seed=4))
    assert list(islice(generate(users=50, events=None, seed=4), len(finite))) == finite


def test_events_are_valid_and_versions_increase_per_entity() -> None:
    check = load_envelope_check()
    events = list(generate(users=400, events=20_000, seed=5))
    last: dict[tuple, int] = {}
    profiles: set[tuple[str, int]] = set()
    deleted: set[str] = set()
    tweet_versions: dict[str, int] = {}
    for envelope in events:
        assert check.is_valid(envelope), envelope
        event = parse_event(envelope)
        if isinstance(event, (TweetUpsert, TweetDelete)):
            entity: tuple = ("tweet", event.tweet_id)
            assert event.tweet_id not in deleted, "no change after a delete"
        elif isinstance(event, FollowChange):
            entity = ("edge", event.follower_id, event.followee_id)
        else:
            entity = ("profile", event.user_id)
        assert event.version > last.get(entity, -1), envelope
        last[entity] = event.version
        if isinstance(event, ProfileVersion):
            profiles.add((event.user_id, event.version))
        if isinstance(event, TweetUpsert):
            assert (event.author_id, event.profile_version) in profiles, "tweet names a published profile"
            tweet_versions.setdefault(event.tweet_id, event.version)
        if isinstance(event, TweetDelete):
            assert event.version > tweet_versions[event.tweet_id]
            deleted.add(event.tweet_id)


def test_setup_comes_first_and_stream_time_advances() -> None:
    events = list(generate(users=100, events=1000, seed=2, events_per_second=100))
    types = [e["type"] for e in events]
    assert types[:100] == ["profile"] * 100
    assert set(types[100:-1000]) == {"follow"}
    stream = events[-1000:]
    created = [e["created_at"] for e in stream if e["type"] == "tweet" and e["op"] == "upsert"]
    assert created and created[-1] - created[0] > 5_000  # ~1000 events at 100/s: ~10 s simulated


def test_mix_ratios_are_respected() -> None:
    events = list(generate(users=500, events=20_000, seed=3, setup=True))
    stream = events[-20_000:]
    kinds = Counter(e.get("op", "profile") for e in stream)
    ratio = {k: v / len(stream) for k, v in kinds.items()}
    assert 0.60 < ratio["upsert"] < 0.80  # tweets + edits
    assert 0.02 < ratio["delete"] < 0.06
    assert 0.08 < ratio["follow"] < 0.16
    assert 0.03 < ratio["unfollow"] < 0.09
    assert 0.02 < ratio["profile"] < 0.06
    only_tweets = list(generate(users=20, events=200, seed=3, setup=False, mix=Mix(1, 0, 0, 0, 0, 0)))
    assert {(e["type"], e["op"]) for e in only_tweets} == {("tweet", "upsert")}


def test_follower_distribution_is_heavy_tailed() -> None:
    users = 5000
    graph = list(generate(users=users, events=0, seed=1))
    degrees = in_degrees(graph)
    counts = sorted(degrees.values(), reverse=True) + [0] * (users - len(degrees))
    edges = sum(counts)
    assert 15 < edges / users < 25  # mean following ~20
    median = statistics.median(counts)
    assert counts[0] >= 1000 and counts[0] >= 50 * max(median, 1)
    assert sum(counts[: users // 100]) / edges > 0.15  # the top 1% of authors hold >15% of follows (uniform: 1%)
    # rank-frequency on log-log axes between ranks 10 and 500: a straight line of slope ~ -0.8
    ranks = range(10, 500)
    xs = [math.log(r + 1) for r in ranks]
    ys = [math.log(counts[r]) for r in ranks]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    assert -1.1 < slope < -0.5, slope


def test_tiny_and_invalid_sizes() -> None:
    single = list(generate(users=1, events=20, seed=0))
    assert all(e["type"] != "follow" for e in single)
    with pytest.raises(ValueError):
        list(generate(users=0, events=1))


def test_paced_sleeps_to_the_rate_and_stops_at_the_duration() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    out = list(paced(range(100), rate=10, duration=2.0, clock=lambda: now[0], sleep=sleep))
    assert out == list(range(20))
    assert now[0] == pytest.approx(1.9)


def test_write_jsonl_round_trips(tmp_path) -> None:
    events = list(generate(users=30, events=100, seed=9))
    path = tmp_path / "events.jsonl"
    assert write_jsonl(iter(events), path) == len(events)
    assert [parse_event(line) for line in path.read_text().splitlines()] == [parse_event(e) for e in events]


def test_paced_never_pulls_an_event_it_does_not_yield() -> None:
    pulled: list[int] = []

    def source():
        for n in range(100):
            pulled.append(n)
            yield n

    now = [0.0]
    out = list(paced(source(), rate=10, duration=1.0, clock=lambda: now[0],
                     sleep=lambda s: now.__setitem__(0, now[0] + s)))
    assert out == list(range(10)) and pulled == out
