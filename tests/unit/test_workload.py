"""The workload generator without a broker: pure, reproducible, valid, versioned, power-law shaped.

The Kafka sink is tested with the producer's fake client in ``test_producer_units.py``.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import subprocess
import sys
from collections import Counter
from itertools import islice

import pytest

from feed_service.core.events import (
    BlockChange,
    FollowChange,
    MuteChange,
    ProfileVersion,
    TweetDelete,
    TweetUpsert,
    parse_event,
)
from feed_service.kafka.envelope_schema import load_envelope_check
from feed_service.workload.generator import DEFAULT_HIDE_SHARE, HideMix, Mix, WorkloadModel, generate, in_degrees
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
        elif isinstance(event, BlockChange):
            entity = ("block", event.blocker_id, event.blocked_id)
        elif isinstance(event, MuteChange):
            entity = ("mute", event.muter_id, event.muted_id)
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
    # ~1000 events at 100/s: ~10 s simulated (min and max: an edit keeps its tweet's created_at)
    assert created and max(created) - min(created) > 5_000


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
    only_tweets = list(generate(users=20, events=200, seed=3, setup=False, mix=Mix(1, 0, 0, 0, 0, 0), hide_share=0))
    assert {(e["type"], e["op"]) for e in only_tweets} == {("tweet", "upsert")}


def _digest(events) -> tuple[int, str]:
    h = hashlib.sha256()
    count = 0
    for event in events:
        h.update(json.dumps(event, sort_keys=True, separators=(",", ":")).encode() + b"\n")
        count += 1
    return count, h.hexdigest()


@pytest.mark.parametrize("kwargs, expected", [
    # digests of the generator's output before blocks and mutes existed: benchmarks stay comparable
    (dict(users=300, events=5000, seed=11),
     (11935, "8b797dbfac18fbdf7d211de0da5873769f95f6572ee4f4754f31be8581a714a9")),
    (dict(users=50, events=2000, seed=4, setup=False, events_per_second=50, prefix="p-"),
     (2000, "90af585511efc97f8d005160bf134d373099f2a93081cb4641d326b290f07d4f")),
])
def test_no_hide_share_is_the_workload_of_before_event_for_event(kwargs: dict, expected: tuple) -> None:
    assert _digest(generate(**kwargs, hide_share=0)) == expected


def _without_time(event: dict) -> dict:
    return {k: v for k, v in event.items() if k not in ("version", "created_at", "profile_version")}


def test_hide_changes_are_interleaved_into_the_same_other_events() -> None:
    """A 10 % run holds the 0 % run's other events, in order: only their time and versions move."""
    hiding = list(generate(users=300, events=5000, seed=11, hide_share=0.1))
    plain = list(generate(users=300, events=5000, seed=11, hide_share=0))
    others = [_without_time(e) for e in hiding if e["type"] not in ("block", "mute")]
    assert len(others) < len(plain) and others == [_without_time(e) for e in plain[:len(others)]]
    assert 0.08 < (len(hiding) - len(others)) / 5000 < 0.12


def test_block_and_mute_changes_are_realistic() -> None:
    model = WorkloadModel(users=1000, seed=6, hide_share=0.1)
    following = {(e["follower_id"], e["followee_id"]) for e in model.setup() if e["type"] == "follow"}
    active: dict[str, set[tuple[str, str]]] = {"block": set(), "mute": set()}
    kinds: Counter = Counter()
    new_hides = aimed_at_followees = 0
    for _ in range(20_000):
        e = model.step()
        if e["type"] == "follow":
            (following.add if e["op"] == "follow" else following.discard)((e["follower_id"], e["followee_id"]))
        if e["type"] not in ("block", "mute"):
            continue
        event = parse_event(e)  # valid: never a self-edge
        pair = (e["blocker_id"], e["blocked_id"]) if e["type"] == "block" else (e["muter_id"], e["muted_id"])
        kinds[e["op"]] += 1
        if event.hiding:
            assert pair not in active[e["type"]], "no block or mute of an edge already hidden"
            active[e["type"]].add(pair)
            new_hides += 1
            aimed_at_followees += pair in following
        else:
            active[e["type"]].remove(pair)  # an undo ends a block or mute in force
    assert 0.08 < sum(kinds.values()) / 20_000 < 0.12
    assert kinds["mute"] > 1.5 * kinds["block"] and kinds["unmute"] > kinds["unblock"] > 0
    assert 0.2 < (kinds["unmute"] + kinds["unblock"]) / sum(kinds.values()) < 0.4
    assert 0.6 < aimed_at_followees / new_hides < 0.85  # mostly followees, some not (HideMix.followed)
    assert sorted(model.active_blocks()) == sorted(active["block"])
    assert sorted(model.active_mutes()) == sorted(active["mute"])


def test_default_hide_share_is_small_and_validated() -> None:
    stream = list(generate(users=300, events=20_000, seed=2, setup=False))
    share = sum(e["type"] in ("block", "mute") for e in stream) / len(stream)
    assert 0 < DEFAULT_HIDE_SHARE <= 0.05 and abs(share - DEFAULT_HIDE_SHARE) < 0.01
    only_mutes = list(generate(users=30, events=300, seed=2, hide_share=1, hide_mix=HideMix(1, 0, 0, 0)))
    assert {(e["type"], e["op"]) for e in only_mutes[-300:]} == {("mute", "mute")}
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="hide_share"):
            WorkloadModel(users=10, hide_share=bad)
    with pytest.raises(ValueError, match="followed"):
        WorkloadModel(users=10, hide_mix=HideMix(followed=2))


def test_workload_cli_hide_share(tmp_path, capsys) -> None:
    from feed_service.cli.main import main as feedctl

    base = ["workload", "--users", "40", "--count", "400", "--seed", "3", "--no-progress"]
    assert feedctl(base + ["--hide-share", "0", "--out", str(tmp_path / "none.jsonl")]) == 0
    assert feedctl(base + ["--hide-share", "0.25", "--out", str(tmp_path / "quarter.jsonl")]) == 0
    read = lambda name: [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]  # noqa: E731
    assert read("none.jsonl") == list(generate(users=40, events=400, seed=3, hide_share=0))
    assert read("quarter.jsonl") == list(generate(users=40, events=400, seed=3, hide_share=0.25))
    with pytest.raises(SystemExit):
        feedctl(base + ["--hide-share", "1.5", "--out", str(tmp_path / "bad.jsonl")])
    assert "between 0 and 1" in capsys.readouterr().err


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
