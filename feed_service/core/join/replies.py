"""Phase: the inbox rows of replies, by the reply rule (docs/reposts-and-replies.md, "The chosen design").

The deltas phase (:mod:`.deltas`) pairs each touched tweet with the key's inbox holders. A holder R
has a tweet's inbox row while the tweet shows in R's inbox (:func:`~feed_service.core.rules.shown_in_inbox`:
no reply, a thread, or a reply to R); a reply to a third user reaches its other readers through
the per-reader stage's ``home_extras`` (:mod:`feed_service.core.per_reader`). This phase narrows the
deltas of replies to those holders; an update compares the rule before and after the batch (an
edit may change a tweet's parent). A batch without replies passes through untouched.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from feed_service.core.events import TweetContent, content_entry, parent_author_of
from feed_service.core.rows import Entry, TimelineDelta
from feed_service.core.rules import reply_class, shown_in_inbox


def inbox_rows(key: str, before: Mapping[str, TweetContent], deltas: Sequence[TimelineDelta]) -> list[TimelineDelta]:
    """``deltas`` (the key's inbox deltas, ``before``: its retained tweets before the batch) with
    each reply's row kept to the holders whose inbox shows it, before and after the batch.

    >>> from feed_service.core.rows import Entry
    >>> reply = Entry("t2", "ann", 5, 1, "re", 1, "t9", "cat")
    >>> [(d.op, d.timeline_ids) for d in inbox_rows("ann", {}, [TimelineDelta("insert", reply, ("bob", "cat"))])]
    [('insert', ('cat',))]
    """
    out: list[TimelineDelta] = []
    for delta in deltas:
        op, entry, ids = delta
        new_parent = entry.in_reply_to_author_id
        old_entry = entry
        old_parent = new_parent
        if op == "update":
            old_content = before.get(entry.tweet_id)
            old_parent = parent_author_of(old_content) if old_content is not None else None
            if old_content is not None:
                old_entry = content_entry(entry.tweet_id, key, old_content)
        if reply_class(key, old_parent) is None and reply_class(key, new_parent) is None:
            out.append(delta)
            continue
        rows: dict[tuple[str, Entry], list[str]] = {}
        for reader in ids:
            had = op != "insert" and shown_in_inbox(key, old_parent, reader)
            has = op != "delete" and shown_in_inbox(key, new_parent, reader)
            row_op = "update" if had and has else "delete" if had else "insert" if has else None
            if row_op is not None:
                rows.setdefault((row_op, old_entry if row_op == "delete" else entry), []).append(reader)
        out.extend(TimelineDelta(row_op, row_entry, tuple(readers)) for (row_op, row_entry), readers in rows.items())  # type: ignore[arg-type]
    return out
