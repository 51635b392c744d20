"""Deltas: the step's output rows, the diff of (retained tweets × inbox audience) before and after.

Touched tweets go to the inbox holders who stayed (an update) or to all holders before / after (a
delete / an insert); holders who came or left get every retained tweet after / before. The
author's own timeline and the tweets table get the touched tweets alone.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterator, Mapping, NamedTuple, Sequence

from feed_service.core.events import TweetContent, content_entry
from feed_service.core.join.readers import Audience
from feed_service.core.join.tweets import TouchedTweet, TweetsDiff, touched
from feed_service.core.rows import AuthorTimelineDelta, DeltaOp, Entry, TimelineDelta, TweetChange

_NONE: tuple = ()
_new = tuple.__new__
"""Builds the rows (named tuples) without their generated constructor: every step builds several, a
follow one per retained tweet (docs/join-engine.md, named records on the hot path)"""
_NO_ENTRIES: Mapping[str, Entry] = MappingProxyType({})


class Outputs(NamedTuple):
    """The rows one batch emits for its tweets."""

    deltas: Sequence[TimelineDelta]
    author_timeline: Sequence[AuthorTimelineDelta]
    tweets: Sequence[TweetChange]


def outputs(key: str, tweets: TweetsDiff, inbox: Audience) -> Outputs:
    """The timeline, author-timeline and tweets-table rows of one batch of ``key``."""
    touched_tweets = list(touched(tweets)) if tweets.after is not tweets.before else _NONE
    if touched_tweets or inbox.added or inbox.dropped or tweets.changed:
        deltas, entries = timeline_deltas(key, tweets, touched_tweets, inbox)
    else:
        deltas, entries = _NONE, _NO_ENTRIES
    author_timeline = author_timeline_deltas(key, touched_tweets, entries) if touched_tweets else _NONE
    tweet_rows = [_new(TweetChange, (tid, key, entries[tid])) for tid in sorted(tweets.changed)]
    tweet_rows += [_new(TweetChange, (tid, key, None)) for tid in sorted(tweets.new_deletes)]
    return _new(Outputs, (deltas, author_timeline, tweet_rows))




_entry = content_entry  # a stored content's entry: the layout is events.TweetFields'


def _delta(op: DeltaOp, entry: Entry, timeline_ids: tuple[str, ...]) -> TimelineDelta:
    return _new(TimelineDelta, (op, entry, timeline_ids))


def _newest_first(tweets: Mapping[str, TweetContent]) -> Iterator[tuple[str, TweetContent]]:
    return reversed(tweets.items())  # type: ignore[call-overload]


def author_timeline_deltas(key: str, touched_tweets: Sequence[TouchedTweet], entries: Mapping[str, Entry]
                           ) -> list[AuthorTimelineDelta]:
    """Changes of the author's own timeline: its retained tweets, before against after."""
    out: list[AuthorTimelineDelta] = []
    for tid, old, new in touched_tweets:
        if old is not None and new is not None and old[1] == new[1]:
            out.append(_new(AuthorTimelineDelta, ("update", entries[tid])))
            continue
        if old is not None:
            out.append(_new(AuthorTimelineDelta, ("delete", _entry(tid, key, old))))
        if new is not None:
            out.append(_new(AuthorTimelineDelta, ("insert", entries[tid])))
    return out


def timeline_deltas(key: str, tweets: TweetsDiff, touched_tweets: Sequence[TouchedTweet], inbox: Audience
                    ) -> tuple[list[TimelineDelta], dict[str, Entry]]:
    """Touched tweets x inbox holders (those who stayed, or all when the row set changes), then
    added/dropped holders x retained tweets; also the entries of the changed tweets."""
    deltas: list[TimelineDelta] = []
    whole: set[str] = set()  # tweets whose rows were fully handled for every holder
    before, after = tweets.before, tweets.after
    holders_before, holders_after, stayed, added, dropped = inbox.before, inbox.after, inbox.stayed, inbox.added, inbox.dropped
    entries = {tid: _entry(tid, key, c) for tid, c in tweets.changed.items()}
    if after is not before:
        for tid, old, new in touched_tweets:
            if old is not None and new is not None and old[1] == new[1]:
                if stayed:
                    deltas.append(_delta("update", entries[tid], stayed))
                continue
            whole.add(tid)
            if old is not None and holders_before:
                deltas.append(_delta("delete", _entry(tid, key, old), holders_before))
            if new is not None and holders_after:
                deltas.append(_delta("insert", entries[tid], holders_after))
    if added:
        audience_added = tuple(added)
        for tid, c in _newest_first(after):
            if tid not in whole:
                deltas.append(_delta("insert", entries.get(tid) or _entry(tid, key, c), audience_added))
    if dropped:
        audience_dropped = tuple(dropped)
        for tid, c in _newest_first(before):
            if tid not in whole:
                deltas.append(_delta("delete", _entry(tid, key, c), audience_dropped))
    return deltas, entries
