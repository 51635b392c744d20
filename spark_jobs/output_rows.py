"""The stateful operator's output rows: one schema, and the one place a step result becomes rows.

A step's outputs leave the operator as compact rows (one row per delta, its follower list inside),
so the JVM carries ``len(deltas)`` rows, not ``sum(len(timeline_ids))``; the sink turns them
into the write rows of :mod:`feed_service.core.rows` on the executors, a timeline delta still
compact (:class:`~feed_service.core.rows.TimelineFanout`: Cassandra writes it per chunk of
timelines). :func:`result_rows` and :func:`writes_of` are inverses (a unit test holds them together).

A row's ``kind`` says where it goes: ``per_reader`` (a message to the per-reader stage about
``user_id``, run by the sink after the rows are written), ``timeline`` (inboxes: ``timeline_ids`` holds the followers),
``tweet``, ``profile``, ``author`` (the author timeline), ``pull_follow`` (``timeline_ids`` holds
the followers who start or stop merging ``author_id`` in) or ``block`` (``author_id`` starts or stops
blocking ``user_id``) to Cassandra, or ``dead_letter`` (a
rejected record passed through, for the dead-letter topic).

``source_ms`` is the Kafka timestamp of the source event that caused the row
(:mod:`feed_service.core.change_sources`; null when the input rows carry no times, and for dead
letters). After the rows are written, :func:`view_changes_of` turns every row but ``tweet`` and
``dead_letter`` rows into one view change for the ``timeline_changes`` topic (docs/view-changes.md).
"""

from __future__ import annotations

import pickle
from itertools import repeat
from typing import Any, Iterable, Iterator, NamedTuple

from feed_service.core.change_sources import StepSources
from feed_service.core.join import StepResult
from feed_service.core.per_reader.author_side import SideResult
from feed_service.core.per_reader.messages import STAGE, ConditionalTweet, ListInput, Relation, RepostedTweet, RepostEdge
from feed_service.core.rows import (
    AuthorTimelineWrite,
    BlockWrite,
    Entry,
    ProfileRow,
    ProfileWrite,
    PullFollowWrite,
    TimelineFanout,
    TweetWrite,
)
from feed_service.core.view_changes import (
    AuthorChange,
    BlockRowChange,
    ProfileChange,
    PullFollowChange,
    TimelineChange,
    ViewChange,
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
    ("source_ms", "bigint"),
    # a reply's parent and a repost entry's reposter (docs/reposts-and-replies.md); last, so that the
    # columns before them keep their positions
    ("in_reply_to_tweet_id", "string"),
    ("in_reply_to_author_id", "string"),
    ("reposted_by", "string"),
    ("reposted_at", "bigint"),
    ("reposter_profile_version", "bigint"),
    # a message to the per-reader stage (kind ``per_reader``), pickled: docs/reposts-and-replies.md
    ("message", "binary"),
)
OUTPUT_SCHEMA = ", ".join(f"{name} {sql_type}" for name, sql_type in OUTPUT_FIELDS)
OUTPUT_COLUMNS = [name for name, _ in OUTPUT_FIELDS]


class Writes(NamedTuple):
    """Output rows sorted by destination: Cassandra rows per table, and dead letters (key, value)."""

    timeline: list[TimelineFanout]
    tweets: list[TweetWrite]
    profiles: list[ProfileWrite]
    author_timeline: list[AuthorTimelineWrite]
    pull_follows: list[PullFollowWrite]
    dead_letters: list[tuple[str, str]]
    blocks: list[BlockWrite]
    messages: list[tuple[str, str, tuple[Any, int | None]]]
    """(step, destination key, (message, source_ms)) for the per-reader stage, run after the rows
    are written."""


_NO_PROFILE = (None, None, None, None)
_NO_LETTER = (None, None)
_NO_EXTRA = (None, None, None, None, None, None)
_NO_MESSAGE = (None,)


def _unknown(n: int) -> Iterator[None]:
    return repeat(None, n)


def result_rows(result: StepResult, sources: StepSources | None = None) -> list[tuple[Any, ...]]:
    """One step's outputs as compact output rows, in :data:`OUTPUT_FIELDS` order; ``sources`` gives
    each output's ``source_ms`` (:func:`feed_service.core.change_sources.step_sources`; None: null)."""
    ts = result.ts
    src = sources if sources is not None else StepSources(
        *(_unknown(len(part)) for part in (result.deltas, result.tweets, result.profiles, result.author_timeline,
                                           result.pull_follows, result.blocks)))
    rows: list[tuple[Any, ...]] = [
        ("timeline", d.op, *d.entry[:6], list(d.timeline_ids), *_NO_PROFILE, ts, *_NO_LETTER, s, *d.entry[6:],
         *_NO_MESSAGE)
        for d, s in zip(result.deltas, src.deltas)
    ]
    for t, s in zip(result.tweets, src.tweets):
        if t.entry is None:
            rows.append(("tweet", "delete", t.tweet_id, t.author_id, None, None, None, None, None,
                         *_NO_PROFILE, ts, *_NO_LETTER, s, *_NO_EXTRA))
        else:
            rows.append(("tweet", "upsert", *t.entry[:6], None, *_NO_PROFILE, ts, *_NO_LETTER, s, *t.entry[6:],
                         *_NO_MESSAGE))
    for p, s in zip(result.profiles, src.profiles):
        rows.append(("profile", "upsert", None, None, None, p.version, None, None, None,
                     p.user_id, p.display_name, p.avatar_url, p.bio, ts, *_NO_LETTER, s, *_NO_EXTRA))
    for a, s in zip(result.author_timeline, src.author_timeline):
        rows.append(("author", a.op, *a.entry[:6], None, *_NO_PROFILE, ts, *_NO_LETTER, s, *a.entry[6:], *_NO_MESSAGE))
    for f, s in zip(result.pull_follows, src.pull_follows):
        rows.append(("pull_follow", f.op, None, f.author_id, None, None, None, None, list(f.follower_ids),
                     *_NO_PROFILE, ts, *_NO_LETTER, s, *_NO_EXTRA))
    for b, s in zip(result.blocks, src.blocks):
        rows.append(("block", b.op, None, b.blocker_id, None, None, None, None, None,
                     b.blocked_id, None, None, None, ts, *_NO_LETTER, s, *_NO_EXTRA))
    return rows


