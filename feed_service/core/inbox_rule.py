"""Which of a push author's tweets a reader's inbox holds, and who the reader's push authors are.

An author key writes a tweet to the inbox of each follower that sees it (docs/reposts-and-replies.md,
"The chosen design"): a tweet that is no reply, a self-reply (a thread) or a reply to that very
reader. A reply to a third user reaches the reader through its ``home_extras``, decided by the reader
step. The push authors a reader sees are the users it sees (``reader_visible``) less its pull authors
(merged at read: docs/fan-out.md). A read of a reader whose inbox is not kept computes the inbox rows
from the author timelines with these two rules (docs/activity.md), the refill of a trimmed inbox asks
the same authors for the same rows (docs/trimming.md#refill).
"""

from __future__ import annotations

from typing import Collection, Iterable


def shown_in_inbox(author_id: str, in_reply_to_author_id: str | None, reader: str) -> bool:
    """Whether ``reader``'s inbox holds a tweet of ``author_id`` replying to ``in_reply_to_author_id``
    (None: no reply): no reply, a self-reply or a reply to the reader.

    >>> shown_in_inbox("ann", None, "bob"), shown_in_inbox("ann", "ann", "bob"), shown_in_inbox("ann", "bob", "bob")
    (True, True, True)
    >>> shown_in_inbox("ann", "cat", "bob")
    False
    """
    return in_reply_to_author_id is None or in_reply_to_author_id == author_id or in_reply_to_author_id == reader


def push_authors(visible: Iterable[str], pull: Collection[str]) -> list[str]:
    """The push authors a reader sees, sorted: the users it sees less the pull authors it merges in.

    >>> push_authors(["cat", "ann", "star"], {"star"})
    ['ann', 'cat']
    """
    return sorted(a for a in set(visible) if a not in pull)
