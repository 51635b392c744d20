"""Batch reference: the timeline query recomputed from scratch over the final tables.

Deliberately naive: it shares with the incremental engine only the version-ordering rules of
:mod:`feed_service.core.events`, the entry record and its order (:mod:`feed_service.core.rows`,
:func:`feed_service.core.view.sort_key`) and the default cap, never the engine's logic: fold every
event into the six final tables ``tweets``, ``follows``, ``blocks``, ``mutes``, ``reposts`` and
``profiles``, then, with ``Visible(R, X)`` = R actively follows X and no block or mute in force
hides X from R (R mutes or blocks X, or X blocks R)::

    direct(R, T)    = T live AND Visible(R, T.author)
                      AND (T is no reply OR T.parent_author IN (T.author, R) OR Visible(R, T.parent_author))
    reposters(R, T) = { P : P's repost of T wins its edge, names T.author, T live,
                            Visible(R, P), R's follow of P shows reposts, T.author not hidden from R }

    per reader R, one entry per tweet T with direct(R, T) or reposters(R, T) non-empty:
      direct: at T.created_at, no reposter; otherwise at the earliest (repost time, reposter id)
      of reposters(R, T), naming that reposter
    ORDER BY (that time, tweet_id, author_id) DESC  -- the first inbox_cap entries

docs/reposts-and-replies.md says why each rule is what it is; docs/lists.md#per-follow-options the
follow's ``show_reposts`` option. Without reposts and replies this is
the plain join ``tweets ⋈ follows`` less the hidden pairs, as before.

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
    RefillRequest,
    RepostChange,
    TweetContent,
    TweetDelete,
    TweetUpsert,
    content_beats,
    content_entry,
    content_of,
    parent_author_of,
    parse_event,
    profile_of,
)
from feed_service.core.rules import (Repost, direct, earliest, edge_rank, follow_edge, hide_rank, profile_rank, repost_order,
                                     repost_rank, shows_reposts)
from feed_service.core.join import DEFAULT_INBOX_CAP, Entry
from feed_service.core.view import entry_dict, sort_key


RepostRank = tuple[int, bool, str, int, int]
"""A repost edge's winning change as :func:`~feed_service.core.rules.repost_rank` ranks it:
``(version, unreposted, author_id, created_at, profile_version)``."""


@dataclass(slots=True)
class FinalTables:
    """The six source tables after every event, by the version rules of :mod:`feed_service.core.events` (docs/design.md)."""

    tweets: dict[tuple[str, str], TweetContent] = field(default_factory=dict)
    """(author_id, tweet_id) -> winning content, live tweets only."""
    deleted: set[tuple[str, str]] = field(default_factory=set)
    follows: dict[tuple[str, str], tuple[int, bool] | tuple[int, bool, bool]] = field(default_factory=dict)
    """(follower_id, followee_id) -> the winning change as :func:`~feed_service.core.rules.follow_edge`
    keeps it: (version, active), or (version, True, False) with reposts turned off."""
    profiles: dict[tuple[str, int], Profile] = field(default_factory=dict)
    blocks: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)
    """(blocker_id, blocked_id) -> (version, in force) of the winning change."""
    mutes: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)
    """(muter_id, muted_id) -> (version, in force) of the winning change."""
    reposts: dict[tuple[str, str], RepostRank] = field(default_factory=dict)
    """(reposter_id, tweet_id) -> the winning change's rank (:data:`RepostRank`)."""

    def live_reposts(self) -> dict[str, list[tuple[str, str, int, int]]]:
        """reposter -> ``(author_id, tweet_id, repost time, profile version)`` of each winning repost
        whose tweet (by that author) is live."""
        out: dict[str, list[tuple[str, str, int, int]]] = {}
        for (reposter, tid), (_, unreposted, author, at, pv) in self.reposts.items():
            if not unreposted and (author, tid) in self.tweets:
                out.setdefault(reposter, []).append((author, tid, at, pv))
        return out

    def visible(self) -> dict[str, set[str]]:
        """reader -> the users the reader actively follows and nothing hides (``Visible``)."""
        hidden = self.hidden()
        out: dict[str, set[str]] = {}
        for (reader, followee), edge in self.follows.items():
            if edge[1] and (reader, followee) not in hidden:
                out.setdefault(reader, set()).add(followee)
        return out

    def hidden(self) -> set[tuple[str, str]]:
        """(reader, author) pairs whose tweets the reader must not see: the reader mutes or blocks
        the author, or the author blocks the reader."""
        pairs = {pair for pair, (_, on) in self.mutes.items() if on}
        for (blocker, blocked), (_, on) in self.blocks.items():
            if on:
                pairs.update(((blocker, blocked), (blocked, blocker)))
        return pairs


