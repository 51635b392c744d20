"""What every RPC of the servicer does around its own work: the :func:`rpc` decorator and :class:`CallPlumbing`.

One decorator wraps every handler, unary and streaming alike, so each call gets the same steps:

- the in-flight gauge and the latency histogram by method and code (:class:`.metrics.ServerMetrics`);
- authentication of the bearer token before the handler runs (UNAUTHENTICATED), the claims
  passed to the handler, then the caller's rate limit (RESOURCE_EXHAUSTED with a
  ``google.rpc.RetryInfo``, :mod:`.rate_limit`; docs/api.md#limits) and a request that did not
  decode (INVALID_ARGUMENT, :mod:`.registration`);
- one status for whatever the handler raises (:meth:`CallPlumbing.failure_of`): :class:`RpcFailure`
  as raised, store errors as UNAVAILABLE or DEADLINE_EXCEEDED, anything else INTERNAL and logged;
- the access log line (failures always; every call with ``access_log``).

The rest of a call's order (docs/api.md#errors: validate, authorize, decode the token, then read
within the budget) is the handler's, which calls :meth:`CallPlumbing.store` and
:meth:`CallPlumbing.budget` where its read starts, so a call fails with the first applicable code.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, AsyncIterator, Callable, Protocol

import grpc

from feed_service.core.event_kinds import RESERVED_ID_PREFIX
from feed_service.errors import AuthError, FeedError, StoreError, StorePermissionDenied, StoreTimeout
from feed_service.server import auth
from feed_service.server.metrics import ServerMetrics
from feed_service.server.rate_limit import RateLimiter, certificate_name, peer_host, retry_later
from feed_service.server.registration import Malformed
from feed_service.store.ports import TimelineStore

MAX_ID_LEN = 128

log = logging.getLogger("feed_service.server")

#: Codes not logged unless the access log is on: a unary call's success; a stream's end, either way;
#: a refusal by the abuse limits (a flood would flood the log: feed_grpc_requests_total counts them).
_QUIET_UNARY = frozenset({"OK", "RESOURCE_EXHAUSTED"})
_QUIET_STREAM = frozenset({"OK", "CANCELLED", "RESOURCE_EXHAUSTED"})
_WARNING_CODES = frozenset({"UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"})


class RpcFailure(FeedError):
    """Ends a call with ``code`` and ``message`` (raised by the steps, turned into an abort once)."""

    def __init__(self, code: grpc.StatusCode, message: str, trailing_metadata: tuple = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        #: e.g. ``grpc-status-details-bin`` (:func:`.rate_limit.retry_later`)
        self.trailing_metadata = trailing_metadata

    @classmethod
    def of_status(cls, status: grpc.Status) -> "RpcFailure":
        return cls(status.code, status.details, tuple(status.trailing_metadata))


class CallPlumbing:
    """The per-call steps of one servicer: authentication, the store, the read budget, the status
    a failure ends with, metrics and the access log."""

    def __init__(
        self,
        *,
        store: Callable[[], TimelineStore | None],
        store_status: Callable[[], str],
        secret: bytes,
        metrics: ServerMetrics,
        request_timeout_s: float,
        access_log: bool,
        now: Callable[[], float],
        user_limiter: RateLimiter | None = None,
        service_limiter: RateLimiter | None = None,
    ) -> None:
        self._get_store = store
        self._store_status = store_status
        self._tokens = auth.VerifiedTokens(secret, now=now)
        self.metrics = metrics
        self.request_timeout_s = request_timeout_s
        self.access_log = access_log
        #: per user and per unauthenticated peer; per service (None: not limited)
        self.user_limiter = user_limiter
        self.service_limiter = service_limiter

    def authenticate(self, context: grpc.aio.ServicerContext) -> auth.Claims:
        """The caller's claims, once its rate limit admits the call (docs/api.md#limits)."""
        try:
            claims = self._tokens.claims(auth.bearer_token(context.invocation_metadata()))
        except AuthError as exc:
            if self.user_limiter is not None:  # a flood of bad tokens is limited by who sends it
                name = certificate_name(context)
                self._admit(self.user_limiter, ("cert", name) if name else ("peer", peer_host(context.peer())))
            raise RpcFailure(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
        if claims.role == "user":
            if self.user_limiter is not None:
                self._admit(self.user_limiter, claims.subject)
        elif self.service_limiter is not None:
            name = certificate_name(context)
            self._admit(self.service_limiter, ("cert", name) if name else ("service", claims.subject))
        return claims

    @staticmethod
    def _admit(limiter: RateLimiter, principal: object) -> None:
        wait = limiter.acquire(principal)
        if wait:
            raise RpcFailure.of_status(retry_later(f"rate limit exceeded: retry in {wait:.3f} s", wait))

    def store(self) -> TimelineStore:
        """The connected store; UNAVAILABLE while Cassandra is not reachable."""
        store = self._get_store()
        if store is None:
            raise RpcFailure(grpc.StatusCode.UNAVAILABLE, f"cassandra unavailable: {self._store_status()}")
        return store

    def budget(self, context: grpc.aio.ServicerContext) -> float:
        """Seconds the next read may take: the call's remaining deadline, at most ``request_timeout_s``."""
        return deadline_capped(context, self.request_timeout_s, "deadline exceeded before the read")

    @staticmethod
    def failure_of(exc: Exception, method: str, context: grpc.aio.ServicerContext) -> tuple[RpcFailure, str]:
        """The status a handler's exception ends its call with, and the detail to log."""
        if isinstance(exc, RpcFailure):
            return exc, exc.message
        if isinstance(exc, StorePermissionDenied):
            # the deployment's grants, not the caller's request nor a passing outage: say so loudly
            log.error("store refused the server's role", extra={"fields": {"method": method, "error": str(exc)}})
            return RpcFailure(grpc.StatusCode.INTERNAL, "internal error"), str(exc)
        if isinstance(exc, StoreError):
            failure = _store_failure(exc, context)
            return failure, failure.message
        log.exception("unhandled error", extra={"fields": {"method": method}})
        return RpcFailure(grpc.StatusCode.INTERNAL, "internal error"), repr(exc)

    def finish(self, method: str, code: str, started: float, context: Any, detail: str,
               quiet: frozenset[str]) -> None:
        """Record a call that ended with ``code``: metrics, and the access log unless ``code`` is quiet."""
        elapsed = time.perf_counter() - started
        self.metrics.observe(method, code, elapsed)
        if code not in quiet or self.access_log:
            _log_call(method, code, elapsed, context, detail)


class HasCallPlumbing(Protocol):
    """What :func:`rpc` needs of the servicer whose methods it wraps."""

    calls: CallPlumbing


def deadline_capped(context: grpc.aio.ServicerContext, cap: float, exceeded: str) -> float:
    """``cap`` seconds, or fewer when the call's deadline is nearer; DEADLINE_EXCEEDED (``exceeded``)
    once it has passed: how long a read or a wait within the call may take."""
    remaining = context.time_remaining()
    if remaining is None:
        return cap
    if remaining <= 0:
        raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, exceeded)
    return min(remaining, cap)


