"""Backfill pieces that need no Spark: per-key engine states from winners, digest, manifest, summary."""

from __future__ import annotations

import json
import pickle
import random
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from feed_service.core.events import (
    BlockChange, FollowChange, MuteChange, ProfileVersion, RepostChange, TweetUpsert, join_keys, parse_event,
    tweet_payload_digest,
)
from feed_service.core.per_reader.author_step import step_with_side
from feed_service.core.state import decode_state
from feed_service.errors import BootstrapError
from feed_service.settings import Settings
from feed_service.workload.generator import generate
from spark_jobs.backfill.snapshot import Snapshot
from spark_jobs.backfill.states import key_state
from spark_jobs.backfill.winners import payload_digest_hex
from spark_jobs.bootstrap import MANIFEST_FORMAT, load_bootstrap, source_topics
from tests.support.backfill_frames import event_frame, event_row, winners


def _hides(events: list, rnd: random.Random) -> list:
    """Blocks (either way round) and mutes over follow edges, some lifted later, some tied at one version."""
    follows = sorted({(ev.follower_id, ev.followee_id) for ev in events if isinstance(ev, FollowChange)})
    out: list = []
    for i, (reader, author) in enumerate(rnd.sample(follows, 30)):
        change = [MuteChange(reader, author, i, "mute"), BlockChange(reader, author, i, "block"),
                  BlockChange(author, reader, i, "block")][i % 3]
        out.append(change)
        if i % 4 == 1:
            out.append(replace(change, version=i + 1, op="unmute" if isinstance(change, MuteChange) else "unblock"))
    # Keys whose only changes are one block between the same two users: step needs their key named.
    return out + [BlockChange("loner-a", "loner-b", 4, "block"), BlockChange("loner-b", "loner-a", 2, "unblock")]


def _noisy_history(seed: int) -> list:
    """A generated history with reposts and replies, plus blocks and mutes, duplicates, older versions
    and same-version ties, shuffled."""
    rnd = random.Random(seed)
    events = [parse_event(e) for e in generate(users=25, events=500, seed=seed, mean_following=5,
                                               repost_share=0.15, reply_share=0.3)]
    events += _hides(events, rnd)
    noise = []
    for ev in events:
        if isinstance(ev, TweetUpsert) and rnd.random() < 0.3:
            noise += [ev, replace(ev, text=ev.text + " (tie)"), replace(ev, version=max(ev.version - 1, 0),
                                                                        text="stale")]
        elif isinstance(ev, FollowChange) and rnd.random() < 0.3:
            noise += [ev, replace(ev, op="unfollow" if ev.op == "follow" else "follow")]
        elif isinstance(ev, ProfileVersion) and rnd.random() < 0.3:
            noise.append(replace(ev, display_name=ev.display_name + "~", bio=None))
        elif isinstance(ev, (BlockChange, MuteChange)) and rnd.random() < 0.5:
            undo = {"block": "unblock", "unblock": "block", "mute": "unmute", "unmute": "mute"}[ev.op]
            noise += [ev, replace(ev, op=undo)]  # a tie: the hiding op wins
        elif isinstance(ev, RepostChange) and ev.op == "repost" and rnd.random() < 0.3:
            noise += [ev, replace(ev, created_at=ev.created_at - 1)]  # a tie of two reposts: the later wins
    out = events + noise
    rnd.shuffle(out)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("inbox_cap", [2, 800])
def test_state_from_winners_is_the_engine_state_after_every_event(seed: int, inbox_cap: int) -> None:
    events = _noisy_history(seed)
    by_key: dict[str, list] = {}
    for ev in events:
        for key in join_keys(ev):
            by_key.setdefault(key, []).append(ev)
    winners_by_key: dict[str, list] = {}
    for ev in winners(events):
        for key in join_keys(ev):  # a block goes to both of its keys, as winner_events routes it
            winners_by_key.setdefault(key, []).append(ev)
    assert set(by_key) == set(winners_by_key)
    ts = 1_700_000_000_000_000
    kinds: set[str] = set()
    for key, evs in by_key.items():
        frame = event_frame([event_row(ev, key) for ev in winners_by_key[key]])
        got_key, blob, messages = key_state(frame, inbox_cap=inbox_cap, pull_threshold=2000, backfill_ts=ts)
        got = decode_state(blob)
        assert got_key == key and got.clock == ts
        # The whole author step over every event (its per-reader side too), in one batch and in many.
        once, side = step_with_side(None, evs, inbox_cap=inbox_cap, clock_start=ts - 1, key=key)
        assert got == replace(once.state, clock=ts), key
        assert [pickle.loads(m[2]) for m in messages] == [
            *side.relations, *side.replies, *side.edges, *side.tweets], key
        kinds.update(type(pickle.loads(m[2])).__name__ for m in messages)
        if inbox_cap >= len(evs):
            # Below the cap the state does not depend on batching either. At the cap it can: a
            # delete does not bring an evicted tweet back (docs/join-engine.md, "deletes at the cap").
            state = None
            for i in range(0, len(evs), 7):
                state = step_with_side(state, evs[i:i + 7], inbox_cap=inbox_cap, clock_start=0, key=key)[0].state
            assert replace(got, side=None) == replace(state, clock=ts, side=None), key
    assert kinds == {"Relation", "ConditionalTweet", "RepostEdge", "RepostedTweet"}


def test_digest_column_matches_the_engine_digest() -> None:
    got = payload_digest_hex(pd.Series([0, 5, 2**40]), pd.Series(["", "hé", "x" * 300]), pd.Series([0, 2, 9]))
    want = [f"{tweet_payload_digest(c, t, p):016x}" for c, t, p in [(0, "", 0), (5, "hé", 2), (2**40, "x" * 300, 9)]]
    assert list(got) == want
    # Fixed-width hex: string order is the engine's unsigned integer order.
    assert sorted(got) == [f"{d:016x}" for d in sorted(int(h, 16) for h in got)]


def _manifest(folder: Path, settings: Settings, **overrides) -> None:
    (folder / "state").mkdir(parents=True, exist_ok=True)
    (folder / "per_reader").mkdir(parents=True, exist_ok=True)
    (folder / "lists").mkdir(parents=True, exist_ok=True)
    manifest = {"format": MANIFEST_FORMAT, "backfill_ts": 10, "stream_clock_start": 10, "inbox_cap": 800,
                "topics": source_topics(settings), "end_offsets": {settings.topic("tweets"): {"0": 4}},
                "state": "state", "per_reader_inputs": "per_reader", "list_inputs": "lists", **overrides}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_load_bootstrap_reads_offsets_and_clock(tmp_path: Path) -> None:
    settings = Settings()
    _manifest(tmp_path, settings)
    boot = load_bootstrap(tmp_path, settings)
    assert json.loads(boot.starting_offsets) == {settings.topic("tweets"): {"0": 4}}
    assert (boot.clock_start, boot.inbox_cap, boot.state_path, boot.per_reader_path, boot.list_inputs_path) == (
        10, 800, tmp_path.resolve() / "state", tmp_path.resolve() / "per_reader", tmp_path.resolve() / "lists")


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