def _events(events: Iterable[Event | RawEvent]) -> Iterable[Event]:
    """The valid changes of the tables; refill requests change no table (docs/trimming.md#refill)."""
    for raw in events:
        if isinstance(raw, (TweetUpsert, TweetDelete, FollowChange, ProfileVersion, BlockChange, MuteChange,
                            RepostChange)):
            yield raw
            continue
        if isinstance(raw, RefillRequest):
            continue
        try:
            ev = parse_event(raw)
        except InvalidEvent:
            continue
        if not isinstance(ev, RefillRequest):
            yield ev


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
            e = follow_edge(ev.version, ev.active, ev.show_reposts)
            if k not in tables.follows or edge_rank(*e) > edge_rank(*tables.follows[k]):
                tables.follows[k] = e
        elif isinstance(ev, (BlockChange, MuteChange)):
            table, k = ((tables.blocks, (ev.blocker_id, ev.blocked_id)) if isinstance(ev, BlockChange)
                        else (tables.mutes, (ev.muter_id, ev.muted_id)))
            e = (ev.version, ev.hiding)
            if k not in table or hide_rank(*e) > hide_rank(*table[k]):
                table[k] = e
        elif isinstance(ev, RepostChange):
            k = (ev.reposter_id, ev.tweet_id)
            r = repost_rank(ev.version, ev.reposting, ev.author_id, ev.created_at, ev.profile_version)
            if k not in tables.reposts or r > tables.reposts[k]:
                tables.reposts[k] = r
        else:
            pk = (ev.user_id, ev.version)
            p = profile_of(ev)
            if pk not in tables.profiles or profile_rank(p) > profile_rank(tables.profiles[pk]):
                tables.profiles[pk] = p
    tables.tweets = {k: c for k, c in upserts.items() if k not in tables.deleted}
    return tables


def tweet_entry(author_id: str, tweet_id: str, c: TweetContent, repost: tuple[str, int, int] | None = None) -> Entry:
    """The entry of a tweet's content ``c``; ``repost`` = (reposter, repost time, reposter's profile
    version) for an entry brought by a repost."""
    entry = content_entry(tweet_id, author_id, c)
    if repost is None:
        return entry
    reposter, at, pv = repost
    return entry._replace(reposted_by=reposter, reposted_at=at, reposter_profile_version=pv)


def reference_entries(tables: FinalTables, *, inbox_cap: int | None = DEFAULT_INBOX_CAP) -> dict[str, list[Entry]]:
    """The joined, sorted timelines as entries; ``inbox_cap`` None means uncapped (the whole join)."""
    by_author: dict[str, list[tuple[str, TweetContent]]] = {}
    for (author, tid), c in tables.tweets.items():
        by_author.setdefault(author, []).append((tid, c))
    reposts = tables.live_reposts()
    hidden = tables.hidden()
    out: dict[str, list[Entry]] = {}
    for reader, sees in tables.visible().items():
        entries: dict[tuple[str, str], Entry] = {}
        for author in sees:
            for tid, c in by_author.get(author, ()):
                if direct(author, parent_author_of(c), reader, sees):
                    entries[(author, tid)] = tweet_entry(author, tid, c)
        chosen: dict[tuple[str, str], dict[Repost, int]] = {}
        for reposter in sees:
            if not shows_reposts(tables.follows.get((reader, reposter))):
                continue
            for author, tid, at, pv in reposts.get(reposter, ()):
                if (author, tid) in entries or (reader, author) in hidden:
                    continue
                chosen.setdefault((author, tid), {})[repost_order(at, reposter)] = pv
        for (author, tid), candidates in chosen.items():
            first = earliest(candidates)
            assert first is not None
            at, reposter = first
            pv = candidates[first]
            entries[(author, tid)] = tweet_entry(author, tid, tables.tweets[(author, tid)], (reposter, at, pv))
        if entries:
            timeline = sorted(entries.values(), key=sort_key, reverse=True)
            out[reader] = timeline if inbox_cap is None else timeline[:inbox_cap]
    return out


