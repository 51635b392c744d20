"""The read side of the hybrid fan-out: one timeline page from an inbox and the pull authors' timelines.

A push author's tweets are in its followers' inboxes; a pull author's only in its own author
timeline (docs/fan-out.md). A reader's page is the newest entries of the union, so every source is
read from the same cursor, newest first, and merged by the timeline order ``(created_at, tweet_id,
author_id)`` descending. The server, :class:`~feed_service.core.view.TimelineView` (behind
``feedctl materialize``) and the tests use this one function, so the view they show is the same.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Sequence

from feed_service.core.rows import Cursor, Entry


def timeline_order(entry: Entry) -> tuple[int, str, str]:
    """Timeline order, applied descending: newest first by where the entry sits (``Entry.at``: the
    repost time of a repost entry, else created_at), then tweet_id, then author_id."""
    return (entry.at, entry.tweet_id, entry.author_id)


def older_than(entry: Entry, cursor: Cursor | None) -> bool:
    """Whether ``entry`` comes after ``cursor`` in a newest-first timeline (None: the head)."""
    return cursor is None or (entry.at, entry.tweet_id) < cursor


def merge_oldest(sources: Iterable[Sequence[Entry]], limit: int) -> list[Entry]:
    """Like :func:`merge_newest` for oldest-first ``sources`` (what a watch sends next).

    >>> a = [Entry("t1", "ann", 10, 1, "", 1), Entry("t3", "ann", 30, 1, "", 1)]
    >>> [e.tweet_id for e in merge_oldest([a, [Entry("t2", "bob", 20, 1, "", 1)]], 2)]
    ['t1', 't2']
    """
    return _merged(heapq.merge(*sources, key=timeline_order), limit)


def merge_newest(sources: Iterable[Sequence[Entry]], limit: int) -> list[Entry]:
    """The ``limit`` newest entries of newest-first ``sources``, each tweet (author, id) once.

    A tweet is in one source once the stream has caught up; while an author crosses the pull
    threshold it can briefly be in two, and is shown once.

    >>> a = [Entry("t3", "ann", 30, 1, "", 1), Entry("t1", "ann", 10, 1, "", 1)]
    >>> b = [Entry("t2", "bob", 20, 1, "", 1), Entry("t1", "ann", 10, 1, "", 1)]
    >>> [e.tweet_id for e in merge_newest([a, b], 5)]
    ['t3', 't2', 't1']
    """
    return _merged(heapq.merge(*sources, key=timeline_order, reverse=True), limit)


def _merged(entries: Iterable[Entry], limit: int) -> list[Entry]:
    out: list[Entry] = []
    seen: set[tuple[str, str]] = set()
    for entry in entries:
        identity = (entry.author_id, entry.tweet_id)
        if identity in seen:
            continue
        seen.add(identity)
        out.append(entry)
        if len(out) >= limit:
            break
    return out
