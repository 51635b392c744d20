"""The repost rows of a home read whose reader merges pull reposters in (docs/reposts-and-replies.md,
hybrid fan-out).

A pull reposter's reposts reach no reader's ``home_extras``; a read merges its ``user_reposts`` in and
decides, with the reader's own repost entries, which row of each tweet shows
(:mod:`feed_service.core.per_reader.pull_reposts`). The decisions need facts about the rows' own
tweets and users only, so a read looks them up for the rows it holds, four lookups at most, made
together. Rows a reader is not shown leave a slice short; a read then goes on below them (above,
for a watch's catch-up), asking for twice as many rows each time, as :mod:`.pull_replies` does for a
pull author's replies.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Sequence

from feed_service.core.per_reader.pull_reposts import (
    ListRule,
    Lookups,
    RepostFacts,
    lookups,
    shows_extras_row,
    shows_pulled_row,
)
from feed_service.core.rows import Cursor, Entry
from feed_service.server.pull_replies import read_past

Facts = Callable[[Lookups], Awaitable[RepostFacts]]
"""The facts a read looks up for some rows (:func:`~feed_service.core.per_reader.pull_reposts.lookups`)."""
Further = Callable[[int, Cursor, int], Awaitable[list[Entry]]]
"""``(source index, cursor, limit)`` -> the source's next rows beyond ``cursor``, in the slice's order:
source 0 is the reader's ``home_extras``, source i > 0 the i-th pull reposter's ``user_reposts``."""

NO_FACTS = RepostFacts({}, {}, frozenset(), frozenset())


async def decided_slices(reader: str, extras: list[Entry], reposters: Sequence[str], reposted: Sequence[list[Entry]],
                         limit: int, facts: Facts, further: Further,
                         rule: ListRule | None = None) -> tuple[list[Entry], list[list[Entry]]]:
    """The extras slice and each pull reposter's slice (``reposted``, of ``reposters`` in order;
    newest first for a page, oldest first for a watch's catch-up) cut to the first ``limit`` rows
    ``reader`` is shown, reading on past the rows it is not
    (:func:`~feed_service.server.pull_replies.read_past`); ``rule``: a list's reader's
    (docs/lists.md#in-the-engine)."""
    async def decide(rounds: Sequence[list[Entry]]) -> Callable[[int, Entry], bool]:
        need = lookups(reader, rounds[0], [e for rows in rounds[1:] for e in rows], reposters)
        known = await facts(need) if need.pulled or need.pushed or need.users else NO_FACTS
        return lambda i, e: shows_extras_row(e, known) if i == 0 else shows_pulled_row(e, reader, known, rule)

    out = await read_past([extras, *reposted], limit, decide, further)
    return out[0], out[1:]
