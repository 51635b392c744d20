"""Batch reference: the timeline query recomputed from scratch over the final tables.

Deliberately naive: it shares with the incremental engine only the rules of
:mod:`feed_service.core.rules` (version ranks, the reply rules, the earliest reposter), the entry
record and its order (:mod:`feed_service.core.rows`, :func:`feed_service.core.view.sort_key`) and the
default cap, never the engine's logic: fold every event into the eight final tables ``tweets``,
``follows``, ``blocks``, ``mutes``, ``reposts``, ``profiles``, ``lists`` and ``members``, then, with
``Hidden(R, X)`` = R mutes or blocks X, or X blocks R (in force), ``Visible(R, X)`` = R actively
follows X AND NOT Hidden(R, X), and for a list L: ``Live(L)`` = L's winning change is a create,
whose ``owner(L)``, ``policy(L)`` and ``exclusive(L)`` are L's; ``Member(L, X)`` = Live(L) AND the
membership (L, X)'s winning change is an add; ``ListSees(L, X)`` = Member(L, X) AND NOT
Hidden(owner(L), X); ``Excluded(R, X)`` = some L with owner(L) = R, exclusive(L) and Member(L, X)::

    direct(R, T)    = T live AND Visible(R, T.author) AND NOT Excluded(R, T.author)
                      AND (T is no reply OR T.parent_author IN (T.author, R) OR Visible(R, T.parent_author))
    reposters(R, T) = { P : P's repost of T wins its edge, names T.author, T live,
                            Visible(R, P), NOT Excluded(R, P), R's follow of P shows reposts,
                            T.author not hidden from R }

    per reader R, one entry per tweet T with direct(R, T) or reposters(R, T) non-empty:
      direct: at T.created_at, no reposter; otherwise at the earliest (repost time, reposter id)
      of reposters(R, T), naming that reposter
    ORDER BY (that time, tweet_id, author_id) DESC  -- the first inbox_cap entries

    per live list L of owner O, the same with these two sets (and every live list present):
    list_direct(L, T)    = T live AND ListSees(L, T.author)
                           AND (T is no reply OR T.parent_author IN (T.author, O)
                                OR policy(L) = followed AND Visible(O, T.parent_author)
                                OR policy(L) = list AND ListSees(L, T.parent_author))
    list_reposters(L, T) = { P : P's repost of T wins its edge, names T.author, T live,
                                 ListSees(L, P), NOT Hidden(O, T.author) }

docs/reposts-and-replies.md says why each rule is what it is; docs/lists.md the lists' rules and,
at #per-follow-options, the follow's ``show_reposts`` option. Without lists, reposts and replies this is
the plain join ``tweets ⋈ follows`` less the hidden pairs, as before.

Unit tests compare the engine with it; integration tests of the Spark/Cassandra pipeline can too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Container, Iterable, Mapping, Sequence

from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    InvalidEvent,
    ListChange,
    ListMemberChange,
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
from feed_service.core.rules import (ListRank, Repost, direct, earliest, edge_rank, follow_edge, hide_rank, home_source_kept,
                                     list_rank, member_rank, profile_rank, repost_order, repost_rank, shown_in_list,
                                     shows_reposts)
from feed_service.core.join import DEFAULT_INBOX_CAP, Entry
from feed_service.core.view import entry_dict, sort_key


RepostRank = tuple[int, bool, str, int, int]
"""A repost edge's winning change as :func:`~feed_service.core.rules.repost_rank` ranks it:
``(version, unreposted, author_id, created_at, profile_version)``."""


@dataclass(slots=True)
class FinalTables:
    """The eight source tables after every event, by the version rules of :mod:`feed_service.core.rules` (docs/design.md)."""

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
    lists: dict[str, ListChange] = field(default_factory=dict)
    """list_id -> the winning change (:func:`~feed_service.core.rules.list_rank`), a create or a
    delete: its owner, name and options; a list whose winner is a delete does not exist."""
    members: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)
    """(list_id, member_id) -> (version, active) of the winning change
    (:func:`~feed_service.core.rules.member_rank`), whether or not the list exists."""

    def live_lists(self) -> dict[str, ListChange]:
        """list_id -> the winning create of each list that exists (``Live``)."""
        return {lid: change for lid, change in self.lists.items() if change.live}

    def list_members(self) -> dict[str, set[str]]:
        """list_id -> the members of each live list (``Member``; empty set: none), the owner's
        hidden users included: a membership of a list that does not exist joins nothing."""
        out: dict[str, set[str]] = {lid: set() for lid in self.live_lists()}
        for (lid, member), (_, active) in self.members.items():
            if active and lid in out:
                out[lid].add(member)
        return out

    def excluded(self) -> dict[str, set[str]]:
        """owner -> the members of the owner's live exclusive lists (``Excluded``): the sources
        set aside from the owner's home timeline (docs/lists.md#exclusive-lists)."""
        out: dict[str, set[str]] = {}
        live = self.live_lists()
        for lid, members in self.list_members().items():
            if live[lid].exclusive and members:
                out.setdefault(live[lid].owner_id, set()).update(members)
        return out

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
                            RepostChange, ListChange, ListMemberChange)):
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
        elif isinstance(ev, ListChange):
            old = tables.lists.get(ev.list_id)
            if old is None or _list_rank(ev) > _list_rank(old):
                tables.lists[ev.list_id] = ev
        elif isinstance(ev, ListMemberChange):
            k = (ev.list_id, ev.member_id)
            e = (ev.version, ev.active)
            if k not in tables.members or member_rank(*e) > member_rank(*tables.members[k]):
                tables.members[k] = e
        elif isinstance(ev, ProfileVersion):
            pk = (ev.user_id, ev.version)
            p = profile_of(ev)
            if pk not in tables.profiles or profile_rank(p) > profile_rank(tables.profiles[pk]):
                tables.profiles[pk] = p
    tables.tweets = {k: c for k, c in upserts.items() if k not in tables.deleted}
    return tables


