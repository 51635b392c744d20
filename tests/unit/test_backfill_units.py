"""Backfill pieces that need no Spark: per-key engine states from winners, digest, manifest, summary."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from feed_service.core.events import (
    FollowChange, ProfileVersion, TweetDelete, TweetUpsert, join_key, parse_event, tweet_payload_digest,
)
from feed_service.core.join import step
from feed_service.core.reference import reference_tables
from feed_service.core.state import decode_state
from feed_service.errors import BootstrapError
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from spark_jobs.backfill.snapshot import Snapshot
from spark_jobs.backfill.states import key_state
from spark_jobs.backfill.winners import payload_digest_hex
from spark_jobs.bootstrap import MANIFEST_FORMAT, load_bootstrap
from spark_jobs.envelope import EVENT_COLUMNS

COLUMNS = ["key", *(name for name, _ in EVENT_COLUMNS)]


def _row(ev) -> dict:
    row = dict.fromkeys(COLUMNS)
    row["key"] = join_key(ev)
    if isinstance(ev, TweetUpsert):
        row.update(type="tweet", op="upsert", tweet_id=ev.tweet_id, author_id=ev.author_id, version=ev.version,
                   created_at=ev.created_at, text=ev.text, profile_version=ev.profile_version)
    elif isinstance(ev, TweetDelete):
        row.update(type="tweet", op="delete", tweet_id=ev.tweet_id, author_id=ev.author_id, version=ev.version)
    elif isinstance(ev, FollowChange):
        row.update(type="follow", op=ev.op, follower_id=ev.follower_id, followee_id=ev.followee_id,
                   version=ev.version)
    else:
        row.update(type="profile", user_id=ev.user_id, version=ev.version, display_name=ev.display_name,
                   avatar_url=ev.avatar_url, bio=ev.bio)
    return row


def _noisy_history(seed: int) -> list:
    """A generated history plus duplicates, older versions and same-version ties, shuffled."""
    rnd = random.Random(seed)
    events = [parse_event(e) for e in generate(users=25, events=500, seed=seed, mean_following=5)]
    noise = []
    for ev in events:
        if isinstance(ev, TweetUpsert) and rnd.random() < 0.3:
            noise += [ev, replace(ev, text=ev.text + " (tie)"), replace(ev, version=max(ev.version - 1, 0),
                                                                        text="stale")]
        elif isinstance(ev, FollowChange) and rnd.random() < 0.3:
            noise += [ev, replace(ev, op="unfollow" if ev.op == "follow" else "follow")]
        elif isinstance(ev, ProfileVersion) and rnd.random() < 0.3:
            noise.append(replace(ev, display_name=ev.display_name + "~", bio=None))
    out = events + noise
    rnd.shuffle(out)
    return out


def _winners(events: list) -> list:
    """The deduplicated changelog the Spark job builds, here from the reference's final tables."""
    t = reference_tables(events)
    out = [TweetUpsert(tid, a, c[0], c[1], c[2], c[3]) for (a, tid), c in t.tweets.items()]
    out += [TweetDelete(tid, a, 0) for a, tid in t.deleted]
    out += [FollowChange(f, e, v, "follow" if active else "unfollow") for (f, e), (v, active) in t.follows.items()]
    out += [ProfileVersion(u, v, *p) for (u, v), p in t.profiles.items()]
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("inbox_cap", [2, 800])
def test_state_from_winners_is_the_engine_state_after_every_event(seed: int, inbox_cap: int) -> None:
    events = _noisy_history(seed)
    by_key: dict[str, list] = {}
    for ev in events:
        by_key.setdefault(join_key(ev), []).append(ev)
    winners_by_key: dict[str, list] = {}
    for ev in _winners(events):
        winners_by_key.setdefault(join_key(ev), []).append(ev)
    assert set(by_key) == set(winners_by_key)
    ts = 1_700_000_000_000_000
    for key, evs in by_key.items():
        frame = pd.DataFrame([_row(ev) for ev in winners_by_key[key]], columns=COLUMNS)
        got_key, blob = key_state(frame, inbox_cap=inbox_cap, pull_threshold=2000, backfill_ts=ts)
        got = decode_state(blob)
        assert got_key == key and got.clock == ts
        # The engine over every event, in one batch and in many small batches.
        once = step(None, evs, inbox_cap=inbox_cap, clock_start=ts - 1).state
        assert got == replace(once, clock=ts), key
        if inbox_cap >= len(evs):
            # Below the cap the state does not depend on batching either. At the cap it can: a
            # delete does not bring an evicted tweet back (docs/join-engine.md, "deletes at the cap").
            state = None
            for i in range(0, len(evs), 7):
                state = step(state, evs[i:i + 7], inbox_cap=inbox_cap, clock_start=0).state
            assert got == replace(state, clock=ts), key


def test_digest_column_matches_the_engine_digest() -> None:
    got = payload_digest_hex(pd.Series([0, 5, 2**40]), pd.Series(["", "hé", "x" * 300]), pd.Series([0, 2, 9]))
    want = [f"{tweet_payload_digest(c, t, p):016x}" for c, t, p in [(0, "", 0), (5, "hé", 2), (2**40, "x" * 300, 9)]]
    assert list(got) == want
    # Fixed-width hex: string order is the engine's unsigned integer order.
    assert sorted(got) == [f"{d:016x}" for d in sorted(int(h, 16) for h in got)]


def _manifest(folder: Path, settings: Settings, **overrides) -> None:
    (folder / "state").mkdir(parents=True, exist_ok=True)
    manifest = {"format": MANIFEST_FORMAT, "backfill_ts": 10, "stream_clock_start": 10, "inbox_cap": 800,
                "topics": {r: settings.topic(r) for r in ("tweets", "follows", "profiles")},
                "end_offsets": {settings.topic("tweets"): {"0": 4}}, "state": "state", **overrides}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_load_bootstrap_reads_offsets_and_clock(tmp_path: Path) -> None:
    settings = Settings()
    _manifest(tmp_path, settings)
    boot = load_bootstrap(tmp_path, settings)
    assert json.loads(boot.starting_offsets) == {settings.topic("tweets"): {"0": 4}}
    assert (boot.clock_start, boot.inbox_cap, boot.state_path) == (10, 800, tmp_path.resolve() / "state")


def test_load_bootstrap_refuses_unusable_folders(tmp_path: Path) -> None:
    settings = Settings()
    with pytest.raises(BootstrapError, match="no completed backfill"):
        load_bootstrap(tmp_path, settings)
    _manifest(tmp_path, settings, format=99)
    with pytest.raises(BootstrapError, match="format"):
        load_bootstrap(tmp_path, settings)
    _manifest(tmp_path, settings.with_topic_suffix(".other"))
    with pytest.raises(BootstrapError, match="topics"):
        load_bootstrap(tmp_path, settings)


def test_snapshot_counts_records_between_watermarks() -> None:
    snap = Snapshot(start={"t": {"0": 3, "1": 0}}, end={"t": {"0": 10, "1": 0}})
    assert snap.records_expected() == 7
