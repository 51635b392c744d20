"""The reposter step: one user's reposts, fanned out to whoever sees that user (docs/reposts-and-replies.md).

Keyed by the reposter P. Its state is a copy of P's audience (from the :class:`AudienceDelta`
messages of P's author key), P's repost edges (:class:`RepostEdge`, from P's key) and the tweets
they named (:class:`RepostedTweet`, from each named author's key); it joins an edge with its tweet
on both the tweet id and the author the edge's winning change names. Like the author step it diffs
what it fans out after the batch against what it fanned out before: a changed repost goes to every
reader who sees P before and after, a reader who starts or stops seeing P gets or loses every
repost P fans out. Its outputs are :class:`RepostCandidate` messages at its own clock, and the rows
of P's own timeline that are reposts (of others' tweets: a repost of one's own tweet shows the
tweet itself).

A **pull reposter** (as many readers see P as ``pull_threshold`` or more) fans out only the reposts
a read cannot merge from its own timeline's rows (reposts of its own replies to third users); the
readers who see it merge the rest at read (:mod:`~feed_service.core.per_reader.pull_reposts`), and
learn that they must from its :class:`PullReposterDelta` rows. P keeps its mode from one step to
the next and changes it only at a step, withdrawing or sending what the new mode fans out, as an
author crossing the pull threshold does with its inbox rows (docs/fan-out.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from feed_service.core.per_reader.messages import (
    AudienceDelta,
    PullReposterDelta,
    RepostCandidate,
    RepostedTweet,
    RepostEdge,
)
from feed_service.core.rows import AuthorTimelineDelta, Entry

_EMPTY: Mapping = MappingProxyType({})
TweetKey = tuple[str, str]
"""(author_id, tweet_id): a tweet's identity."""


@dataclass(frozen=True, slots=True)
class ReposterState:
    """One reposter's audience copy, edges and their tweets, each value with the ts that set it."""

    audience: Mapping[str, tuple[int, bool]] = field(default_factory=lambda: _EMPTY)
    """reader -> (ts, sees the reposter)."""
    edges: Mapping[str, tuple[int, tuple]] = field(default_factory=lambda: _EMPTY)
    """tweet_id -> (ts, the edge's winning rank)."""
    tweets: Mapping[TweetKey, tuple[int, Entry | None]] = field(default_factory=lambda: _EMPTY)
    """(author_id, tweet_id) -> (ts, the tweet's content as an entry, or None)."""
    joined: Mapping[TweetKey, Entry] = field(default_factory=lambda: _EMPTY)
    """The live reposts: edge on, naming an author whose tweet is live (derived from the above)."""
    clock: int = 0
    pull: bool = False
    """Whether the reposter was a pull reposter after its last step."""
    seers: int = 0
    """How many readers see the reposter (the ``audience`` entries that say so)."""


@dataclass(frozen=True, slots=True)
class ReposterResult:
    state: ReposterState
    candidates: tuple[RepostCandidate, ...]
    own_timeline: tuple[AuthorTimelineDelta, ...]
    """Changes of the reposter's own timeline rows of reposts (``user_reposts``)."""
    pull_readers: tuple[PullReposterDelta, ...] = ()
    """Readers who start or stop merging this pull reposter's reposts in at read."""


