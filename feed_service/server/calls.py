"""What every RPC of the servicer does around its own work: the :func:`rpc` decorator and :class:`CallPlumbing`.

One decorator wraps every handler, unary and streaming alike, so each call gets the same steps:

- the in-flight gauge and the latency histogram by method and code (:class:`.metrics.ServerMetrics`);
- authentication of the bearer token before the handler runs (UNAUTHENTICATED), the claims
  passed to the handler;
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

from feed_service.errors import AuthError, FeedError, StoreError, StoreTimeout
from feed_service.server import auth
from feed_service.server.metrics import ServerMetrics
from feed_service.store.ports import TimelineStore

MAX_ID_LEN = 128

log = logging.getLogger("feed_service.server")

#: Codes not logged unless the access log is on: a unary call's success; a stream's end, either way.
_QUIET_UNARY = frozenset({"OK"})
_QUIET_STREAM = frozenset({"OK", "CANCELLED"})
_WARNING_CODES = frozenset({"UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"})


class RpcFailure(FeedError):
    """Ends a call with ``code`` and ``message`` (raised by the steps, turned into an abort once)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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
    ) -> None:
        self._get_store = store
        self._store_status = store_status
        self._tokens = auth.VerifiedTokens(secret, now=now)
        self.metrics = metrics
        self.request_timeout_s = request_timeout_s
        self.access_log = access_log

    def authenticate(self, context: grpc.aio.ServicerContext) -> auth.Claims:
        try:
            return self._tokens.claims(auth.bearer_token(context.invocation_metadata()))
        except AuthError as exc:
            raise RpcFailure(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None

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
                    async for message in fn(self, request, context, calls.authenticate(context)):
                        yield message
                except (asyncio.CancelledError, GeneratorExit):
                    code = "CANCELLED"
                    raise
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:
                    failure, detail = calls.failure_of(exc, method, context)
                    code = failure.code.name
                    await context.abort(failure.code, failure.message)
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
                return await fn(self, request, context, calls.authenticate(context))
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                failure, detail = calls.failure_of(exc, method, context)
                code = failure.code.name
                await context.abort(failure.code, failure.message)
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


def authorize_timeline(claims: auth.Claims, user_id: str) -> None:
    """PERMISSION_DENIED unless ``claims`` may read ``user_id``'s home timeline (:func:`auth.may_read_timeline`)."""
    if not auth.may_read_timeline(claims, user_id):
        raise RpcFailure(grpc.StatusCode.PERMISSION_DENIED,
                         f"a user token for {claims.subject!r} may read only its own timeline")
