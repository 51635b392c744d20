"""Paged reads (GetHomeTimeline, GetUserTimeline): page sizes, where a page starts, what it serves
and the token of the next one (docs/api.md#pagination).

A page is read with one row beyond its size: the extra row says whether a next page exists, so the
last page never ends in an empty one. Paging stops at the view's inbox cap (the entries a token has
served count towards it). Tokens are :mod:`.page_token`'s, bound to the timeline and the call.
"""

from __future__ import annotations

from typing import Any

import grpc

from feed_service.core.rows import Cursor, Entry
from feed_service.errors import PageTokenError
from feed_service.server.calls import RpcFailure
from feed_service.server.hydration import EntryHydrator, profile_keys
from feed_service.server.page_token import PageCursor, PageTokenCodec
from feed_service.store.ports import TimelineStore

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 200


def page_size(requested: int) -> int:
    """The page size of a request (0 = the default); INVALID_ARGUMENT outside 1..MAX_PAGE_SIZE."""
    size = requested or DEFAULT_PAGE_SIZE
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                         f"page_size must be between 1 and {MAX_PAGE_SIZE} (0 = {DEFAULT_PAGE_SIZE}), got {requested}")
    return size


class Pager:
    """Pages of one server: its page-token codec, its inbox cap and its entry hydration."""

    def __init__(self, tokens: PageTokenCodec, hydrator: EntryHydrator, inbox_cap: int) -> None:
        self.tokens = tokens
        self.hydrator = hydrator
        self.inbox_cap = inbox_cap

    def start(self, token: str, timeline_id: str, kind: int, size: int) -> tuple[Cursor | None, int, int]:
        """(cursor, entries served so far, rows to serve now) of a paged call; the cap bounds the last."""
        before, served = None, 0
        if token:
            try:
                cursor = self.tokens.decode(token, timeline_id=timeline_id, kind=kind)
            except PageTokenError as exc:
                raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
            before, served = cursor.position, cursor.served
        return before, served, min(size, self.inbox_cap - served)

    def hydrated(self, rows: list[Entry]) -> bool:
        """Whether every entry of ``rows`` has its profile version cached: their response is then
        final (profile versions never change), so it may be kept encoded."""
        holds = self.hydrator.cache.holds
        return all(holds(key) for key in profile_keys(rows))

    async def page(self, store: TimelineStore, timeline_id: str, kind: int, rows: list[Entry], limit: int,
                   served: int, budget: float) -> tuple[list[dict[str, Any]], str]:
        """The hydrated entries of a page read with one row beyond ``limit``, and the next page's
        token ("" at the end or at the inbox cap)."""
        more = len(rows) > limit
        rows = rows[:limit]
        entries = await self.hydrator.entries(store, rows, budget) if rows else []
        if not (more and served + len(rows) < self.inbox_cap):
            return entries, ""
        return entries, self.tokens.encode(PageCursor(timeline_id, rows[-1].cursor, served + len(entries), kind))