def reference_user_timelines(tables: FinalTables, *, inbox_cap: int | None = DEFAULT_INBOX_CAP) -> dict[str, list[Entry]]:
    """Every user's own timeline (``GetUserTimeline``): the user's live tweets and the user's live
    reposts, one entry per tweet (a repost of one's own tweet shows the tweet itself), newest first."""
    out: dict[str, dict[tuple[str, str], Entry]] = {}
    for (author, tid), c in tables.tweets.items():
        out.setdefault(author, {})[(author, tid)] = tweet_entry(author, tid, c)
    for reposter, items in tables.live_reposts().items():
        own = out.setdefault(reposter, {})
        for author, tid, at, pv in items:
            if author != reposter:
                own[(author, tid)] = tweet_entry(author, tid, tables.tweets[(author, tid)], (reposter, at, pv))
    return {user: sorted(entries.values(), key=sort_key, reverse=True)[:inbox_cap] for user, entries in out.items()}


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
        result[uid] = [entry_dict(e, _display_name(tables, e.author_id, e.profile_version)) for e in timelines[uid]]
    return result


def _display_name(tables: FinalTables, user_id: str, version: int) -> str | None:
    profile = tables.profiles.get((user_id, version))
    return None if profile is None else profile[0]


# -- the rule of a trimmed view (docs/trimming.md) ------------------------------------------------


def has_removals(events: Iterable[Event | RawEvent]) -> bool:
    """Whether the history can take a row out of a timeline other than by pushing it down: a tweet
    delete, an unfollow, a block or mute, an edit that moves a tweet's ``created_at`` or changes
    its parent, an unrepost, two reposts of one edge at different times, or reposts and follows
    together (a follow can move a repost entry down: to the tweet's own time once its author is
    followed, to an earlier repost once that reposter is); any version counts.

    >>> has_removals(['{"type":"follow","op":"follow","follower_id":"ann","followee_id":"bob","version":1}'])
    False
    >>> has_removals(['{"type":"tweet","op":"delete","tweet_id":"t1","author_id":"bob","version":0}'])
    True
    """
    created: dict[tuple[str, str], tuple[int, object]] = {}
    reposted: dict[tuple[str, str], int | None] = {}
    follows = False
    for ev in _events(events):
        if isinstance(ev, TweetDelete) or (isinstance(ev, FollowChange) and not ev.active):
            return True
        if isinstance(ev, (BlockChange, MuteChange)) and ev.hiding:
            return True
        if isinstance(ev, RepostChange) and (not ev.reposting or reposted.setdefault(
                (ev.reposter_id, ev.tweet_id), ev.created_at) != ev.created_at):
            return True
        follows = follows or isinstance(ev, FollowChange)
        if isinstance(ev, TweetUpsert):
            shape = (ev.created_at, ev.in_reply_to_author_id)
            if created.setdefault((ev.author_id, ev.tweet_id), shape) != shape:
                return True
    return bool(reposted) and follows


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
    for ev in events:  # what each user brings into a follower's join: its tweets and its reposts
        if isinstance(ev, TweetUpsert):
            tweet_ids.setdefault(ev.author_id, set()).add(ev.tweet_id)
        elif isinstance(ev, RepostChange):
            tweet_ids.setdefault(ev.reposter_id, set()).add(f"repost {ev.tweet_id}")
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
