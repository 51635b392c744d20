"""The virtual readers of lists: a list's timeline is the home timeline of a reader id of its own.

``list_reader(L)`` is ``"\\u001flist:" + L``: U+001F (a control character, the "unit separator")
then ``list:`` then the list id. User ids live in the same column (``reader_id``, ``timeline_id``),
and the envelope's ``id`` rule rejects an id starting with U+001F in every kind producers write
(``reserved_id``), so no user can take a list's reader id (docs/lists.md#in-the-engine).
"""

from __future__ import annotations

from feed_service.core.event_kinds import RESERVED_ID_PREFIX

LIST_READER_PREFIX = RESERVED_ID_PREFIX + "list:"
"""What every list's reader id starts with, and no id a producer writes does (``reserved_id``)."""


def list_reader(list_id: str) -> str:
    """The reader id of the list ``list_id``'s timeline.

    >>> list_reader("L1")
    '\\x1flist:L1'
    """
    return LIST_READER_PREFIX + list_id


def list_of(reader_id: str) -> str | None:
    """The list whose reader ``reader_id`` is, or None for a user's id.

    >>> list_of(list_reader("L1")), list_of("ann"), list_of("list:L1")
    ('L1', None, None)
    """
    return reader_id[len(LIST_READER_PREFIX):] if reader_id.startswith(LIST_READER_PREFIX) else None