def reposter_step(reposter: str, state: ReposterState | None, audience: Sequence[AudienceDelta],
                  edges: Sequence[RepostEdge], tweets: Sequence[RepostedTweet], *,
                  pull_threshold: int | None = None) -> ReposterResult:
    """Apply one batch of messages to ``reposter``'s state; return the candidates and own-timeline
    rows. ``pull_threshold`` None: never a pull reposter."""
    state = state if state is not None else ReposterState()
    new_audience = _assign(state.audience, ((m.reader, m.ts, m.visible) for m in audience if _mine(m.user, reposter)))
    new_edges = _assign(state.edges, ((m.tweet_id, m.ts, m.rank) for m in edges if _mine(m.reposter, reposter)))
    new_tweets = _assign(state.tweets, (((m.author_id, m.tweet_id), m.ts, m.entry) for m in tweets
                                        if _mine(m.reposter, reposter)))
    touched = {m.tweet_id for m in edges} | {m.tweet_id for m in tweets}
    joined = dict(state.joined)
    changed: list[TweetKey] = []
    for tid in touched:
        keys = {k for k in joined if k[1] == tid}
        edge = new_edges.get(tid)
        if edge is not None and not edge[1][1]:
            keys.add((edge[1][2], tid))
        for k in keys:
            old = joined.get(k)
            new = _join(reposter, k, new_edges, new_tweets)
            if old != new:
                changed.append(k)
                if new is None:
                    del joined[k]
                else:
                    joined[k] = new
    changed.sort()
    ts = state.clock + 1
    changed_readers = sorted({m.reader for m in audience if _sees(state.audience, m.reader) != new_audience[m.reader][1]})
    seers = state.seers + sum(1 if new_audience[r][1] else -1 for r in changed_readers)
    was_pull, pull = state.pull, pull_threshold is not None and seers >= pull_threshold
    old_fanned = _fanned_out(reposter, state.joined, was_pull)
    new_fanned = old_fanned if not changed and pull == was_pull else _fanned_out(reposter, joined, pull)
    candidates: list[RepostCandidate] = []
    if changed or pull != was_pull:  # what readers who see the reposter before and after get changed
        keys = changed if pull == was_pull else sorted(old_fanned.keys() | new_fanned.keys())
        diff = [(k, new_fanned.get(k)) for k in keys if old_fanned.get(k) != new_fanned.get(k)]
        if diff:
            for reader in sorted(r for r, v in new_audience.items() if v[1] and _sees(state.audience, r)):
                candidates.extend(RepostCandidate(reader, reposter, k[0], k[1], e, ts) for k, e in diff)
    for reader in changed_readers:  # a reader who comes or goes: everything fanned out, as it is after the batch
        if new_audience[reader][1]:
            candidates.extend(RepostCandidate(reader, reposter, k[0], k[1], e, ts) for k, e in sorted(new_fanned.items()))
        else:
            candidates.extend(RepostCandidate(reader, reposter, k[0], k[1], None, ts) for k in sorted(old_fanned))
    pull_readers: list[PullReposterDelta] = []
    members = changed_readers if pull == was_pull else sorted(
        r for r, v in new_audience.items() if v[1] or _sees(state.audience, r))
    for reader in members:
        before, after = was_pull and _sees(state.audience, reader), pull and new_audience[reader][1]
        if before != after:
            pull_readers.append(PullReposterDelta("insert" if after else "delete", reader, reposter, ts))
    own: list[AuthorTimelineDelta] = []
    for k in changed:
        if k[0] == reposter:
            continue  # one's own tweet shows as the tweet in one's own timeline
        old, new = state.joined.get(k), joined.get(k)
        if old is not None and (new is None or old.at != new.at):
            own.append(AuthorTimelineDelta("delete", old))
            old = None
        if new is not None:
            own.append(AuthorTimelineDelta("insert" if old is None else "update", new))
    emitted = bool(candidates or own or pull_readers)
    new_state = ReposterState(new_audience, new_edges, new_tweets, joined, ts if emitted else state.clock, pull, seers)
    return ReposterResult(new_state, tuple(candidates), tuple(own), tuple(pull_readers))


def _fanned_out(reposter: str, joined: Mapping[TweetKey, Entry], pull: bool) -> Mapping[TweetKey, Entry]:
    """The reposts the reposter sends to the readers who see it: all of them while push; while pull
    only its reposts of its own replies to third users, which its own timeline's rows (the reposts
    of others' tweets, what a read merges in) do not hold and which are not direct for every reader."""
    if not pull:
        return joined
    return {k: e for k, e in joined.items()
            if k[0] == reposter and e.in_reply_to_author_id is not None and e.in_reply_to_author_id != reposter}


def _mine(owner: str, reposter: str) -> bool:
    if owner != reposter:
        raise ValueError(f"reposter step: a message for {owner!r} reached {reposter!r}")
    return True


def _assign(current: Mapping, items) -> Mapping:
    """``current`` with each (identity, ts, value) whose ts is newer assigned; ``current`` itself if none."""
    out = current
    for k, ts, value in items:
        old = out.get(k)
        if old is None or ts > old[0]:
            if out is current:
                out = dict(current)
            out[k] = (ts, value)
    return out


def _join(reposter: str, k: TweetKey, edges: Mapping[str, tuple[int, tuple]],
          tweets: Mapping[TweetKey, tuple[int, Entry | None]]) -> Entry | None:
    """The repost of tweet ``k``: the edge is on and names ``k``'s author, and the tweet is live."""
    edge = edges.get(k[1])
    if edge is None or edge[1][1] or edge[1][2] != k[0]:
        return None
    tweet = tweets.get(k)
    if tweet is None or tweet[1] is None:
        return None
    rank = edge[1]
    return tweet[1]._replace(reposted_by=reposter, reposted_at=rank[3], reposter_profile_version=rank[4])


def _sees(audience: Mapping[str, tuple[int, bool]], reader: str) -> bool:
    v = audience.get(reader)
    return v is not None and v[1]
