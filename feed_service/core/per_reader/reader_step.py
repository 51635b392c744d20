"""The reader step: the per-reader decisions of the view (docs/reposts-and-replies.md).

Keyed by the reader R. Its state is what the other steps assigned (each value with its sender's
ts, the newest kept):

- ``rel``: per user X, whether R sees X and whether X is hidden from R (:class:`Relation`);
- ``replies``: the conditional replies of authors R sees (:class:`ConditionalReply`);
- ``candidates``: per tweet, the reposts of it by reposters R sees (:class:`RepostCandidate`);

and what it wrote, ``shown``. For every tweet the batch may have changed it decides the entry of
R's own table ``home_extras`` from the final state, exactly as the batch reference does:

- a conditional reply is shown at its own time when R sees its author and its parent's author;
- otherwise, if some reposter of the tweet is seen by R, the tweet is not direct for R (R does not
  see its author, or it is a reply R's rule filters) and its author is not hidden from R, the entry
  sits at the earliest (repost time, reposter) and names that reposter.

A tweet that is direct and plain is in R's inbox (written by its author's key), never here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from feed_service.core.events import content_beats
from feed_service.core.per_reader.messages import (
    ConditionalReply,
    ExtrasDelta,
    HiddenDelta,
    Relation,
    RepostCandidate,
    VisibleDelta,
)
from feed_service.core.rows import Entry

_EMPTY: Mapping = MappingProxyType({})
TweetKey = tuple[str, str]
"""(author_id, tweet_id): a tweet's identity."""


@dataclass(frozen=True, slots=True)
class ReaderState:
    rel: Mapping[str, tuple[int, bool, bool]] = field(default_factory=lambda: _EMPTY)
    """user -> (ts, R sees the user, the user is hidden from R)."""
    replies: Mapping[TweetKey, tuple[int, Entry | None]] = field(default_factory=lambda: _EMPTY)
    candidates: Mapping[TweetKey, Mapping[str, tuple[int, Entry | None]]] = field(default_factory=lambda: _EMPTY)
    """tweet -> reposter -> (ts, repost entry or None)."""
    shown: Mapping[TweetKey, Entry] = field(default_factory=lambda: _EMPTY)
    """The rows of ``home_extras`` this step wrote, by tweet."""
    clock: int = 0


@dataclass(frozen=True, slots=True)
class ReaderResult:
    state: ReaderState
    extras: tuple[ExtrasDelta, ...]
    visible: tuple[VisibleDelta, ...]
    hidden: tuple[HiddenDelta, ...] = ()
    """Users whose tweets start or stop being hidden from the reader (what a read of a pull
    reposter's reposts needs, docs/reposts-and-replies.md, hybrid fan-out)."""


