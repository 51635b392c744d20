"""Batch reference: the timeline query recomputed from scratch over the final tables.

Deliberately naive: it shares with the incremental engine only the version-ordering rules of
:mod:`feed_service.core.events`, the entry record and its order (:mod:`feed_service.core.rows`,
:func:`feed_service.core.view.sort_key`) and the default cap, never the engine's logic: fold every
event into the five final tables ``tweets``, ``follows``, ``blocks``, ``mutes`` and ``profiles``,
then run::

    SELECT f.follower_id, t.* FROM tweets t JOIN follows f ON f.followee_id = t.author_id
    WHERE t is live AND f is active
      AND NOT EXISTS (a block in force of (f.follower_id, t.author_id) or (t.author_id, f.follower_id))
      AND NOT EXISTS (a mute in force of (f.follower_id, t.author_id))
    ORDER BY created_at DESC, tweet_id DESC, author_id DESC  -- per follower, first inbox_cap rows

Unit tests compare the engine with it; integration tests of the Spark/Cassandra pipeline can too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Mapping, Sequence

from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    InvalidEvent,
    MuteChange,
    Profile,
    ProfileVersion,
    RawEvent,
    TweetContent,
    TweetDelete,
    TweetUpsert,
    content_beats,
    content_of,
    edge_rank,
    hide_rank,
    parse_event,
    profile_of,
    profile_rank,
)
from feed_service.core.join import DEFAULT_INBOX_CAP, Entry
from feed_service.core.view import entry_dict, sort_key


@dataclass(slots=True)
class FinalTables:
    """The five source tables after every event, by the version rules of :mod:`feed_service.core.events` (docs/design.md)."""

    tweets: dict[tuple[str, str], TweetContent] = field(default_factory=dict)
    """(author_id, tweet_id) -> winning content, live tweets only."""
    deleted: set[tuple[str, str]] = field(default_factory=set)
    follows: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)
    """(follower_id, followee_id) -> (version, active) of the winning change."""
    profiles: dict[tuple[str, int], Profile] = field(default_factory=dict)
    blocks: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)
    """(blocker_id, blocked_id) -> (version, in force) of the winning change."""
    mutes: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)
    """(muter_id, muted_id) -> (version, in force) of the winning change."""

    def hidden(self) -> set[tuple[str, str]]:
        """(reader, author) pairs whose tweets the reader must not see: the reader mutes or blocks
        the author, or the author blocks the reader."""
        pairs = {pair for pair, (_, on) in self.mutes.items() if on}
        for (blocker, blocked), (_, on) in self.blocks.items():
            if on:
                pairs.update(((blocker, blocked), (blocked, blocker)))
        return pairs


def _events(events: Iterable[Event | RawEvent]) -> Iterable[Event]:
    for raw in events:
        if isinstance(raw, (TweetUpsert, TweetDelete, FollowChange, ProfileVersion, BlockChange, MuteChange)):
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
        elif isinstance(ev, (BlockChange, MuteChange)):
            table, k = ((tables.blocks, (ev.blocker_id, ev.blocked_id)) if isinstance(ev, BlockChange)
                        else (tables.mutes, (ev.muter_id, ev.muted_id)))
            e = (ev.version, ev.hiding)
            if k not in table or hide_rank(*e) > hide_rank(*table[k]):
                table[k] = e
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
    hidden = tables.hidden()
    for (follower, followee), (_, active) in tables.follows.items():
        if active and followee in by_author and (follower, followee) not in hidden:
            out.setdefault(follower, []).extend(by_author[followee])
    for follower, entries in out.items():
        entries.sort(key=sort_key, reverse=True)
        if inbox_cap is not None:
            del entries[inbox_cap:]
    return out


def reference_timelines(
    events: Iterable[Event | RawEvent], *, inbox_cap: int | None = DEFAULT_INBOX_CAP
) -> dict[str, list[dict[str, Any]]]:
    """Every non-empty timeline of the final state of ``events``, in the CLI's entry shape
    (``inbox_cap`` None: the whole join, uncapped).

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


# -- the rule of a trimmed view (docs/trimming.md) ------------------------------------------------


def has_removals(events: Iterable[Event | RawEvent]) -> bool:
    """Whether the history can take a row out of a timeline other than by pushing it down: a tweet
    delete, an unfollow, a block or mute, or an edit that moves a tweet's ``created_at`` (any
    version counts).

    >>> has_removals(['{"type":"follow","op":"follow","follower_id":"ann","followee_id":"bob","version":1}'])
    False
    >>> has_removals(['{"type":"tweet","op":"delete","tweet_id":"t1","author_id":"bob","version":0}'])
    True
    """
    created: dict[tuple[str, str], int] = {}
    for ev in _events(events):
        if isinstance(ev, TweetDelete) or (isinstance(ev, FollowChange) and not ev.active):
            return True
        if isinstance(ev, (BlockChange, MuteChange)) and ev.hiding:
            return True
        if isinstance(ev, TweetUpsert):
            if created.setdefault((ev.author_id, ev.tweet_id), ev.created_at) != ev.created_at:
                return True
    return False


