"""The stateful operator's output rows: one schema, and the one place a step result becomes rows.

A step's outputs leave the operator as compact rows (one row per delta, its follower list inside),
so the JVM carries ``len(deltas)`` rows, not ``sum(len(timeline_ids))``; the sink explodes them
into the write rows of :mod:`feed_service.core.rows` on the executors. :func:`result_rows` and
:func:`writes_of` are inverses up to that explosion (a unit test holds them together).

A row's ``kind`` says where it goes: ``timeline`` (inboxes: ``timeline_ids`` holds the followers),
``tweet``, ``profile``, ``author`` (the author timeline), ``pull_follow`` (``timeline_ids`` holds
the followers who start or stop merging ``author_id`` in) or ``block`` (``author_id`` starts or stops
blocking ``user_id``) to Cassandra, or ``dead_letter`` (a
rejected record passed through, for the dead-letter topic).
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from feed_service.core.join import StepResult
from feed_service.core.rows import (
    AuthorTimelineWrite,
    BlockWrite,
    Entry,
    ProfileRow,
    ProfileWrite,
    PullFollowWrite,
    TimelineWrite,
    TweetWrite,
)

OUTPUT_FIELDS: tuple[tuple[str, str], ...] = (
    ("kind", "string"),
    ("op", "string"),
    ("tweet_id", "string"),
    ("author_id", "string"),
    ("created_at", "bigint"),
    ("version", "bigint"),
    ("text", "string"),
    ("profile_version", "bigint"),
    ("timeline_ids", "array<string>"),
    ("user_id", "string"),
    ("display_name", "string"),
    ("avatar_url", "string"),
    ("bio", "string"),
    ("ts", "bigint"),
    ("dl_key", "string"),
    ("dl_value", "string"),
)
OUTPUT_SCHEMA = ", ".join(f"{name} {sql_type}" for name, sql_type in OUTPUT_FIELDS)
OUTPUT_COLUMNS = [name for name, _ in OUTPUT_FIELDS]


class Writes(NamedTuple):
    """Output rows sorted by destination: Cassandra rows per table, and dead letters (key, value)."""

    timeline: list[TimelineWrite]
    tweets: list[TweetWrite]
    profiles: list[ProfileWrite]
    author_timeline: list[AuthorTimelineWrite]
    pull_follows: list[PullFollowWrite]
    dead_letters: list[tuple[str, str]]
    blocks: list[BlockWrite]


_NO_PROFILE = (None, None, None, None)
_NO_LETTER = (None, None)


def result_rows(result: StepResult) -> list[tuple[Any, ...]]:
    """One step's outputs as compact output rows, in :data:`OUTPUT_FIELDS` order."""
    ts = result.ts
    rows: list[tuple[Any, ...]] = [
        ("timeline", d.op, *d.entry, list(d.timeline_ids), *_NO_PROFILE, ts, *_NO_LETTER)
        for d in result.deltas
    ]
    for t in result.tweets:
        if t.entry is None:
            rows.append(("tweet", "delete", t.tweet_id, t.author_id, None, None, None, None, None,
                         *_NO_PROFILE, ts, *_NO_LETTER))
        else:
            rows.append(("tweet", "upsert", *t.entry, None, *_NO_PROFILE, ts, *_NO_LETTER))
    for p in result.profiles:
        rows.append(("profile", "upsert", None, None, None, p.version, None, None, None,
                     p.user_id, p.display_name, p.avatar_url, p.bio, ts, *_NO_LETTER))
    for a in result.author_timeline:
        rows.append(("author", a.op, *a.entry, None, *_NO_PROFILE, ts, *_NO_LETTER))
    for f in result.pull_follows:
        rows.append(("pull_follow", f.op, None, f.author_id, None, None, None, None, list(f.follower_ids),
                     *_NO_PROFILE, ts, *_NO_LETTER))
    for b in result.blocks:
        rows.append(("block", b.op, None, b.blocker_id, None, None, None, None, None,
                     b.blocked_id, None, None, None, ts, *_NO_LETTER))
    return rows


def dead_letter_rows(letters: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Rejected records (with ``dl_key``, ``dl_value``) as output rows, passed through untouched."""
    return [("dead_letter", None, None, None, None, None, None, None, None, *_NO_PROFILE, None, r.dl_key, r.dl_value)
            for r in letters]


def writes_of(rows: Iterable[Any]) -> Writes:
    """Compact output rows (anything indexable by column name) -> write rows, timelines exploded."""
    out = Writes([], [], [], [], [], [], [])
    for r in rows:
        kind = r["kind"]
        if kind == "timeline":
            entry = Entry(r["tweet_id"], r["author_id"], r["created_at"], r["version"], r["text"], r["profile_version"])
            op, ts = r["op"], r["ts"]
            out.timeline.extend(TimelineWrite(op, tid, entry, ts) for tid in r["timeline_ids"])
        elif kind == "tweet":
            entry = None if r["op"] == "delete" else Entry(
                r["tweet_id"], r["author_id"], r["created_at"], r["version"], r["text"], r["profile_version"])
            out.tweets.append(TweetWrite(r["tweet_id"], r["author_id"], entry, r["ts"]))
        elif kind == "profile":
            profile = ProfileRow(r["user_id"], r["version"], r["display_name"], r["avatar_url"], r["bio"])
            out.profiles.append(ProfileWrite(profile, r["ts"]))
        elif kind == "author":
            entry = Entry(r["tweet_id"], r["author_id"], r["created_at"], r["version"], r["text"], r["profile_version"])
            out.author_timeline.append(AuthorTimelineWrite(r["op"], entry, r["ts"]))
        elif kind == "pull_follow":
            op, author, ts = r["op"], r["author_id"], r["ts"]
            out.pull_follows.extend(PullFollowWrite(op, follower, author, ts) for follower in r["timeline_ids"])
        elif kind == "block":
            out.blocks.append(BlockWrite(r["op"], r["author_id"], r["user_id"], r["ts"]))
        elif kind == "dead_letter":
            out.dead_letters.append((r["dl_key"], r["dl_value"]))
        else:
            raise ValueError(f"output row of unknown kind {kind!r}")
    return out
