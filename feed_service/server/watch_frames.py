"""The bytes of pushed WatchHomeTimeline messages: a change's entries hydrated and encoded once for
every watcher it reaches; per watcher only the resume token (docs/api.md#watch).

A protobuf message's encoding is the concatenation of its fields' encodings, and the generated code
writes them by field number: ``entries`` (1), ``resume_token`` (2), ``changed`` (3),
``removed_tweet_ids`` (4). So a watcher's message is the shared encoding of its entries, then the
field of its own token, then the shared encoding of its changed and removed parts: byte for byte
what ``WatchHomeTimelineResponse(...).SerializeToString()`` writes, framed without building a
message per watcher. The response serializer (:mod:`.registration`) sends those bytes as they are.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple, TypeAlias

from feed_service.api import timeline_pb2 as pb
from feed_service.core.rows import Entry
from feed_service.server.hydration import EntryHydrator
from feed_service.store.ports import TimelineStore

#: The key of ``resume_token`` (length-delimited, wire type 2).
_TOKEN_KEY = bytes([pb.WatchHomeTimelineResponse.RESUME_TOKEN_FIELD_NUMBER << 3 | 2])


#: What one message says apart from its token: its new entries (oldest first), changed entries and
#: removed tweet ids. Equal contents have equal encodings. A plain tuple: one is made per watcher.
Content: TypeAlias = tuple[tuple[Entry, ...], tuple[Entry, ...], tuple[str, ...]]


class Parts(NamedTuple):
    """A content's encoding: the fields before the resume token's, and those after it."""

    head: bytes
    tail: bytes

    def frame(self, token_field: bytes) -> bytes:
        """The message with the token field of :func:`token_field` between the parts."""
        return self.head + token_field + self.tail


def token_field(token: bytes) -> bytes:
    """``resume_token`` (ASCII) as its encoded field: key, length varint, the token (nothing for an
    empty token: proto3 writes no default value)."""
    n = len(token)
    if not n:
        return b""
    return _TOKEN_KEY + (bytes((n,)) if n < 0x80 else _varint(n)) + token


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


async def encode(hydrator: EntryHydrator, store: TimelineStore, content: Content, budget: float) -> Parts:
    """``content`` hydrated (display names through the profile cache) and encoded."""
    new, changed, removed = content
    rows = [*new, *changed]
    hydrated = await hydrator.entries(store, rows, budget) if rows else []
    head = pb.WatchHomeTimelineResponse(entries=hydrated[:len(new)]).SerializeToString()
    tail = pb.WatchHomeTimelineResponse(changed=hydrated[len(new):], removed_tweet_ids=removed).SerializeToString()
    return Parts(head, tail)


class SharedEncodings:
    """Parts by content, shared by the watchers one delivery of the hub wakes (``delivery``:
    :attr:`.watch_hub.WatchHub.deliveries`), so a change reaching many watchers is hydrated and
    encoded once. A new delivery starts afresh: display names can change between deliveries (a
    profile version arrives), and the memo never holds more than what one batch made.

    When the profiles are cached the first watcher encodes without yielding to the loop; when they
    must be read, the watchers of the same content wait for that one read and share its outcome,
    a failure too (each would have read, and failed, on its own). If the reading watcher goes away
    (its call cancelled), one of the waiting ones reads instead."""

    def __init__(self, hydrator: EntryHydrator) -> None:
        self.hydrator = hydrator
        self._delivery = -1
        self._memo: dict[Content, Parts | asyncio.Future] = {}

    def cached(self, content: Content, delivery: int) -> Parts | None:
        """The parts of ``content`` if a watcher of this delivery encoded them already (no await)."""
        if delivery != self._delivery:
            self._delivery, self._memo = delivery, {}
        known = self._memo.get(content)
        return known if type(known) is Parts else None

    async def parts(self, store: TimelineStore, content: Content, budget: float, delivery: int) -> Parts:
        """The parts of ``content``: from the memo, else encoded here (reading profiles if need be)."""
        if delivery != self._delivery:
            self._delivery, self._memo = delivery, {}
        memo = self._memo
        while True:
            known = memo.get(content)
            if known is None:
                break
            if type(known) is Parts:
                return known
            failure = await asyncio.shield(known)  # the read of another watcher: its error, or None
            if failure is not None:
                raise failure
        reading: asyncio.Future = asyncio.get_running_loop().create_future()
        memo[content] = reading
        try:
            parts = await encode(self.hydrator, store, content, budget)
        except Exception as exc:
            del memo[content]
            reading.set_result(exc)
            raise
        except BaseException:  # cancelled: a waiting watcher reads instead
            del memo[content]
            reading.set_result(None)
            raise
        memo[content] = parts
        reading.set_result(None)
        return parts
