"""Bearer tokens: HMAC-SHA256-signed claims, in JWT compact form (``HS256``), so standard tools read them.

A token is ``base64url(header).base64url(claims).base64url(HMAC-SHA256(secret, header.claims))`` with
claims ``{"sub": subject, "role": "user" | "service", "iat": issued, "exp": expiry}`` (seconds).
Verification accepts only ``alg`` ``HS256``, a valid signature, a known role and ``exp`` in the future.

Authorization rule (:func:`may_read_timeline`): a ``user`` token reads only its own timeline; a
``service`` token reads any. Tweets and profiles are readable by any valid token, except that an
author's blocks apply to user tokens (:func:`blockable_reader`; docs/api.md#blocks-and-mutes).

>>> secret = b"0123456789abcdef0123"
>>> token = mint(secret, subject="ann", role="user", ttl_s=60, now=lambda: 1_000)
>>> verify(secret, token, now=lambda: 1_030)
Claims(subject='ann', role='user', expires_at=1060)
>>> verify(secret, token, now=lambda: 1_060)
Traceback (most recent call last):
...
feed_service.errors.AuthError: token expired
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Callable, Literal, TypeAlias
from feed_service.errors import AuthError

Role: TypeAlias = Literal["user", "service"]
"""``user``: an end user, reads its own timeline; ``service``: a backend, reads any timeline."""

ROLES: tuple[Role, ...] = ("user", "service")
DEFAULT_TTL_S = 3600
MAX_SUBJECT_LEN = 128
_HEADER = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode()


@dataclass(frozen=True, slots=True)
class Claims:
    subject: str
    role: Role
    expires_at: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise AuthError("token is not base64url") from None


def _sign(secret: bytes, signing_input: str) -> bytes:
    return hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()


def mint(
    secret: bytes, *, subject: str, role: Role, ttl_s: int = DEFAULT_TTL_S, now: Callable[[], float] = time.time
) -> str:
    """A signed token for ``subject`` with ``role``, valid for ``ttl_s`` seconds from ``now()``."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    if not subject or len(subject) > MAX_SUBJECT_LEN:
        raise ValueError(f"subject must be 1..{MAX_SUBJECT_LEN} characters")
    issued = int(now())
    claims = {"sub": subject, "role": role, "iat": issued, "exp": issued + int(ttl_s)}
    signing_input = f"{_HEADER}.{_b64(json.dumps(claims, separators=(',', ':')).encode())}"
    return f"{signing_input}.{_b64(_sign(secret, signing_input))}"


def verify(secret: bytes, token: str, *, now: Callable[[], float] = time.time) -> Claims:
    """The token's claims; raises :class:`AuthError` unless signed by ``secret`` and unexpired."""
    parts = token.split(".")
    if len(parts) != 3:
        raise AuthError("token is not header.claims.signature")
    header_b64, claims_b64, signature_b64 = parts
    signing_input = f"{header_b64}.{claims_b64}"
    if not hmac.compare_digest(_sign(secret, signing_input), _unb64(signature_b64)):
        raise AuthError("token signature is invalid")
    try:
        header = json.loads(_unb64(header_b64))
        claims = json.loads(_unb64(claims_b64))
    except (ValueError, UnicodeDecodeError):
        raise AuthError("token is not JSON") from None
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        raise AuthError("token algorithm must be HS256")
    if not isinstance(claims, dict):
        raise AuthError("token claims are not an object")
    subject, role, expires_at = claims.get("sub"), claims.get("role"), claims.get("exp")
    if not isinstance(subject, str) or not subject:
        raise AuthError("token has no subject")
    if role not in ROLES:
        raise AuthError(f"token role must be one of {ROLES}")
    if not isinstance(expires_at, int) or isinstance(expires_at, bool):
        raise AuthError("token has no expiry")
    if expires_at <= now():
        raise AuthError("token expired")
    return Claims(subject, role, expires_at)


def bearer_token(metadata: tuple[tuple[str, str | bytes], ...] | None) -> str:
    """The token of the ``authorization: Bearer <token>`` metadata entry; :class:`AuthError` if absent."""
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode() if isinstance(value, bytes) else value
            scheme, _, token = text.strip().partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthError("authorization metadata must be 'Bearer <token>'")
            return token.strip()
    raise AuthError("missing 'authorization: Bearer <token>' metadata")


def may_read_timeline(claims: Claims, timeline_id: str) -> bool:
    """A user reads its own timeline; a service reads any."""
    return claims.role == "service" or claims.subject == timeline_id


def blockable_reader(claims: Claims, author_id: str) -> str | None:
    """The user whom ``author_id``'s blocks could hide the author's tweets from on this call: the
    subject of a user token, unless it is the author itself (nobody blocks themselves); None for a
    service token, which reads on behalf of no one user and sees everything."""
    if claims.role != "user" or claims.subject == author_id:
        return None
    return claims.subject


class VerifiedTokens:
    """:func:`verify` with a memo of tokens already verified: a client sends the same token on every
    call, and a dict lookup costs far less than the HMAC and JSON of a verification. The memo is a
    least-recently-used cache of ``capacity`` tokens, so a busy process forgets the tokens of idle
    clients one at a time instead of re-verifying everyone at once; it still honours each token's
    expiry. Only genuine tokens are remembered: a flood of forged ones cannot evict real ones."""

    #: Tokens remembered at most (about 300 bytes each with their claims: ~3 MB).
    CAPACITY = 10_000

    def __init__(self, secret: bytes, *, now: Callable[[], float] = time.time, capacity: int = CAPACITY) -> None:
        from cachetools import LRUCache

        self._secret = secret
        self._now = now
        self._claims: LRUCache[str, Claims] = LRUCache(maxsize=capacity)

    def __len__(self) -> int:
        return len(self._claims)

    def claims(self, token: str) -> Claims:
        """The claims of ``token``; raises :class:`AuthError` unless genuine and unexpired."""
        claims = self._claims.get(token)
        if claims is None:
            claims = verify(self._secret, token, now=self._now)
            self._claims[token] = claims
        elif claims.expires_at <= self._now():
            del self._claims[token]
            raise AuthError("token expired")
        return claims
