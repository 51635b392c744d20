"""A pull author's replies, decided at read (docs/reposts-and-replies.md, hybrid fan-out).

The stream decides for every reader which replies of a push author it sees (the per-reader stage writes
them to ``home_extras``); a pull author's tweets are fanned out to nobody, so a read decides: the
author's row that replies to X, X neither the author nor the reader, is shown only if the reader
sees X (``reader_visible``). Rows a reader is not shown make a pull author's slice short, so a read
goes on below them until it has its rows or the author's timeline ends.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Collection, Sequence

from feed_service.core.home_plan import deciding_user
from feed_service.core.per_reader.pull_reposts import ListRule
from feed_service.core.rules import list_admits, shown_in_inbox
from feed_service.core.rows import Cursor, Entry

#: Rows read at most per further read of one pull author whose replies were hidden (the reads
#: double from the page's size up to this).
MAX_FURTHER = 800


def has_replies(rows: Sequence[Entry]) -> bool:
    """Whether any row of ``rows`` is a reply (only those may need deciding)."""
    for e in rows:
        if e.in_reply_to_author_id is not None:
            return True
    return False


Sees = Callable[[Collection[str]], Awaitable[set[str]]]
"""Those of some users the reader sees."""
Further = Callable[[int, Cursor, int], Awaitable[list[Entry]]]
"""``(source index, cursor, limit)`` -> the source's next rows beyond ``cursor``, in the slice's order."""


Decide = Callable[[Sequence[list[Entry]]], Awaitable[Callable[[int, Entry], bool]]]
"""Given one round's rows (by source index), what is shown: ``(source index, row) -> shown``."""


async def read_past(slices: Sequence[list[Entry]], limit: int, decide: Decide, further: Further) -> list[list[Entry]]:
    """Each slice (newest first for a page, oldest first for a watch's catch-up) cut to its first
    ``limit`` rows that ``decide`` shows. A slice shorter than ``limit`` is its source's end; where
    rows not shown leave fewer than ``limit`` of a full slice, ``further`` reads on past its last row
    (twice as many rows each time, up to :data:`MAX_FURTHER`), and the new rows are decided in the
    next round. ``decide`` is called once per round with that round's rows (an empty list for a
    source with none), so it can look up what they need in one go."""
    out: list[list[Entry]] = [[] for _ in slices]
    pending = [(i, rows, limit) for i, rows in enumerate(slices)]
    while pending:
        by_source: list[list[Entry]] = [[] for _ in slices]
        for i, rows, _ in pending:
            by_source[i] = rows
        shows = await decide(by_source)
        more: list[tuple[int, Cursor, int]] = []
        for i, rows, asked in pending:
            kept = out[i]
            for e in rows:
                if shows(i, e):
                    kept.append(e)
                    if len(kept) >= limit:
                        break
            if len(kept) < limit and rows and len(rows) >= asked:
                more.append((i, rows[-1].cursor, min(max(2 * asked, limit), MAX_FURTHER)))
        if not more:
            break
        read = await asyncio.gather(*(further(i, cursor, n) for i, cursor, n in more))
        pending = [(i, rows, n) for (i, _, n), rows in zip(more, read)]
    return out


async def shown_slices(reader: str, slices: Sequence[list[Entry]], limit: int, sees: Sees,
                       further: Further) -> list[list[Entry]]:
    """Each pull author's slice cut to the first ``limit`` rows ``reader`` is shown
    (:func:`read_past`); ``sees`` is asked once per round for every user not decided yet."""
    known: dict[str, bool] = {}

    async def decide(rounds: Sequence[list[Entry]]) -> Callable[[int, Entry], bool]:
        undecided = {u for rows in rounds for e in rows
                     if (u := deciding_user(e, reader)) is not None and u not in known}
        if undecided:
            seen = await sees(undecided)
            known.update((u, u in seen) for u in undecided)

        def shows(_: int, e: Entry) -> bool:
            u = deciding_user(e, reader)
            return u is None or known[u]
        return shows

    return await read_past(slices, limit, decide, further)


async def list_shown_slices(rule: ListRule, slices: Sequence[list[Entry]], limit: int, sees: Sees,
                            owner_sees: Sees, further: Further) -> list[list[Entry]]:
    """Each pull author's slice of a list's reader cut to the first ``limit`` rows the list's ``rule``
    admits (:func:`~feed_service.core.rules.list_admits`: a reply to a third user by the list's
    policy, ``sees`` the users the list's reader sees, ``owner_sees`` those its owner sees), reading
    on past the others (:func:`read_past`). Each round asks both, concurrently, for the replies'
    parents not decided yet (docs/lists.md#in-the-engine)."""
    seen: set[str] = set()
    owner_seen: set[str] = set()
    asked: set[str] = set()

    async def decide(rounds: Sequence[list[Entry]]) -> Callable[[int, Entry], bool]:
        undecided = {u for rows in rounds for e in rows
                     if (u := deciding_user(e, rule.owner)) is not None and u not in asked}
        if undecided:
            got, owner_got = await asyncio.gather(sees(undecided), owner_sees(undecided))
            seen.update(got & undecided)
            owner_seen.update(owner_got & undecided)
            asked.update(undecided)

        def shows(_: int, e: Entry) -> bool:
            return list_admits(e.author_id, e.in_reply_to_author_id, rule.owner, rule.policy, seen, owner_seen)
        return shows

    return await read_past(slices, limit, decide, further)


async def inbox_slices(reader: str, slices: Sequence[list[Entry]], limit: int,
                       further: Further) -> list[list[Entry]]:
    """Each push author's slice cut to the first ``limit`` rows ``reader``'s inbox would hold
    (:func:`~feed_service.core.rules.shown_in_inbox`), reading on past the replies to third
    users (:func:`read_past`): the inbox of a reader whose inbox is not kept (docs/activity.md). Those
    replies reach the reader through its ``home_extras``; no lookup decides anything here."""
    async def decide(_: Sequence[list[Entry]]) -> Callable[[int, Entry], bool]:
        return lambda _i, e: shown_in_inbox(e.author_id, e.in_reply_to_author_id, reader)

    return await read_past(slices, limit, decide, further)


def first_shown(rows: Sequence[Entry], reader: str, known: dict[str, bool] | None, limit: int) -> list[Entry] | None:
    """The first ``limit`` rows of ``rows`` shown to ``reader`` by the memberships ``known``, all of
    them if fewer; None when a row needs a user ``known`` does not hold."""
    out: list[Entry] = []
    for e in rows:
        u = deciding_user(e, reader)
        if u is not None:
            seen = known.get(u) if known else None
            if seen is None:
                return None
            if not seen:
                continue
        out.append(e)
        if len(out) >= limit:
            break
    return out
