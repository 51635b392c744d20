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

import asyncio
from typing import Awaitable, Callable, Sequence

from feed_service.core.per_reader.pull_reposts import (
    Lookups,
    RepostFacts,
    lookups,
    shows_extras_row,
    shows_pulled_row,
)
from feed_service.core.rows import Cursor, Entry
from feed_service.server.pull_replies import MAX_FURTHER

Facts = Callable[[Lookups], Awaitable[RepostFacts]]
"""The facts a read looks up for some rows (:func:`~feed_service.core.per_reader.pull_reposts.lookups`)."""
Further = Callable[[int, Cursor, int], Awaitable[list[Entry]]]
"""``(source index, cursor, limit)`` -> the source's next rows beyond ``cursor``, in the slice's order:
source 0 is the reader's ``home_extras``, source i > 0 the i-th pull reposter's ``user_reposts``."""

NO_FACTS = RepostFacts({}, {}, frozenset(), frozenset())


async def decided_slices(reader: str, extras: list[Entry], reposted: Sequence[list[Entry]], limit: int,
                         facts: Facts, further: Further) -> tuple[list[Entry], list[list[Entry]]]:
    """The extras slice and each pull reposter's slice (newest first for a page, oldest first for a
    watch's catch-up) cut to the first ``limit`` rows ``reader`` is shown. A slice shorter than
    ``limit`` is its table's end; where rows not shown leave fewer than ``limit`` of a full slice,
    ``further`` reads on past its last row."""
    slices = [extras, *reposted]
    out: list[list[Entry]] = [[] for _ in slices]
    pending = [(i, rows, limit) for i, rows in enumerate(slices)]
    while pending:
        extras_rows = [e for i, rows, _ in pending if i == 0 for e in rows]
        pulled_rows = [e for i, rows, _ in pending if i > 0 for e in rows]
        need = lookups(reader, extras_rows, pulled_rows)
        known = await facts(need) if need.pulled or need.pushed or need.users else NO_FACTS
        more: list[tuple[int, Cursor, int]] = []
        for i, rows, asked in pending:
            kept = out[i]
            for e in rows:
                if shows_extras_row(e, known) if i == 0 else shows_pulled_row(e, reader, known):
                    kept.append(e)
                    if len(kept) >= limit:
                        break
            if len(kept) < limit and rows and len(rows) >= asked:
                more.append((i, rows[-1].cursor, min(max(2 * asked, limit), MAX_FURTHER)))
        if not more:
            break
        read = await asyncio.gather(*(further(i, cursor, n) for i, cursor, n in more))
        pending = [(i, rows, n) for (i, _, n), rows in zip(more, read)]
    return out[0], out[1:]
