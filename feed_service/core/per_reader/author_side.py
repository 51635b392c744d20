"""What an author key owes the per-reader stage after its step (docs/reposts-and-replies.md).

:func:`author_side` runs after :func:`feed_service.core.join.step` with the key's state before and
the step's result, and returns:

- for a reply to a third user X, which the step wrote to X's own inbox only (its reply phase,
  :mod:`feed_service.core.join.replies`), one :class:`ConditionalTweet` per tweet and change, from
  which the stage decides it for everyone else (never one message per holder);
- a :class:`Relation` for every reader whose "sees this author" or "hidden from this author" changed
  (the step's relation phase, :mod:`feed_service.core.join.relations`, says which);
- as a reposter, a :class:`RepostEdge` for every repost edge of this user whose winning change
  changed (a repost is routed to its reposter's key, where every change of the edge meets, and to
  the key of the author it names);
- as an author, a :class:`RepostedTweet` to each reposter that named one of its tweets: the tweet's
  content when the reposter first names it and whenever it changes (edit, delete). The reposter
  step joins the two, in the same micro-batch.

It keeps a small state of its own per user key (:class:`RepostSide`): the user's own repost edges,
who named each of the user's tweets, the content of the user's live tweets that are not retained (a
repost may name any live tweet, and the author state keeps only the retained ones' content), and a
clock that versions its messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from feed_service.core.events import (
    Event,
    ListChange,
    ListMemberChange,
    RepostChange,
    TweetContent,
    content_entry,
    content_of,
    parent_author_of,
)
from feed_service.core.rules import reply_class, repost_rank
from feed_service.core.join.key_step import StepResult
from feed_service.core.per_reader.messages import ConditionalTweet, ListInput, Relation, RepostEdge, RepostedTweet
from feed_service.core.state import AuthorState

RepostRank = tuple[int, bool, str, int, int]
"""``repost_rank`` of an edge's winning change: (version, unreposted, author_id, created_at, profile_version)."""

_EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class RepostSide:
    """A user key's per-reader state: its repost edges, its tweets' reposters, archived contents, a clock."""

    edges: Mapping[str, RepostRank] = field(default_factory=lambda: _EMPTY)
    """tweet_id -> the winning change of this user's repost edge to it (unreposts too: versions)."""
    reposters: Mapping[str, frozenset[str]] = field(default_factory=lambda: _EMPTY)
    """tweet_id (of this author) -> every reposter a change of whose edge named this author."""
    archive: Mapping[str, TweetContent] = field(default_factory=lambda: _EMPTY)
    """tweet_id -> content of a live tweet out of the retained set (valid while it is ``cold``)."""
    clock: int = 0


@dataclass(frozen=True, slots=True)
class SideResult:
    """What :func:`author_side` produced for one key and batch."""

    side: RepostSide
    relations: tuple[Relation, ...] = ()
    replies: tuple[ConditionalTweet, ...] = ()
    edges: tuple[RepostEdge, ...] = ()
    tweets: tuple[RepostedTweet, ...] = ()
    lists: tuple[ListInput, ...] = ()
    """The batch's list and membership changes of this key, passed on to the list stage."""


def author_side(key: str, before: AuthorState | None, result: StepResult, changes: Sequence[Event],
                side: RepostSide | None) -> SideResult:
    """The per-reader messages of one user key's step (module docstring). ``before`` is the key's
    state before the step, with its edges (None: a new key); ``changes`` the batch's changes of the
    key, late ones included (their positions are in ``result.late`` and they are skipped)."""
    side = side if side is not None else RepostSide()
    after = result.state
    late = set(result.late)
    timely = [ev for i, ev in enumerate(changes) if i not in late]
    ts = side.clock + 1
    replies = _conditional_changes(key, before, after, result, ts)
    relations = [Relation(r.reader, key, r.sees, r.hidden, ts, r.quiet, r.excluded) for r in result.relations]
    edges, reposters, new_names = _fold_reposts(key, side, timely)
    edge_messages = [RepostEdge(key, tid, edges[tid], ts) for tid in sorted(edges)
                     if side.edges.get(tid) != edges[tid]]
    archive = _archive(side.archive, before, after, result)
    changed = {t.tweet_id for t in result.tweets} | _left_retained(before, after)
    tweets: list[RepostedTweet] = []
    for tid in sorted(changed | set(new_names)):
        old = _content(tid, before, side.archive)
        new = _content(tid, after, archive)
        entry = None if new is None else content_entry(tid, key, new)
        for reposter in sorted(reposters.get(tid, ())):
            if old != new or reposter in new_names.get(tid, ()):
                tweets.append(RepostedTweet(reposter, key, tid, entry, ts))
    lists = tuple(ListInput(key, ev, ts) for ev in timely if type(ev) is ListChange or type(ev) is ListMemberChange)
    emitted = bool(replies or relations or edge_messages or tweets)
    new_side = RepostSide(edges, reposters, archive, ts if emitted else side.clock)
    return SideResult(new_side, tuple(relations), tuple(replies),
                      tuple(edge_messages), tuple(tweets), lists)