def _store_failure(exc: StoreError, context: grpc.aio.ServicerContext) -> RpcFailure:
    if isinstance(exc, StoreTimeout):
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0.001:
            return RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, f"deadline exceeded: {exc}")
    return RpcFailure(grpc.StatusCode.UNAVAILABLE, str(exc))


def _log_call(method: str, code: str, seconds: float, context: Any, detail: str) -> None:
    fields = {"method": method, "code": code, "ms": round(seconds * 1000, 3), "peer": context.peer()}
    if detail:
        fields["detail"] = detail
    level = logging.WARNING if code in _WARNING_CODES else logging.INFO
    log.log(level, "rpc", extra={"fields": fields})


def rpc(method: str, *, streaming: bool = False) -> Callable:
    """Make ``fn(self, request, context, claims)`` the handler of ``method``: the steps of the module
    docstring around it. ``streaming``: ``fn`` returns the async iterator of a server-streaming
    call's messages (its checks may raise before it returns, as a generator's would on its first step)."""

    def decorate(fn: Callable) -> Callable:
        if streaming:
            @functools.wraps(fn)
            async def stream_handler(self: HasCallPlumbing, request: Any,
                                     context: grpc.aio.ServicerContext) -> AsyncIterator:
                calls = self.calls
                started = time.perf_counter()
                code, detail = "OK", ""
                in_flight = calls.metrics.in_flight_of(method)
                in_flight.inc()
                try:
                    claims = calls.authenticate(context)
                    if type(request) is Malformed:
                        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, request.error)
                    async for message in fn(self, request, context, claims):
                        yield message
                except (asyncio.CancelledError, GeneratorExit):
                    code = "CANCELLED"
                    raise
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:
                    failure, detail = calls.failure_of(exc, method, context)
                    code = failure.code.name
                    await context.abort(failure.code, failure.message, failure.trailing_metadata)
                finally:
                    in_flight.dec()
                    calls.finish(method, code, started, context, detail, _QUIET_STREAM)

            return stream_handler

        @functools.wraps(fn)
        async def unary_handler(self: HasCallPlumbing, request: Any, context: grpc.aio.ServicerContext) -> Any:
            calls = self.calls
            started = time.perf_counter()
            code, detail = "OK", ""
            in_flight = calls.metrics.in_flight_of(method)
            in_flight.inc()
            try:
                claims = calls.authenticate(context)
                if type(request) is Malformed:
                    raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, request.error)
                return await fn(self, request, context, claims)
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                failure, detail = calls.failure_of(exc, method, context)
                code = failure.code.name
                await context.abort(failure.code, failure.message, failure.trailing_metadata)
            finally:
                in_flight.dec()
                calls.finish(method, code, started, context, detail, _QUIET_UNARY)

        return unary_handler

    return decorate


def check_id(value: str, name: str) -> str:
    """``value`` if it is a valid id (1..MAX_ID_LEN characters); INVALID_ARGUMENT otherwise."""
    if not value:
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"{name} is required")
    if len(value) > MAX_ID_LEN:
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"{name} is longer than {MAX_ID_LEN} characters")
    return value


def check_user_id(value: str, name: str) -> str:
    """:func:`check_id`, and INVALID_ARGUMENT for an id in the stream's reserved namespace (starting
    with U+001F: a list's reader, docs/lists.md#in-the-engine), which no user has."""
    check_id(value, name)
    if value.startswith(RESERVED_ID_PREFIX):
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"{name} must not start with U+001F (a reserved id)")
    return value


def authorize_timeline(claims: auth.Claims, user_id: str) -> None:
    """PERMISSION_DENIED unless ``claims`` may read ``user_id``'s home timeline (:func:`auth.may_read_timeline`)."""
    if not auth.may_read_timeline(claims, user_id):
        raise RpcFailure(grpc.StatusCode.PERMISSION_DENIED,
                         f"a user token for {claims.subject!r} may read only its own timeline")
