"""Random histories with reposts and replies for the property tests of the three steps (author,
reposter, reader) and of the stages built on them (tests/unit/test_reposts_replies_properties.py,
test_stream_per_reader.py, test_pull_reposters_storage.py, test_audience_stage.py,
test_inactive_readers.py; docs/reposts-and-replies.md).

Histories over a few users mix tweets that are replies (to their author, to a reader, to a third
user), edits that change a reply's parent, deletes, reposts and unreposts (ties, wrong authors, one's
own tweet), follows and unfollows (some with the followee's reposts turned off), blocks and mutes; :func:`runs` shuffles them, pads them with
duplicates and garbage of the new shapes and cuts them into random micro-batches. Tweet ids are
shared across authors (a tweet is (author, tweet id)), so that a repost can name the wrong author."""

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
    RepostChange,
    TweetDelete,
    TweetUpsert,
    event_to_json,
)
from .sizes import examples

USERS = ["u0", "u1", "u2", "u3", "u4"]
AUTHORS = USERS[:3]
TWEET_IDS = ["t0", "t1", "t2"]

#: Lines of the new shapes the engine must reject (each counts once in ``Materializer.rejected``).
GARBAGE = [
    '{"type": "repost", "op": "repost", "reposter_id": "u1", "tweet_id": "t0", "author_id": "u0", "version": 1}',
    '{"type": "repost", "op": "boost", "reposter_id": "u1", "tweet_id": "t0", "author_id": "u0", "version": 1}',
    '{"type": "repost", "op": "unrepost", "reposter_id": "", "tweet_id": "t0", "author_id": "u0", "version": 1}',
    '{"type": "tweet", "op": "upsert", "tweet_id": "t0", "author_id": "u0", "version": 1, "created_at": 1, '
    '"text": "x", "profile_version": 0, "in_reply_to_tweet_id": "t1"}',
    '{"type": "tweet", "op": "upsert", "tweet_id": "t0", "author_id": "u0", "version": 1, "created_at": 1, '
    '"text": "x", "profile_version": 0, "in_reply_to_tweet_id": "t1", "in_reply_to_author_id": ""}',
    "not json",
]

#: The Hypothesis settings of the property tests over :func:`runs`.
SETTINGS = settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_event(rnd: random.Random) -> Event:
    """One event over :data:`USERS`, :data:`AUTHORS` and :data:`TWEET_IDS`: about half the tweets are
    replies, most reposts are reposts (the rest unreposts)."""
    kind = rnd.choice(["upsert"] * 4 + ["repost"] * 3 + ["follow"] * 4 + ["delete", "block", "mute", "profile"])
    version = rnd.randint(0, 2)
    if kind == "upsert":
        author, tid = rnd.choice(AUTHORS), rnd.choice(TWEET_IDS)
        created = (USERS.index(author) * 7 + TWEET_IDS.index(tid) * 3) % 11
        if rnd.random() < 0.15:
            created = rnd.randint(0, 10)
        parent: tuple[str | None, str | None] = (None, None)
        if rnd.random() < 0.5:  # a reply: to its own author, a reader, or anyone
            parent = (rnd.choice(TWEET_IDS), rnd.choice(USERS))
        return TweetUpsert(tid, author, version, created, rnd.choice(["a", "b"]), rnd.randint(0, 1), *parent)
    if kind == "repost":
        reposter = rnd.choice(USERS)
        tid, author = rnd.choice(TWEET_IDS), rnd.choice(AUTHORS)
        if rnd.random() < 0.7:
            return RepostChange(reposter, tid, author, version, "repost", rnd.randint(0, 14), rnd.randint(0, 1))
        return RepostChange(reposter, tid, author, version, "unrepost")
    if kind == "delete":
        return TweetDelete(rnd.choice(TWEET_IDS), rnd.choice(AUTHORS), version)
    if kind == "follow":
        follower, followee = rnd.sample(USERS, 2)
        op = rnd.choice(["follow", "follow", "unfollow"])  # a follow turns the followee's reposts off 1 time in 3
        return FollowChange(follower, followee, version, op, op == "unfollow" or rnd.random() < 0.67)
    if kind == "block":
        blocker, blocked = rnd.sample(USERS, 2)
        return BlockChange(blocker, blocked, version, rnd.choice(["block", "unblock"]))
    if kind == "mute":
        muter, muted = rnd.sample(USERS, 2)
        return MuteChange(muter, muted, version, rnd.choice(["mute", "unmute"]))
    return ProfileVersion(rnd.choice(USERS), rnd.randint(0, 1), rnd.choice(["A", "B"]))


def growing_event(rnd: random.Random) -> Event:
    """An event of a history where nothing leaves a timeline but by being pushed down: no tweet
    delete, block or mute, and each tweet keeps one created_at and one parent in every version (an
    author's tweet pushed out of its class's newest ``inbox_cap`` never comes back, as before)."""
    while True:
        event = random_event(rnd)
        if type(event) in (TweetDelete, BlockChange, MuteChange):
            continue
        if type(event) is TweetUpsert:
            a, t = USERS.index(event.author_id), TWEET_IDS.index(event.tweet_id)
            parent = (None, None) if (a + t) % 3 == 0 else ("t0", USERS[(a + t) % len(USERS)])
            event = TweetUpsert(event.tweet_id, event.author_id, event.version, (a * 7 + t * 3) % 11, event.text,
                                event.profile_version, *parent)
        return event


@dataclass
class Run:
    """A history (``history``, in its order) as the engine sees it: lines in batches, ``garbage``
    of them invalid."""

    history: list[Event]
    batches: list[list[str]]
    garbage: int


@st.composite
def runs(draw: st.DrawFn, *, growing: bool = False) -> Run:
    """A :class:`Run` of up to 90 events (of :func:`growing_event` if ``growing``, else of
    :func:`random_event`), shuffled with duplicates and up to 3 :data:`GARBAGE` lines, in batches of
    1-15 lines."""
    rnd = draw(st.randoms(use_true_random=False))
    history = [(growing_event if growing else random_event)(rnd) for _ in range(draw(st.integers(0, 90)))]
    return batched(rnd, history, GARBAGE)


def batched(rnd: random.Random, history: list[Event], garbage_lines: list[str]) -> Run:
    """``history`` as a :class:`Run`: its lines padded with duplicates and up to 3 of
    ``garbage_lines``, shuffled and cut into batches of 1-15 lines."""
    lines = [json.dumps(event_to_json(e)) for e in history]
    lines += [rnd.choice(lines) for _ in range(rnd.randint(0, len(lines) // 3))] if lines else []
    garbage = [rnd.choice(garbage_lines) for _ in range(rnd.randint(0, 3))]
    lines += garbage
    rnd.shuffle(lines)
    batches, i = [], 0
    while i < len(lines):
        n = rnd.randint(1, 15)
        batches.append(lines[i:i + n])
        i += n
    return Run(history, batches, len(garbage))