def side_of(state: AuthorState | None) -> RepostSide | None:
    """The per-reader side kept in an author key's state (its plain payload), or None."""
    if state is None or state.side is None:
        return None
    edges, reposters, archive, clock = state.side
    return RepostSide(edges, reposters, archive, clock)


def side_payload(side: RepostSide) -> tuple | None:
    """The plain payload :class:`~feed_service.core.state.AuthorState` keeps (None for an empty side,
    so a key that never met a repost or a reply stores what it stored before they existed)."""
    if not side.edges and not side.reposters and not side.archive and side.clock == 0:
        return None
    return (_plain(side.edges), _plain(side.reposters), _plain(side.archive), side.clock)


def _plain(mapping: Mapping) -> dict:
    return mapping if type(mapping) is dict else dict(mapping)  # the codec pickles dicts, not proxies


def same_side(a: RepostSide | None, b: RepostSide) -> bool:
    """Whether ``b`` (an :func:`author_side` result) leaves ``a`` unchanged: it shares unchanged containers."""
    if a is None:
        return side_payload(b) is None
    return a.edges is b.edges and a.reposters is b.reposters and a.archive is b.archive and a.clock == b.clock


def _conditional(key: str, state: AuthorState | None, tid: str) -> TweetContent | None:
    """The content of ``tid`` as a conditional tweet of this push author: retained, a reply to a
    third user; None otherwise (a pull author's replies are decided at read: docs/fan-out.md)."""
    if state is None or state.pull:
        return None
    c = state.tweets.get(tid)
    return c if c is not None and reply_class(key, parent_author_of(c)) is not None else None


def _conditional_changes(key: str, before: AuthorState | None, after: AuthorState, result: StepResult,
                         ts: int) -> list[ConditionalTweet]:
    """One :class:`ConditionalTweet` per tweet whose conditional content changed in the step: an
    edit, a delete, an eviction from the retained set, or every retained reply when the author
    crosses the pull threshold."""
    if before is not None and before.tweets is after.tweets and before.pull == after.pull:
        return []
    if before is None or before.pull != after.pull:
        tids = set(after.tweets) | (set(before.tweets) if before is not None else set())
    else:
        tids = {t.tweet_id for t in result.tweets} | _left_retained(before, after)
    out: list[ConditionalTweet] = []
    for tid in sorted(tids):
        old, new = _conditional(key, before, tid), _conditional(key, after, tid)
        if old != new:
            out.append(ConditionalTweet(key, tid, None if new is None else content_entry(tid, key, new), ts))
    return out


def _fold_reposts(key: str, side: RepostSide, changes: Sequence[Event]
                  ) -> tuple[Mapping[str, RepostRank], Mapping[str, frozenset[str]], dict[str, set[str]]]:
    """This user's repost edges after the batch (the highest rank per edge), who named its tweets,
    and the reposters new to a tweet in this batch."""
    edges, reposters = side.edges, side.reposters
    new_names: dict[str, set[str]] = {}
    for ev in changes:
        if type(ev) is not RepostChange:
            continue
        if ev.reposter_id != key and ev.author_id != key:
            raise ValueError(f"author side: a repost of {ev.reposter_id!r} naming {ev.author_id!r} reached {key!r}")
        if ev.reposter_id == key:
            rank = repost_rank(ev.version, ev.reposting, ev.author_id, ev.created_at, ev.profile_version)
            old = edges.get(ev.tweet_id)
            if old is None or rank > old:
                if edges is side.edges:
                    edges = dict(edges)
                edges[ev.tweet_id] = rank  # type: ignore[index]
        if ev.author_id == key and ev.reposter_id not in reposters.get(ev.tweet_id, ()):
            if reposters is side.reposters:
                reposters = dict(reposters)
            reposters[ev.tweet_id] = reposters.get(ev.tweet_id, frozenset()) | {ev.reposter_id}  # type: ignore[index]
            new_names.setdefault(ev.tweet_id, set()).add(ev.reposter_id)
    return edges, reposters, new_names


def _left_retained(before: AuthorState | None, after: AuthorState) -> set[str]:
    if before is None or before.tweets is after.tweets:
        return set()
    return {tid for tid in before.tweets if tid not in after.tweets}


def _archive(archive: Mapping[str, TweetContent], before: AuthorState | None, after: AuthorState,
             result: StepResult) -> Mapping[str, TweetContent]:
    """The contents of the live tweets out of the retained set after the step."""
    changed = {t.tweet_id: t.entry for t in result.tweets}
    touched = set(changed) | _left_retained(before, after)
    if not touched:
        return archive
    out = dict(archive)
    for tid in touched:
        if tid in after.tweets or tid not in after.cold:
            out.pop(tid, None)
        elif tid in changed and changed[tid] is not None:
            out[tid] = content_of(changed[tid])
        elif before is not None and tid in before.tweets:
            out[tid] = before.tweets[tid]
    return out


def _content(tid: str, state: AuthorState | None, archive: Mapping[str, TweetContent]) -> TweetContent | None:
    if state is None:
        return None
    c = state.tweets.get(tid)
    if c is not None:
        return c
    return archive.get(tid) if tid in state.cold else None
