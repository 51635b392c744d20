"""Random histories of the plain join (tweets, edits, deletes, follows, blocks, mutes, profiles; no
reposts or replies) for the property tests of the engine against the batch reference
(tests/unit/test_join_properties.py, test_trimming.py, test_bucketed_join.py).

Histories run over a few users so that collisions (same tweet, same edge, same version, tied
created_at, a block and a follow of the same pair in one batch) are frequent; :func:`runs` shuffles
them, pads them with duplicates and garbage lines and cuts them into random micro-batches."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    TweetDelete,
    TweetUpsert,
    event_to_json,
)
from feed_service.core.join import Entry
from feed_service.core.reference import reference_tables
from feed_service.core.view import Materializer
from .sizes import examples

USERS = ["u0", "u1", "u2", "u3"]
TWEET_IDS = ["t0", "t1", "t2"]  # shared across authors: identity is (author, tweet)
AUTHORS = USERS[:3]  # few tweets, so that versions of one tweet collide often

#: Lines the engine must reject (each counts once in ``Materializer.rejected``).
GARBAGE = [
    "not json",
    "[1, 2]",
    '{"type": "tweet"}',
    '{"type": "tweet", "op": "upsert", "tweet_id": "t0", "author_id": "u0", "version": true, '
    '"created_at": 1, "text": "x", "profile_version": 0}',
    '{"type": "tweet", "op": "delete", "tweet_id": "t0", "author_id": "u0", "version": -1}',
    '{"type": "follow", "op": "follow", "follower_id": "u1", "followee_id": "u1", "version": 0}',
    '{"type": "follow", "op": "block", "follower_id": "u1", "followee_id": "u2", "version": 0}',
    '{"type": "block", "op": "block", "blocker_id": "u1", "blocked_id": "u1", "version": 0}',
    '{"type": "mute", "op": "unmute", "muter_id": "u2", "muted_id": "u2", "version": 1}',
    '{"type": "mute", "op": "block", "muter_id": "u2", "muted_id": "u1", "version": 1}',
    '{"type": "poll", "user_id": "u0"}',
    '{"type": "profile", "user_id": "", "version": 0, "display_name": "A"}',
    '{"type": "tweet", "op": "upsert", "tweet_id": "t0", "author_id": "u0", "version": 1.0, '
    '"created_at": 1, "text": "x", "profile_version": 0}',
    "\udcff",
]

#: The Hypothesis settings of the property tests over :func:`runs`.
SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_event(rnd: random.Random, *, fixed_created_at: bool, deletes: bool) -> Event:
    """One event over a small id space, so that entities, versions and created_at collide often.

    Without ``deletes`` nothing hides either (a block or mute removes rows as a delete does)."""
    kinds = ["upsert", "upsert", "upsert", "follow", "follow", "follow", "profile"]
    kinds += ["delete", "block", "mute"] if deletes else []
    kind = rnd.choice(kinds)
    version = rnd.randint(0, 2)
    if kind == "upsert":
        author, tid = rnd.choice(AUTHORS), rnd.choice(TWEET_IDS)
        created = (USERS.index(author) * 7 + TWEET_IDS.index(tid) * 3) % 5  # mostly fixed per tweet
        if not fixed_created_at and rnd.random() < 0.2:
            created = rnd.randint(0, 4)
        return TweetUpsert(tid, author, version, created, rnd.choice(["a", "b", "é"]), rnd.randint(0, 1))
    if kind == "delete":
        return TweetDelete(rnd.choice(TWEET_IDS), rnd.choice(AUTHORS), version)
    if kind == "follow":
        follower, followee = rnd.sample(USERS, 2)
        return FollowChange(follower, followee, version, rnd.choice(["follow", "follow", "unfollow"]))
    if kind == "block":
        blocker, blocked = rnd.sample(USERS, 2)
        return BlockChange(blocker, blocked, version, rnd.choice(["block", "unblock"]))
    if kind == "mute":
        muter, muted = rnd.sample(USERS, 2)
        return MuteChange(muter, muted, version, rnd.choice(["mute", "unmute"]))
    return ProfileVersion(rnd.choice(USERS), rnd.randint(0, 2), rnd.choice(["A", "B"]), rnd.choice([None, "http://a"]))


@dataclass
class Run:
    """A history as the engine sees it: lines in arrival order, cut into batches."""

    history: list[Event]
    lines: list[str]
    batches: list[list[str]]
    garbage: int


@st.composite
def runs(draw: st.DrawFn, *, fixed_created_at: bool = False, deletes: bool = True) -> Run:
    """A :class:`Run` of up to 80 events of :func:`random_event`, shuffled with duplicates and up to
    3 :data:`GARBAGE` lines (``garbage`` counts them), in batches of 1-12 lines."""
    rnd = draw(st.randoms(use_true_random=False))
    size = draw(st.integers(0, 80))
    history = [random_event(rnd, fixed_created_at=fixed_created_at, deletes=deletes) for _ in range(size)]
    lines = [json.dumps(event_to_json(e)) for e in history]
    lines += [rnd.choice(lines) for _ in range(rnd.randint(0, len(lines) // 3))] if lines else []
    garbage = [rnd.choice(GARBAGE) for _ in range(rnd.randint(0, 3))]
    lines += garbage
    rnd.shuffle(lines)
    batches: list[list[str]] = []
    i = 0
    while i < len(lines):
        n = rnd.randint(1, 12)
        batches.append(lines[i : i + n])
        i += n
    return Run(history, lines, batches, len(garbage))


def expected_tweet_rows(run: Run) -> dict[tuple[str, str], Entry | None]:
    """The reference's tweet rows of ``run``: each (author, tweet) its entry, ``None`` if deleted."""
    tables = reference_tables(run.history)
    rows: dict[tuple[str, str], Entry | None] = {k: None for k in tables.deleted}
    for (author, tid), c in tables.tweets.items():
        rows[(author, tid)] = Entry(tid, author, c[1], c[0], c[2], c[3])
    return rows


def check_dimensions(engine: Materializer, run: Run) -> None:
    """The tweet and profile rows are exact at any cap: versions of pushed-out tweets are kept."""
    assert engine.view.tweets == expected_tweet_rows(run)
    tables = reference_tables(run.history)
    assert {k: (r.display_name, r.avatar_url, r.bio) for k, r in engine.view.profiles.items()} == tables.profiles
    assert engine.view.blocks == {pair for pair, (_, on) in tables.blocks.items() if on}
