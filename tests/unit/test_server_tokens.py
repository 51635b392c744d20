"""Bearer tokens and page tokens: round trips, and every way a token is refused."""

from __future__ import annotations

import base64
import doctest
import json

import pytest

from feed_service.server import auth, logs, page_token
from feed_service.errors import AuthError, PageTokenError
from feed_service.server.page_token import KIND_PAGE, KIND_WATCH, PageCursor, PageTokenCodec

SECRET = b"unit-secret-0123456789"


@pytest.mark.parametrize("module", [auth, page_token, logs])
def test_doctests(module) -> None:
    assert doctest.testmod(module).failed == 0


def test_mint_and_verify_round_trip() -> None:
    token = auth.mint(SECRET, subject="ann", role="service", ttl_s=10, now=lambda: 100)
    assert auth.verify(SECRET, token, now=lambda: 109) == auth.Claims("ann", "service", 110)


def _resign(token: str, claims: dict, secret: bytes = SECRET) -> str:
    header = token.split(".")[0]
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    sig = auth._b64(auth._sign(secret, f"{header}.{body}"))
    return f"{header}.{body}.{sig}"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t + "x", "signature"),
        (lambda t: t.rsplit(".", 1)[0] + ".AAAA", "signature"),
        (lambda t: "a.b", "header.claims.signature"),
        (lambda t: auth.mint(b"another-secret-xxxxxxxx", subject="ann", role="user"), "signature"),
        (lambda t: _resign(t, {"sub": "ann", "role": "admin", "exp": 10**12}), "role"),
        (lambda t: _resign(t, {"sub": "", "role": "user", "exp": 10**12}), "subject"),
        (lambda t: _resign(t, {"sub": "ann", "role": "user"}), "expiry"),
        (lambda t: _resign(t, {"sub": "ann", "role": "user", "exp": 1}), "expired"),
    ],
)
def test_verify_refuses(mutate, message: str) -> None:
    token = auth.mint(SECRET, subject="ann", role="user")
    with pytest.raises(AuthError, match=message):
        auth.verify(SECRET, mutate(token))


def test_verify_refuses_other_algorithms() -> None:
    header = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(b'{"sub":"ann","role":"service","exp":99999999999}').rstrip(b"=").decode()
    signed = f"{header}.{body}.{auth._b64(auth._sign(SECRET, f'{header}.{body}'))}"
    with pytest.raises(AuthError, match="HS256"):
        auth.verify(SECRET, signed)


@pytest.mark.parametrize(
    "metadata, expected",
    [
        ((("authorization", "Bearer abc"),), "abc"),
        ((("x-other", "1"), ("authorization", "bearer  abc ")), "abc"),
        ((("authorization", b"Bearer abc"),), "abc"),
    ],
)
def test_bearer_token(metadata, expected: str) -> None:
    assert auth.bearer_token(metadata) == expected


@pytest.mark.parametrize("metadata", [None, (), (("authorization", "Basic abc"),), (("authorization", "Bearer "),)])
def test_bearer_token_missing_or_malformed(metadata) -> None:
    with pytest.raises(AuthError):
        auth.bearer_token(metadata)


def test_authorization_rule() -> None:
    assert auth.may_read_timeline(auth.Claims("ann", "user", 0), "ann")
    assert not auth.may_read_timeline(auth.Claims("ann", "user", 0), "bob")
    assert auth.may_read_timeline(auth.Claims("feed-api", "service", 0), "bob")


def test_verified_tokens_forget_the_least_recently_used_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    secret, clock = b"0123456789abcdef0123", [1_000.0]
    now = lambda: clock[0]  # noqa: E731
    tokens = [auth.mint(secret, subject=f"u{i}", role="user", ttl_s=60, now=now) for i in range(4)]
    memo = auth.VerifiedTokens(secret, now=now, capacity=3)
    verified: list[str] = []
    real_verify = auth.verify

    def counting_verify(key: bytes, token: str, *, now):  # type: ignore[no-untyped-def]
        verified.append(token)
        return real_verify(key, token, now=now)

    monkeypatch.setattr(auth, "verify", counting_verify)
    for t in tokens[:3]:
        memo.claims(t)
    memo.claims(tokens[0])  # a hit: u0 is now the most recently used
    memo.claims(tokens[3])  # full: u1, the least recently used, goes, and only it
    assert len(memo) == 3 and len(verified) == 4
    assert memo.claims(tokens[0]).subject == "u0" and memo.claims(tokens[2]).subject == "u2"
    assert len(verified) == 4  # still remembered: no burst of re-verification
    memo.claims(tokens[1])  # forgotten: verified again
    assert verified[-1] == tokens[1] and len(verified) == 5
    with pytest.raises(AuthError):  # a forged token is refused and not remembered
        memo.claims(tokens[2][:-2] + ("A" if tokens[2][-2] != "A" else "B") + tokens[2][-1])
    assert len(memo) == 3
    clock[0] += 61  # a remembered token still expires
    with pytest.raises(AuthError, match="expired"):
        memo.claims(tokens[0])


def test_mint_validates_its_input() -> None:
    with pytest.raises(ValueError):
        auth.mint(SECRET, subject="ann", role="admin")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        auth.mint(SECRET, subject="", role="user")


# -- page tokens ---------------------------------------------------------------------------
codec = PageTokenCodec(SECRET)


@pytest.mark.parametrize("cursor", [
    PageCursor("ann", (1_700_000_000_000, "t-1"), 20),
    PageCursor("üser/é", (-5, ""), 799),
    PageCursor("a" * 128, (2**62, "x" * 128), 0, KIND_WATCH),
])
def test_page_token_round_trip(cursor: PageCursor) -> None:
    token = codec.encode(cursor)
    assert token.isascii() and "=" not in token
    assert codec.decode(token, timeline_id=cursor.timeline_id, kind=cursor.kind) == cursor


def test_page_token_every_flipped_byte_is_detected() -> None:
    raw = bytearray(base64.urlsafe_b64decode(codec.encode(PageCursor("ann", (1, "t"), 20)) + "=="))
    for i in range(len(raw)):
        tampered = bytearray(raw)
        tampered[i] ^= 0x01
        token = base64.urlsafe_b64encode(bytes(tampered)).rstrip(b"=").decode()
        with pytest.raises(PageTokenError):
            codec.decode(token, timeline_id="ann")


@pytest.mark.parametrize("token, message", [
    ("", "invalid"), ("!!!", "base64url"), ("QUJD", "invalid"), ("x" * 2000, "too long"),
])
def test_page_token_garbage(token: str, message: str) -> None:
    with pytest.raises(PageTokenError, match=message):
        codec.decode(token, timeline_id="ann")


def test_page_token_foreign_kind_and_key() -> None:
    token = codec.encode(PageCursor("ann", (1, "t"), 20))
    with pytest.raises(PageTokenError, match="another timeline"):
        codec.decode(token, timeline_id="bob")
    with pytest.raises(PageTokenError, match="not a token of this call"):
        codec.decode(token, timeline_id="ann", kind=KIND_WATCH)
    with pytest.raises(PageTokenError, match="invalid"):
        PageTokenCodec(b"other-secret-0123456789").decode(token, timeline_id="ann")
    # a page token is not a bearer token, even though both come from the same secret
    with pytest.raises(AuthError):
        auth.verify(SECRET, token)
    assert KIND_PAGE != KIND_WATCH