def _list_rank(change: ListChange) -> ListRank:
    return list_rank(change.version, change.live, change.name, change.replies_policy, change.exclusive,
                     change.owner_id)


def tweet_entry(author_id: str, tweet_id: str, c: TweetContent, repost: tuple[str, int, int] | None = None) -> Entry:
    """The entry of a tweet's content ``c``; ``repost`` = (reposter, repost time, reposter's profile
    version) for an entry brought by a repost."""
    entry = content_entry(tweet_id, author_id, c)
    if repost is None:
        return entry
    reposter, at, pv = repost
    return entry._replace(reposted_by=reposter, reposted_at=at, reposter_profile_version=pv)


def _timeline(tables: FinalTables, by_author: Mapping[str, list[tuple[str, TweetContent]]],
              reposts: Mapping[str, list[tuple[str, str, int, int]]], *, sources: Collection[str],
              is_direct: Callable[[str, str | None], bool], brings_reposts: Callable[[str], bool],
              author_hidden: Container[str], inbox_cap: int | None) -> list[Entry]:
    """One timeline: the direct tweets of ``sources`` (``is_direct(author, parent author)``), then,
    of the other live tweets whose author is not in ``author_hidden``, one entry each at the earliest
    repost among the ``sources`` that ``brings_reposts``; newest first, the first ``inbox_cap``."""
    entries: dict[tuple[str, str], Entry] = {}
    for author in sources:
        for tid, c in by_author.get(author, ()):
            if is_direct(author, parent_author_of(c)):
                entries[(author, tid)] = tweet_entry(author, tid, c)
    chosen: dict[tuple[str, str], dict[Repost, int]] = {}
    for reposter in sources:
        if not brings_reposts(reposter):
            continue
        for author, tid, at, pv in reposts.get(reposter, ()):
            if (author, tid) in entries or author in author_hidden:
                continue
            chosen.setdefault((author, tid), {})[repost_order(at, reposter)] = pv
    for (author, tid), candidates in chosen.items():
        first = earliest(candidates)
        assert first is not None
        at, reposter = first
        entries[(author, tid)] = tweet_entry(author, tid, tables.tweets[(author, tid)], (reposter, at, candidates[first]))
    timeline = sorted(entries.values(), key=sort_key, reverse=True)
    return timeline if inbox_cap is None else timeline[:inbox_cap]


def _by_author(tables: FinalTables) -> dict[str, list[tuple[str, TweetContent]]]:
    out: dict[str, list[tuple[str, TweetContent]]] = {}
    for (author, tid), c in tables.tweets.items():
        out.setdefault(author, []).append((tid, c))
    return out


