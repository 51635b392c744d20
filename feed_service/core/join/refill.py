"""Refill: an author key writes a reader's inbox rows again below the inbox's cut line.

A trimmed inbox that removals left short is refilled by its push authors (docs/trimming.md#refill):
each answers a :class:`~feed_service.core.events.RefillRequest` with the newest ``need`` of its
retained tweets below the line that the reader's inbox holds (no reply, a self-reply or a reply to
that reader), as ``update`` rows to that one reader: the engine's model is that every holder holds
every retained tweet, so these rows are written again, at this key's clock, which beats the
tombstones the trims left (each at the row's write time, at most this clock) and loses to any later
change of this key. Only a reader who is an inbox holder after the batch gets them; a new holder
gets every retained tweet anyway, and a tweet the batch touched is written by its own delta.
"""

from __future__ import annotations

from typing import Collection, Mapping

from feed_service.core.events import TweetContent, fields_of
from feed_service.core.rules import shown_in_inbox
from feed_service.core.join.deltas import _delta, _entry, _newest_first
from feed_service.core.join.readers import Audience
from feed_service.core.rows import TimelineDelta


def refill_deltas(key: str, requests: Mapping[str, set[tuple[int, str, int]]], retained: Mapping[str, TweetContent],
                  inbox: Audience, touched: Collection[str]) -> list[TimelineDelta]:
    """The ``update`` rows answering ``requests`` (reader -> its (below_created_at, below_tweet_id,
    need) requests), from the ``retained`` tweets after the batch, to readers among ``inbox.after``
    (not ``inbox.added``), leaving out the ``touched`` tweets."""
    holders = set(inbox.after).difference(inbox.added)
    out: list[TimelineDelta] = []
    for reader in sorted(requests):
        if reader not in holders:
            continue
        rows: dict[str, TweetContent] = {}
        for below_at, below_tid, need in sorted(requests[reader]):
            taken = 0
            for tid, c in _newest_first(retained):
                if taken >= need:
                    break
                f = fields_of(c)
                at = (f.created_at, tid)
                if at > (below_at, below_tid) or not shown_in_inbox(key, f.in_reply_to_author_id, reader):
                    continue
                # A row on the line itself is written again but not counted: the line names a row by
                # (created_at, tweet_id) only, and the row it names may be this author's (present,
                # counted by the driver among the rows at or above the line) or, where two authors
                # share a tweet id, another's: counting it would leave the need-th row below unwritten.
                if at < (below_at, below_tid):
                    taken += 1
                if tid not in touched:
                    rows[tid] = c
        audience = (reader,)
        out.extend(_delta("update", _entry(tid, key, c), audience)
                   for tid, c in sorted(rows.items(), key=lambda item: (fields_of(item[1]).created_at, item[0]), reverse=True))
    return out

