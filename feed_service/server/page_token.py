"""Opaque, tamper-evident cursors for GetHomeTimeline pages and WatchHomeTimeline resumption.

A token is ``base64url(payload || tag)`` where ``tag`` = HMAC-SHA256(page key, payload)[:16] and the
page key is derived from the server secret (``HMAC(secret, "feed.v1 page token")``, so a page token
can never pass as a bearer token or the other way round). The payload binds:

============  ===============================================================================
kind          1 = next page of GetHomeTimeline, 2 = resume point of WatchHomeTimeline
timeline_id   the timeline it was minted for: another user's token is INVALID_ARGUMENT
cursor        ``(created_at, tweet_id)`` of the last entry served: the next page starts after it,
              so pages stay stable while newer entries arrive at the head
served        entries served before this point (the 800-entry inbox cap bounds paging)
============  ===============================================================================

>>> codec = PageTokenCodec(b"0123456789abcdef")
>>> token = codec.encode(PageCursor("ann", (1700000000000, "t9"), served=20))
>>> codec.decode(token, timeline_id="ann")
PageCursor(timeline_id='ann', position=(1700000000000, 't9'), served=20, kind=1)
>>> codec.decode(token, timeline_id="bob")
Traceback (most recent call last):
...
feed_service.errors.PageTokenError: page token was issued for another timeline
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from dataclasses import dataclass

from feed_service.errors import PageTokenError

KIND_PAGE = 1
KIND_WATCH = 2
KIND_AUTHOR_PAGE = 3
_VERSION = 1
_TAG_BYTES = 16
_HEAD = struct.Struct(">BBIq")  # version, kind, served, created_at
_LEN = struct.Struct(">H")
_URLSAFE = bytes.maketrans(b"+/", b"-_")
MAX_TOKEN_CHARS = 1024


@dataclass(frozen=True, slots=True)
class PageCursor:
    timeline_id: str
    position: tuple[int, str]
    served: int = 0
    kind: int = KIND_PAGE


class PageTokenCodec:
    def __init__(self, secret: bytes) -> None:
        self._key = hmac.new(secret, b"feed.v1 page token", hashlib.sha256).digest()

    def _tag(self, payload: bytes) -> bytes:
        return hmac.digest(self._key, payload, "sha256")[:_TAG_BYTES]

    def encode(self, cursor: PageCursor) -> str:
        return self.encode_ascii(cursor.timeline_id, cursor.position, cursor.served, cursor.kind).decode()

    def encode_ascii(self, timeline_id: str, position: tuple[int, str], served: int = 0,
                     kind: int = KIND_PAGE) -> bytes:
        """The token of that cursor as ASCII bytes, without a :class:`PageCursor` (a pushed watch mints
        one per watcher and message, and embeds it in an encoded response as bytes)."""
        created_at, tweet_id = position
        tid, tl = tweet_id.encode(), timeline_id.encode()
        payload = b"".join((_HEAD.pack(_VERSION, kind, served, created_at), _LEN.pack(len(tid)), tid,
                            _LEN.pack(len(tl)), tl))
        raw = payload + self._tag(payload)
        return binascii.b2a_base64(raw, newline=False).translate(_URLSAFE).rstrip(b"=")

    def decode(self, token: str, *, timeline_id: str, kind: int = KIND_PAGE) -> PageCursor:
        """The cursor of ``token``; raises :class:`PageTokenError` unless it is genuine, of ``kind``
        and minted for ``timeline_id``."""
        if len(token) > MAX_TOKEN_CHARS:
            raise PageTokenError("page token is too long")
        try:
            raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            raise PageTokenError("page token is not valid base64url") from None
        payload, tag = raw[:-_TAG_BYTES], raw[-_TAG_BYTES:]
        if len(raw) <= _TAG_BYTES or not hmac.compare_digest(self._tag(payload), tag):
            raise PageTokenError("page token is invalid or was modified")
        try:
            version, token_kind, served, created_at = _HEAD.unpack_from(payload)
            offset = _HEAD.size
            (n,) = struct.unpack_from(">H", payload, offset)
            tweet_id = payload[offset + 2 : offset + 2 + n].decode()
            offset += 2 + n
            (m,) = struct.unpack_from(">H", payload, offset)
            owner = payload[offset + 2 : offset + 2 + m].decode()
        except (struct.error, UnicodeDecodeError):  # only reachable with a leaked key: be strict anyway
            raise PageTokenError("page token is malformed") from None
        if version != _VERSION or token_kind != kind:
            raise PageTokenError("page token is not a token of this call")
        if owner != timeline_id:
            raise PageTokenError("page token was issued for another timeline")
        return PageCursor(owner, (created_at, tweet_id), served, token_kind)
