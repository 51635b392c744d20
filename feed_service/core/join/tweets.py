"""Tweets: the batch's upserts and deletes against the author's retained, cold and deleted tweets.

Retained = the author's newest ``inbox_cap`` live tweets by (created_at, tweet_id) of each class
(plain tweets; replies to each other user), the only ones that can be in any follower's timeline; a tweet pushed out of them goes *cold* (its version and
digest are kept so that a late older upsert cannot bring stale content back), a delete leaves a
tombstone (docs/join-engine.md, the state and its bounds).
"""

from __future__ import annotations

from itertools import islice
from typing import Iterator, Mapping, NamedTuple, TypeAlias

from feed_service.core.events import TweetContent, content_beats, content_digest, no_replies, parent_author_of
from feed_service.core.rules import reply_class
from feed_service.core.state import AuthorState, ColdTweet


_new = tuple.__new__  # builds the records: docs/join-engine.md, named records on the hot path


class TweetsDiff(NamedTuple):
    """The author's tweets before and after one batch, and what the batch did to them."""

    before: Mapping[str, TweetContent]
    """The retained tweets before the batch (``state.tweets``)."""
    after: Mapping[str, TweetContent]
    """The retained tweets after it; ``before`` itself when the batch changed none."""
    cold: Mapping[str, ColdTweet]
    deleted: Mapping[str, int]
    changed: dict[str, TweetContent]
    """The upserts that beat what the state knew (each one a new row of the tweets table)."""
    removed: list[str]
    """Retained tweets the batch deleted."""
    evicted: list[str]
    """Retained tweets pushed out of the newest ``inbox_cap`` (now cold)."""
    new_deletes: set[str]
    """Tombstones new in this batch."""


TouchedTweet: TypeAlias = tuple[str, "TweetContent | None", "TweetContent | None"]
"""(tweet_id, retained content before, after) of a tweet the batch changed (None: not retained).
A plain tuple, built in :func:`touched` alone and unpacked by its readers: a named tuple cost
~0.25 us more per touched tweet (docs/join-engine.md, named records on the hot path)."""


def apply_tweets(state: AuthorState, upserts: dict[str, TweetContent], deletes: set[str],
                 inbox_cap: int, since: int) -> TweetsDiff:
    """Merge the batch's tweets: keep the newest ``inbox_cap`` live ones, remember the rest as cold
    (stamped ``since``, the key's watermark)."""
    before, cold, deleted = state.tweets, state.cold, state.deleted
    new_deletes = {tid for tid in deletes if tid not in deleted} if deletes else set()
    changed: dict[str, TweetContent] = {}
    for tid, c in upserts.items():
        if tid in deletes or tid in deleted:
            continue
        old = before.get(tid)
        if old is not None:
            if not content_beats(c, old):
                continue
        else:
            was_cold = cold.get(tid)
            if was_cold is not None and not _beats_cold(c, was_cold):
                continue
        changed[tid] = c
    after = before
    removed: list[str] = []
    evicted: list[str] = []
    if changed or new_deletes:
        removed = [tid for tid in new_deletes if tid in before]
        after = dict(before)
        for tid in removed:
            del after[tid]
        if changed:
            after = _merge_ordered(after, changed)
        excess = len(after) - inbox_cap
        if excess > 0:
            if no_replies(after.values()):  # one class
                evicted = list(islice(after, excess))  # the oldest: ``after`` is in ascending order
            else:
                evicted = _evicted_by_class(state.key, after, inbox_cap)
        leave_cold = [tid for tid in changed if tid in cold] + [tid for tid in new_deletes if tid in cold]
        if evicted or leave_cold:
            cold = dict(cold)
            for tid in leave_cold:
                del cold[tid]
            for tid in evicted:
                c = after.pop(tid)
                cold[tid] = (c[0], content_digest(c), since)
        if new_deletes:
            deleted = dict(deleted)
            for tid in sorted(new_deletes):
                deleted[tid] = since
    return _new(TweetsDiff, (before, after, cold, deleted, changed, removed, evicted, new_deletes))


def _evicted_by_class(key: str, tweets: Mapping[str, TweetContent], inbox_cap: int) -> list[str]:
    """The tweets beyond the newest ``inbox_cap`` of their class, oldest first. A class is the
    author's plain tweets (no reply, or a reply to the author itself), or its replies to one other
    user: a reader sees the plain ones and the replies to the users it sees, and the newest
    ``inbox_cap`` of such a union are among the newest ``inbox_cap`` of each class
    (docs/reposts-and-replies.md, retention)."""
    counts: dict[str | None, int] = {}
    out: list[str] = []
    for tid, c in reversed(tweets.items()):
        cls = reply_class(key, parent_author_of(c))
        n = counts.get(cls, 0)
        if n >= inbox_cap:
            out.append(tid)
        else:
            counts[cls] = n + 1
    out.reverse()
    return out


def touched(tweets: TweetsDiff) -> Iterator[TouchedTweet]:
    """Every tweet whose retained content the batch changed, in id order (plain tuples: see
    :data:`TouchedTweet`)."""
    before, after = tweets.before, tweets.after
    for tid in sorted({*tweets.changed, *tweets.removed, *tweets.evicted}):
        old, new = before.get(tid), after.get(tid)
        if old != new:
            yield tid, old, new


def _beats_cold(c: TweetContent, cold: ColdTweet) -> bool:
    if c[0] != cold[0]:
        return c[0] > cold[0]
    return content_digest(c) > cold[1]


def _order(item: tuple[str, TweetContent]) -> tuple[int, str]:
    return (item[1][1], item[0])


def _merge_ordered(r: dict[str, TweetContent], changed: dict[str, TweetContent]) -> dict[str, TweetContent]:
    """Apply ``changed`` to ``r`` (owned), keeping ascending (created_at, tweet_id) iteration order.

    The usual case, new tweets newer than every retained one, appends in place; anything else
    (an older tweet arriving late, an edit moving created_at) re-sorts once.
    """
    last = next(reversed(r.items()), None)
    floor = _order(last) if last is not None else None
    in_order = True
    for item in sorted(changed.items(), key=_order):
        tid, c = item
        old = r.get(tid)
        if old is not None and old[1] == c[1]:
            r[tid] = c  # same position
        elif in_order and old is None and (floor is None or _order(item) > floor):
            r[tid] = c
            floor = _order(item)
        else:
            in_order = False
            r[tid] = c
    return r if in_order else dict(sorted(r.items(), key=_order))