#: A message's class -> (its ``op`` in the row, the field that names the user it is about).
_MESSAGE_ROUTES = {
    RepostEdge: ("edge", "reposter"),
    RepostedTweet: ("tweet", "author_id"),
    Relation: ("relation", "reader"),
    ConditionalTweet: ("reply", "author_id"),
    ListInput: ("list", "key"),
}


def message_rows(side: SideResult | None, source_ms: int | None) -> list[tuple[Any, ...]]:
    """The messages an author key owes the per-reader stage, one ``per_reader`` row each: ``op`` names
    the message, ``user_id`` its destination key, ``message`` the pickled message (it travels only
    between the operator and the sink of one micro-batch, inside the job)."""
    if side is None:
        return []
    rows: list[tuple[Any, ...]] = []
    for part in (side.relations, side.replies, side.edges, side.tweets, side.lists):
        for m in part:
            op, field = _MESSAGE_ROUTES[type(m)]
            rows.append(("per_reader", op, None, None, None, None, None, None, None, getattr(m, field), None, None,
                         None, m.ts, *_NO_LETTER, source_ms, None, None, None, None, None,
                         pickle.dumps(m, protocol=5)))
    return rows


def message_of(row: Any) -> tuple[str, str, tuple[Any, int | None]]:
    """A ``per_reader`` row back to (the stage it goes to, the user it is about, (the message, the
    Kafka timestamp of the change that caused it: what the freshness of its rows is measured from))."""
    return STAGE, row["user_id"], (pickle.loads(row["message"]), row["source_ms"])


def dead_letter_rows(letters: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Rejected records (with ``dl_key``, ``dl_value``) as output rows, passed through untouched."""
    return [("dead_letter", None, None, None, None, None, None, None, None, *_NO_PROFILE, None, r.dl_key, r.dl_value,
             None, *_NO_EXTRA) for r in letters]


def writes_of(rows: Iterable[Any]) -> Writes:
    """Compact output rows (anything indexable by column name) -> write rows; a timeline delta stays
    one :class:`TimelineFanout` (the store writes it per chunk of timelines), pull follows are exploded."""
    out = Writes([], [], [], [], [], [], [], [])
    for r in rows:
        kind = r["kind"]
        if kind == "timeline":
            entry = _entry_of(r)
            out.timeline.append(TimelineFanout(r["op"], tuple(r["timeline_ids"]), entry, r["ts"]))
        elif kind == "tweet":
            entry = None if r["op"] == "delete" else _entry_of(r)
            out.tweets.append(TweetWrite(r["tweet_id"], r["author_id"], entry, r["ts"]))
        elif kind == "profile":
            profile = ProfileRow(r["user_id"], r["version"], r["display_name"], r["avatar_url"], r["bio"])
            out.profiles.append(ProfileWrite(profile, r["ts"]))
        elif kind == "author":
            entry = _entry_of(r)
            out.author_timeline.append(AuthorTimelineWrite(r["op"], entry, r["ts"]))
        elif kind == "pull_follow":
            op, author, ts = r["op"], r["author_id"], r["ts"]
            out.pull_follows.extend(PullFollowWrite(op, follower, author, ts) for follower in r["timeline_ids"])
        elif kind == "block":
            out.blocks.append(BlockWrite(r["op"], r["author_id"], r["user_id"], r["ts"]))
        elif kind == "dead_letter":
            out.dead_letters.append((r["dl_key"], r["dl_value"]))
        elif kind == "per_reader":
            out.messages.append(message_of(r))
        else:
            raise ValueError(f"output row of unknown kind {kind!r}")
    return out


def _entry_of(r: Any) -> Entry:
    return Entry(r["tweet_id"], r["author_id"], r["created_at"], r["version"], r["text"], r["profile_version"],
                 r["in_reply_to_tweet_id"], r["in_reply_to_author_id"], r["reposted_by"], r["reposted_at"],
                 r["reposter_profile_version"])


def view_changes_of(rows: Iterable[Any]) -> list[ViewChange]:
    """Compact output rows -> the view changes to publish, one per row, in row order (not split:
    :func:`feed_service.core.view_changes.split` does that); ``tweet`` and ``dead_letter`` rows
    are not published (docs/view-changes.md)."""
    out: list[ViewChange] = []
    for r in rows:
        kind = r["kind"]
        if kind == "timeline":
            out.append(TimelineChange(r["op"], _entry_of(r), tuple(r["timeline_ids"]), r["ts"], r["source_ms"]))
        elif kind == "author":
            out.append(AuthorChange(r["op"], _entry_of(r), r["ts"], r["source_ms"]))
        elif kind == "pull_follow":
            out.append(PullFollowChange(r["op"], r["author_id"], tuple(r["timeline_ids"]), r["ts"], r["source_ms"]))
        elif kind == "profile":
            out.append(ProfileChange(r["user_id"], r["version"], r["ts"], r["source_ms"]))
        elif kind == "block":
            out.append(BlockRowChange(r["op"], r["author_id"], r["user_id"], r["ts"], r["source_ms"]))
        elif kind not in ("tweet", "dead_letter", "per_reader"):
            raise ValueError(f"output row of unknown kind {kind!r}")
    return out