def exact_timelines(events: Iterable[Event | RawEvent], *, inbox_cap: int, trim_slack: int) -> frozenset[str]:
    """The users whose trimmed timeline must equal the reference's first ``inbox_cap`` entries.

    Trimming can only make a timeline short if a row it cut would later have moved back up, which
    needs a removal (:func:`has_removals`) after a cut. Without removals that is every user. With
    them, it is the users nothing was ever pushed out of: no author ever had more than ``inbox_cap``
    tweets (nothing left the engine's retained set) and the user's join never held more than
    ``inbox_cap + trim_slack`` rows (no trim cut anything). Both are bounded over the whole
    history whatever its order: every tweet id an author ever used, times every author the user
    ever followed, so the answer holds for any batching.

    >>> follow = '{"type":"follow","op":"%s","follower_id":"%s","followee_id":"bob","version":%d}'
    >>> tweet = ('{"type":"tweet","op":"upsert","tweet_id":"t%d","author_id":"bob","version":1,'
    ...          '"created_at":%d,"text":"x","profile_version":1}')
    >>> history = [follow % ("follow", "ann", 1), follow % ("follow", "cat", 1)] + [tweet % (i, i) for i in range(3)]
    >>> sorted(exact_timelines(history, inbox_cap=2, trim_slack=0))   # no removals: all
    ['ann', 'cat']
    >>> sorted(exact_timelines(history + [follow % ("unfollow", "cat", 2)], inbox_cap=3, trim_slack=0))
    ['ann', 'cat']
    >>> sorted(exact_timelines(history + [follow % ("unfollow", "cat", 2)], inbox_cap=2, trim_slack=5))
    []
    """
    events = list(_events(events))
    users = {ev.follower_id for ev in events if isinstance(ev, FollowChange)}
    if not has_removals(events):
        return frozenset(users)
    tweet_ids: dict[str, set[str]] = {}
    for ev in events:
        if isinstance(ev, TweetUpsert):
            tweet_ids.setdefault(ev.author_id, set()).add(ev.tweet_id)
    if any(len(ids) > inbox_cap for ids in tweet_ids.values()):
        return frozenset()
    followed: dict[str, set[str]] = {}
    for ev in events:
        if isinstance(ev, FollowChange) and ev.active:
            followed.setdefault(ev.follower_id, set()).add(ev.followee_id)
    limit = inbox_cap + trim_slack
    return frozenset(u for u in users
                     if sum(len(tweet_ids.get(a, ())) for a in followed.get(u, ())) <= limit)


def rule_violations(
    read: Mapping[str, Sequence[Any]],
    whole: Mapping[str, Sequence[Any]],
    *,
    inbox_cap: int,
    exact: Collection[str],
) -> list[str]:
    """How timelines as read break the rule of a trimmed view; empty when they keep it.

    ``read``: user -> entries a reader gets, newest first (users absent: empty); ``whole``: the
    uncapped reference join in the same entry shape. Per user, the timeline must be (a) at most
    ``inbox_cap`` entries, (b) a subsequence of ``whole`` (live tweets of followed authors, current
    content, reference order) and (c) for the users in ``exact``, ``whole``'s first ``inbox_cap``.

    >>> whole = {"ann": ["t3", "t2", "t1"]}
    >>> rule_violations({"ann": ["t3", "t1"]}, whole, inbox_cap=2, exact=())
    []
    >>> rule_violations({"ann": ["t3", "t1"]}, whole, inbox_cap=2, exact={"ann"})
    ["ann: ['t3', 't1'] is not the reference's first 2 entries ['t3', 't2']"]
    >>> rule_violations({"ann": ["t1", "t3"], "bob": ["t9"]}, whole, inbox_cap=2, exact=())
    ["ann: entry 1 't3' is not next in the reference join", "bob: entry 0 't9' is not next in the reference join"]
    """
    out: list[str] = []
    for user in sorted(set(read) | set(exact)):
        got, join = list(read.get(user, ())), whole.get(user, ())
        if len(got) > inbox_cap:
            out.append(f"{user}: {len(got)} entries, more than the cap {inbox_cap}")
        rest = iter(join)
        for i, entry in enumerate(got):
            if not any(entry == candidate for candidate in rest):
                out.append(f"{user}: entry {i} {entry!r} is not next in the reference join")
                break
        if user in exact and got != list(join[:inbox_cap]):
            out.append(f"{user}: {got!r} is not the reference's first {inbox_cap} entries {list(join[:inbox_cap])!r}")
    return out


def trim_rule_violations(
    read: Mapping[str, Sequence[dict[str, Any]]],
    events: Iterable[Event | RawEvent],
    *,
    inbox_cap: int,
    trim_slack: int,
) -> list[str]:
    """:func:`rule_violations` of timelines read in the public entry shape (``feedctl materialize``,
    ``GetHomeTimeline``) against the reference over ``events``; empty when the rule holds."""
    events = list(events)
    whole = reference_timelines(events, inbox_cap=None)
    return rule_violations(read, whole, inbox_cap=inbox_cap,
                           exact=exact_timelines(events, inbox_cap=inbox_cap, trim_slack=trim_slack))