def _hidden_from(tables: FinalTables) -> dict[str, set[str]]:
    """reader -> the authors hidden from the reader (``Hidden``)."""
    out: dict[str, set[str]] = {}
    for reader, author in tables.hidden():
        out.setdefault(reader, set()).add(author)
    return out


def reference_entries(tables: FinalTables, *, inbox_cap: int | None = DEFAULT_INBOX_CAP) -> dict[str, list[Entry]]:
    """The joined, sorted home timelines as entries, non-empty ones only; ``inbox_cap`` None means
    uncapped (the whole join). The members of a reader's exclusive lists are set aside as sources
    (:func:`~feed_service.core.rules.home_source_kept`), never as parents' authors."""
    by_author, reposts, hidden, excluded = _by_author(tables), tables.live_reposts(), _hidden_from(tables), tables.excluded()
    out: dict[str, list[Entry]] = {}
    for reader, sees in tables.visible().items():
        aside = excluded.get(reader, set())
        timeline = _timeline(
            tables, by_author, reposts, sources={u for u in sees if home_source_kept(u, aside)},
            is_direct=lambda author, parent, reader=reader, sees=sees: direct(author, parent, reader, sees),
            brings_reposts=lambda p, reader=reader: shows_reposts(tables.follows.get((reader, p))),
            author_hidden=hidden.get(reader, set()), inbox_cap=inbox_cap)
        if timeline:
            out[reader] = timeline
    return out


def reference_list_entries(tables: FinalTables, *, inbox_cap: int | None = DEFAULT_INBOX_CAP) -> dict[str, list[Entry]]:
    """list_id -> the list's timeline as entries, every live list present (possibly empty):
    ``list_direct`` and ``list_reposters`` of the module's definition; ``inbox_cap`` None: uncapped.
    A list ignores follow options (every member's reposts count)."""
    by_author, reposts, hidden, visible = _by_author(tables), tables.live_reposts(), _hidden_from(tables), tables.visible()
    live = tables.live_lists()
    out: dict[str, list[Entry]] = {}
    for lid, members in tables.list_members().items():
        change = live[lid]
        owner, policy = change.owner_id, change.replies_policy
        owner_hidden = hidden.get(owner, set())
        list_sees = {m for m in members if m not in owner_hidden}
        owner_sees = visible.get(owner, set())
        out[lid] = _timeline(
            tables, by_author, reposts, sources=list_sees,
            is_direct=lambda author, parent, owner=owner, policy=policy, list_sees=list_sees, owner_sees=owner_sees:
                shown_in_list(author, parent, owner, policy, list_sees, owner_sees),
            brings_reposts=lambda p: True, author_hidden=owner_hidden, inbox_cap=inbox_cap)
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


def reference_lists(
    events: Iterable[Event | RawEvent], *, inbox_cap: int | None = DEFAULT_INBOX_CAP
) -> dict[str, list[dict[str, Any]]]:
    """Every live list's timeline of the final state of ``events`` (empty ones too), by list id, in
    the CLI's entry shape (``inbox_cap`` None: uncapped).

    >>> reference_lists([
    ...     '{"type":"list","op":"create","list_id":"L1","owner_id":"ann","version":1,"name":"news"}',
    ...     '{"type":"list_member","op":"add","list_id":"L1","member_id":"bob","version":1}',
    ...     '{"type":"list","op":"create","list_id":"L2","owner_id":"ann","version":1,"name":"empty"}',
    ...     '{"type":"tweet","op":"upsert","tweet_id":"t1","author_id":"bob","version":1,'
    ...     '"created_at":5,"text":"hi","profile_version":2}',
    ...     '{"type":"list_member","op":"add","list_id":"L3","member_id":"bob","version":1}',
    ... ])
    {'L1': [{'tweet_id': 't1', 'author_id': 'bob', 'version': 1, 'text': 'hi', 'author_display_name': None}], 'L2': []}
    """
    tables = reference_tables(events)
    timelines = reference_list_entries(tables, inbox_cap=inbox_cap)
    return {lid: [entry_dict(e, _display_name(tables, e.author_id, e.profile_version)) for e in timelines[lid]]
            for lid in sorted(timelines)}