def reader_step(reader: str, state: ReaderState | None, relations: Sequence[Relation],
                replies: Sequence[ConditionalReply], candidates: Sequence[RepostCandidate]) -> ReaderResult:
    """Apply one batch of messages to ``reader``'s state and write the entries that changed.

    Unlike the author step, this one updates ``state``'s containers in place and returns it: a reader
    is touched by every conditional reply and repost of everyone it follows, and copying its
    containers per message cost more than the decisions (docs/reposts-and-replies.md, costs). The
    stream decodes a fresh state per batch, and the caller keeps only the returned one.
    """
    if state is None:
        state = ReaderState({}, {}, {}, {}, 0)
    rel, new_replies, new_candidates, shown = state.rel, state.replies, state.candidates, state.shown
    rel_changed: set[str] = set()
    was_seen: dict[str, bool] = {}
    was_hidden: dict[str, bool] = {}
    for m in relations:
        old = rel.get(m.user)
        if old is None or m.ts > old[0]:
            if old is None or (old[1], old[2]) != (m.visible, m.hidden):
                rel_changed.add(m.user)
                was_seen.setdefault(m.user, old is not None and old[1])
                was_hidden.setdefault(m.user, old is not None and old[2])
            rel[m.user] = (m.ts, m.visible, m.hidden)  # type: ignore[index]
    touched: set[TweetKey] = set()
    for r in replies:
        k = (r.entry.author_id, r.entry.tweet_id)
        old_r = new_replies.get(k)
        if old_r is None or r.ts > old_r[0]:
            new_replies[k] = (r.ts, r.entry if r.present else None)  # type: ignore[index]
            touched.add(k)
    for c in candidates:
        k = (c.author_id, c.tweet_id)
        inner = new_candidates.get(k)
        old_c = None if inner is None else inner.get(c.reposter)
        if old_c is None or c.ts > old_c[0]:
            if inner is None:
                inner = new_candidates[k] = {}  # type: ignore[index]
            inner[c.reposter] = (c.ts, c.entry)  # type: ignore[index]
            touched.add(k)
    if rel_changed:  # a relation decides the tweets of that user, replies to it and its reposts
        for k, (_, e) in new_replies.items():
            if k[0] in rel_changed or (e is not None and e.in_reply_to_author_id in rel_changed):
                touched.add(k)
        for k, inner in new_candidates.items():
            if k[0] in rel_changed:
                touched.add(k)
                continue
            for p, (_, e) in inner.items():
                if p in rel_changed or (e is not None and e.in_reply_to_author_id in rel_changed):
                    touched.add(k)
                    break
    if not touched and not rel_changed:
        return ReaderResult(state, (), ())
    ts = state.clock + 1
    extras: list[ExtrasDelta] = []
    for k in sorted(touched):
        old, new = shown.get(k), _decide(reader, k, rel, new_replies, new_candidates)
        if old == new:
            continue
        if old is not None and (new is None or old.cursor != new.cursor):
            extras.append(ExtrasDelta("delete", reader, old, ts))
            old = None
        if new is not None:
            extras.append(ExtrasDelta("insert" if old is None else "update", reader, new, ts))
            shown[k] = new  # type: ignore[index]
        else:
            shown.pop(k, None)  # type: ignore[attr-defined]
    visible = [VisibleDelta("insert" if rel[u][1] else "delete", reader, u, ts)
               for u in sorted(rel_changed) if was_seen[u] != rel[u][1]]
    hidden = [HiddenDelta("insert" if rel[u][2] else "delete", reader, u, ts)
              for u in sorted(rel_changed) if was_hidden[u] != rel[u][2]]
    for k in touched:  # forget what no longer matters: withdrawn replies and candidates
        if k in new_replies and new_replies[k][1] is None:
            del new_replies[k]  # type: ignore[attr-defined]
        inner = new_candidates.get(k)
        if inner is not None and any(v[1] is None for v in inner.values()):
            for p in [p for p, v in inner.items() if v[1] is None]:
                del inner[p]  # type: ignore[attr-defined]
            if not inner:
                del new_candidates[k]  # type: ignore[attr-defined]
    emitted = bool(extras or visible or hidden)
    new_state = ReaderState(rel, new_replies, new_candidates, shown, ts if emitted else state.clock)
    return ReaderResult(new_state, tuple(extras), tuple(visible), tuple(hidden))


def _sees(rel: Mapping[str, tuple[int, bool, bool]], user: str | None) -> bool:
    v = rel.get(user) if user is not None else None
    return v is not None and v[1]


def _hidden(rel: Mapping[str, tuple[int, bool, bool]], user: str) -> bool:
    v = rel.get(user)
    return v is not None and v[2]


def _parent(entry: Entry | None) -> str | None:
    return None if entry is None else entry.in_reply_to_author_id


def _decide(reader: str, k: TweetKey, rel: Mapping[str, tuple[int, bool, bool]],
            replies: Mapping[TweetKey, tuple[int, Entry | None]],
            candidates: Mapping[TweetKey, Mapping[str, tuple[int, Entry | None]]]) -> Entry | None:
    """The ``home_extras`` entry of tweet ``k`` for ``reader``, or None (module docstring)."""
    author = k[0]
    reply = replies.get(k)
    if reply is not None and reply[1] is not None and _sees(rel, author) and _sees(rel, _parent(reply[1])):
        return reply[1]
    live = [(e.reposted_at, p, e) for p, (_, e) in candidates.get(k, _EMPTY).items()
            if e is not None and _sees(rel, p)]
    if not live or _hidden(rel, author):
        return None
    content = live[0][2]
    for _, _, e in live[1:]:  # the tweet's newest content among the candidates (they converge)
        if content_beats(_content(e), _content(content)):
            content = e
    parent = content.in_reply_to_author_id
    if _sees(rel, author) and (parent is None or parent in (author, reader) or _sees(rel, parent)):
        return None  # direct: at its own time, in the inbox (plain) or above (a conditional reply)
    at, reposter, e = min(live, key=lambda item: (item[0], item[1])) if len(live) > 1 else live[0]
    if e is content or e[:8] == content[:8]:
        return e  # the earliest candidate already holds the newest content (the usual case): no copy
    return content._replace(reposted_by=reposter, reposted_at=at, reposter_profile_version=e.reposter_profile_version)


def _content(e: Entry) -> tuple:
    base = (e.version, e.created_at, e.text, e.profile_version)
    return base if e.in_reply_to_tweet_id is None else base + (e.in_reply_to_tweet_id, e.in_reply_to_author_id)
