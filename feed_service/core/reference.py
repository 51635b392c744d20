"""Batch reference: the timeline query recomputed from scratch over the final tables.

Deliberately naive and independent of :mod:`feed_service.core.join` (it shares only the
version-ordering rules of :mod:`feed_service.core.events`): fold every event into the final
``tweets``, ``follows`` and ``profiles`` tables, then run::

    SELECT f.follower_id, t.* FROM tweets t JOIN follows f ON f.followee_id = t.author_id
    WHERE t is live AND f is active
    ORDER BY created_at DESC, tweet_id DESC, author_id DESC  -- per follower, first inbox_cap rows

Unit tests compare the engine with it; integration tests of the Spark/Cassandra pipeline can too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from feed_service.core.events import (
    Event,
    FollowChange,
    InvalidEvent,
    Profile,
    ProfileVersion,
    RawEvent,
    TweetContent,
    TweetDelete,
    TweetUpsert,
    content_beats,
    content_of,
    edge_rank,
    parse_event,
    profile_of,
    profile_rank,
)
from feed_service.core.join import DEFAULT_INBOX_CAP, Entry
from feed_service.core.view import entry_dict, sort_key


@dataclass(slots=True)
class FinalTables:
    """The three source tables after every event, by the version rules of :mod:`feed_service.core.events` (docs/design.md)."""

    tweets: dict[tuple[str, str], TweetContent] = field(default_factory=dict)
    """(author_id, tweet_id) -> winning content, live tweets only."""
    deleted: set[tuple[str, str]] = field(default_factory=set)
    follows: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)
    """(follower_id, followee_id) -> (version, active) of the winning change."""
    profiles: dict[tuple[str, int], Profile] = field(default_factory=dict)


def _events(events: Iterable[Event | RawEvent]) -> Iterable[Event]:
    for raw in events:
        if isinstance(raw, (TweetUpsert, TweetDelete, FollowChange, ProfileVersion)):
            yield raw
            continue
        try:
            yield parse_event(raw)
        except InvalidEvent:
            continue


def reference_tables(events: Iterable[Event | RawEvent]) -> FinalTables:
    """Fold ``events`` (parsed, or raw envelopes; invalid ones skipped) into the final tables."""
    upserts: dict[tuple[str, str], TweetContent] = {}
    tables = FinalTables()
    for ev in _events(events):
        if isinstance(ev, TweetUpsert):
            k = (ev.author_id, ev.tweet_id)
            c = content_of(ev)
            if k not in upserts or content_beats(c, upserts[k]):
                upserts[k] = c
        elif isinstance(ev, TweetDelete):
            tables.deleted.add((ev.author_id, ev.tweet_id))
        elif isinstance(ev, FollowChange):
            k = (ev.follower_id, ev.followee_id)
            e = (ev.version, ev.active)
            if k not in tables.follows or edge_rank(*e) > edge_rank(*tables.follows[k]):
                tables.follows[k] = e
        else:
            pk = (ev.user_id, ev.version)
            p = profile_of(ev)
            if pk not in tables.profiles or profile_rank(p) > profile_rank(tables.profiles[pk]):
                tables.profiles[pk] = p
    tables.tweets = {k: c for k, c in upserts.items() if k not in tables.deleted}
    return tables


def reference_entries(tables: FinalTables, *, inbox_cap: int | None = DEFAULT_INBOX_CAP) -> dict[str, list[Entry]]:
    """The joined, sorted timelines as entries; ``inbox_cap`` None means uncapped (the whole join)."""
    by_author: dict[str, list[Entry]] = {}
    for (author, tid), c in tables.tweets.items():
        by_author.setdefault(author, []).append(Entry(tid, author, c[1], c[0], c[2], c[3]))
    out: dict[str, list[Entry]] = {}
    for (follower, followee), (_, active) in tables.follows.items():
        if active and followee in by_author:
            out.setdefault(follower, []).extend(by_author[followee])
    for follower, entries in out.items():
        entries.sort(key=sort_key, reverse=True)
        if inbox_cap is not None:
            del entries[inbox_cap:]
    return out


def reference_timelines(
    events: Iterable[Event | RawEvent], *, inbox_cap: int = DEFAULT_INBOX_CAP
) -> dict[str, list[dict[str, Any]]]:
    """Every non-empty timeline of the final state of ``events``, in the CLI's entry shape.

    >>> reference_timelines([
    ...     '{"type":"follow","op":"follow","follower_id":"ann","followee_id":"bob","version":1}',
    ...     '{"type":"tweet","op":"upsert","tweet_id":"t1","author_id":"bob","version":1,'
    ...     '"created_at":5,"text":"hi","profile_version":2}',
    ...     '{"type":"profile","user_id":"bob","version":2,"display_name":"Bob"}',
    ...     'not json',
    ... ])
    {'ann': [{'tweet_id': 't1', 'author_id': 'bob', 'version': 1, 'text': 'hi', 'author_display_name': 'Bob'}]}
    """
    tables = reference_tables(events)
    timelines = reference_entries(tables, inbox_cap=inbox_cap)
    result: dict[str, list[dict[str, Any]]] = {}
    for uid in sorted(timelines):
        result[uid] = [
            entry_dict(e, p[0] if (p := tables.profiles.get((e.author_id, e.profile_version))) else None)
            for e in timelines[uid]
        ]
    return result