def reference_excluded(tables: FinalTables) -> dict[str, set[str]]:
    """reader -> the users it sees and sets aside as sources of its home timeline (``Excluded(R, X)``
    and ``Visible(R, X)``: X in a live exclusive list of R's, R follows X and nothing hides X), what
    the stream stores in ``reader_excluded`` (docs/lists.md#exclusive-lists); readers without one
    are absent.

    >>> reference_excluded(reference_tables([
    ...     '{"type":"list","op":"create","list_id":"L1","owner_id":"ann","version":1,"name":"n","exclusive":true}',
    ...     '{"type":"list_member","op":"add","list_id":"L1","member_id":"bob","version":1}',
    ...     '{"type":"list_member","op":"add","list_id":"L1","member_id":"cat","version":1}',
    ...     '{"type":"follow","op":"follow","follower_id":"ann","followee_id":"bob","version":1}',
    ... ]))
    {'ann': {'bob'}}
    """
    visible = tables.visible()
    out = {reader: members & visible.get(reader, set()) for reader, members in tables.excluded().items()}
    return {reader: users for reader, users in out.items() if users}


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

    Of the lists' changes (conservatively, by kind, never by which version wins): a list delete, a
    membership remove, any exclusive list (its members' entries leave the owner's home timeline,
    and come back when it stops being exclusive), two creates of one list with different owners
    or reply policies, and reposts with membership adds together (an add moves a list's repost
    entry down as a follow moves a home one). A member added to an exclusive list needs an
    exclusive create, so it counts. A plain create, a rename or an add without reposts only adds.

    >>> has_removals(['{"type":"follow","op":"follow","follower_id":"ann","followee_id":"bob","version":1}'])
    False
    >>> has_removals(['{"type":"tweet","op":"delete","tweet_id":"t1","author_id":"bob","version":0}'])
    True
    >>> create = '{"type":"list","op":"create","list_id":"L","owner_id":"ann","version":%d,"name":"n"%s}'
    >>> has_removals([create % (1, ""), create % (2, ',"replies_policy":"list"')])
    False
    >>> has_removals([create % (1, ""), create % (2, ',"replies_policy":"none"')])
    True
    >>> has_removals([create % (1, ',"exclusive":true')])
    True
    """
    created: dict[tuple[str, str], tuple[int, object]] = {}
    reposted: dict[tuple[str, str], int | None] = {}
    follows = False
    list_shapes: dict[str, tuple[str, str]] = {}
    for ev in _events(events):
        if isinstance(ev, ListChange) and (not ev.live or ev.exclusive or list_shapes.setdefault(
                ev.list_id, (ev.owner_id, ev.replies_policy)) != (ev.owner_id, ev.replies_policy)):
            return True
        if isinstance(ev, ListMemberChange) and not ev.active:
            return True
        if isinstance(ev, TweetDelete) or (isinstance(ev, FollowChange) and not ev.active):
            return True
        if isinstance(ev, (BlockChange, MuteChange)) and ev.hiding:
            return True
        if isinstance(ev, RepostChange) and (not ev.reposting or reposted.setdefault(
                (ev.reposter_id, ev.tweet_id), ev.created_at) != ev.created_at):
            return True
        follows = follows or isinstance(ev, (FollowChange, ListMemberChange))
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
    ever followed, so the answer holds for any batching. :func:`exact_lists` is the same for lists.

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
    followed: dict[str, set[str]] = {}
    for ev in events:
        if isinstance(ev, FollowChange):
            authors = followed.setdefault(ev.follower_id, set())
            if ev.active:
                authors.add(ev.followee_id)
    return _never_cut(events, followed, inbox_cap=inbox_cap, trim_slack=trim_slack)


def exact_lists(events: Iterable[Event | RawEvent], *, inbox_cap: int, trim_slack: int) -> frozenset[str]:
    """The lists whose trimmed timeline must equal the reference's first ``inbox_cap`` entries:
    :func:`exact_timelines` for a list's reader (its inbox is trimmed as a home's is,
    docs/lists.md#in-the-engine), with "followed" read as "was ever a member". Without removals
    every list any change names; with them, the lists nothing was ever pushed out of: no author had
    more than ``inbox_cap`` tweets and the tweets (and reposts) of every user ever added to the
    list, at any version, whether or not it was live, are at most ``inbox_cap + trim_slack``.

    >>> create = '{"type":"list","op":"create","list_id":"%s","owner_id":"own","version":1,"name":"n"}'
    >>> add = '{"type":"list_member","op":"%s","list_id":"%s","member_id":"%s","version":%d}'
    >>> tweet = ('{"type":"tweet","op":"upsert","tweet_id":"t%d","author_id":"%s","version":1,'
    ...          '"created_at":%d,"text":"x","profile_version":1}')
    >>> history = ([create % "L", create % "M", add % ("add", "L", "bob", 1), add % ("add", "M", "bob", 1),
    ...             add % ("add", "M", "cat", 1)] + [tweet % (i, "bob", i) for i in range(2)] + [tweet % (9, "cat", 9)])
    >>> sorted(exact_lists(history, inbox_cap=1, trim_slack=0))   # no removals: all
    ['L', 'M']
    >>> removed = history + [add % ("remove", "M", "cat", 2)]    # M's reader held 3 rows, a removed member's too
    >>> sorted(exact_lists(removed, inbox_cap=2, trim_slack=0)), sorted(exact_lists(removed, inbox_cap=2, trim_slack=1))
    (['L'], ['L', 'M'])
    >>> sorted(exact_lists(removed, inbox_cap=1, trim_slack=9))   # bob had 2 tweets > cap 1
    []
    """
    events = list(_events(events))
    members: dict[str, set[str]] = {}
    for ev in events:
        if isinstance(ev, ListChange):
            members.setdefault(ev.list_id, set())
        elif isinstance(ev, ListMemberChange):
            added = members.setdefault(ev.list_id, set())
            if ev.active:
                added.add(ev.member_id)
    return _never_cut(events, members, inbox_cap=inbox_cap, trim_slack=trim_slack)


def _never_cut(events: Sequence[Event], sources: Mapping[str, Collection[str]], *, inbox_cap: int,
               trim_slack: int) -> frozenset[str]:
    """The keys of ``sources`` (a reader -> every source it ever took rows from) whose trimmed
    timeline is exact over ``events``: all without removals, else those whose sources' tweets and
    reposts ever made fit ``inbox_cap + trim_slack`` rows, and none once an author had more than
    ``inbox_cap`` (:func:`exact_timelines`)."""
    if not has_removals(events):
        return frozenset(sources)
    tweet_ids: dict[str, set[str]] = {}
    for ev in events:  # what each user brings into a reader's join: its tweets and its reposts
        if isinstance(ev, TweetUpsert):
            tweet_ids.setdefault(ev.author_id, set()).add(ev.tweet_id)
        elif isinstance(ev, RepostChange):
            tweet_ids.setdefault(ev.reposter_id, set()).add(f"repost {ev.tweet_id}")
    if any(len(ids) > inbox_cap for ids in tweet_ids.values()):
        return frozenset()
    limit = inbox_cap + trim_slack
    return frozenset(reader for reader, users in sources.items()
                     if sum(len(tweet_ids.get(u, ())) for u in users) <= limit)


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
    lists: Mapping[str, Sequence[dict[str, Any]]] | None = None,
) -> list[str]:
    """:func:`rule_violations` of timelines read in the public entry shape (``feedctl materialize``,
    ``GetHomeTimeline``) against the reference over ``events``; empty when the rule holds. ``lists``
    (list id -> a list's timeline as read, ``TimelineView.list_snapshot``'s shape) are held to the
    same rule against :func:`reference_lists`, exact for :func:`exact_lists`; their violations
    name ``list <id>``."""
    events = list(events)
    whole = reference_timelines(events, inbox_cap=None)
    out = rule_violations(read, whole, inbox_cap=inbox_cap,
                          exact=exact_timelines(events, inbox_cap=inbox_cap, trim_slack=trim_slack))
    if lists is not None:
        named = {f"list {lid}": rows for lid, rows in lists.items()}
        whole_lists = {f"list {lid}": rows for lid, rows in reference_lists(events, inbox_cap=None).items()}
        exact = {f"list {lid}" for lid in exact_lists(events, inbox_cap=inbox_cap, trim_slack=trim_slack)}
        out += rule_violations(named, whole_lists, inbox_cap=inbox_cap, exact=exact)
    return out
