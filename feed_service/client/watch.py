"""``ReconnectingWatch``: a ``WatchHomeTimeline`` stream that survives what a watch's client must expect.

A watch is meant to stay open, yet it ends when its server shuts down (status OK), restarts or is
unreachable (UNAVAILABLE), when gRPC refuses it in a reconnect storm (CANCELLED: beyond the server's
pending-call limits), or when a limit refuses it (RESOURCE_EXHAUSTED: docs/api.md#limits). On any of
those ends the client did not ask for, this one opens the stream again after a jittered exponential
backoff (tenacity's ``wait_random_exponential``: a uniform wait up to ``initial_s`` doubling per
failure, capped at ``max_s``; a ``google.rpc.RetryInfo`` delay from the server is waited at least),
resuming from the last resume token the server sent: a message's ``resume_token``, or the
``feed-resume-token`` initial metadata a stream starts with, so no entry is lost or repeated across the
reconnect (docs/api.md#watch). The backoff starts again from ``initial_s`` once a stream has started.
Every other status (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, DEADLINE_EXCEEDED, ...) is
raised as the ``grpc.aio.AioRpcError`` it is, as is the last failure once ``max_attempts`` consecutive
opens failed.

    watch = ReconnectingWatch(stub, "ann", metadata=lambda: [("authorization", f"Bearer {token()}")])
    async for message in watch:        # pb.WatchHomeTimelineResponse, across reconnects
        apply(message)
    ...
    watch.close()                       # from elsewhere: ends the iteration (a cancel it asked for)
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Sequence

import grpc
from google.rpc import error_details_pb2, status_pb2
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc as pb_grpc

#: Ends after which the watch is opened again (the others are raised).
RECONNECT_CODES = frozenset({grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE,
                             grpc.StatusCode.RESOURCE_EXHAUSTED})
#: Initial metadata of a started stream: its starting position's resume token (server/watch.py).
RESUME_TOKEN_HEADER = "feed-resume-token"
_STATUS_DETAILS = "grpc-status-details-bin"

Metadata = Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before opening the stream again.

    The n-th consecutive failed open waits a uniform time in ``[0, min(max_s, initial_s * 2**(n-1))]``
    ("full jitter": clients that lost their server together spread out instead of returning together).
    ``max_attempts``: consecutive failed opens after which the last failure is raised (None: never).
    """

    initial_s: float = 0.5
    max_s: float = 30.0
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if self.initial_s <= 0 or self.max_s < self.initial_s:
            raise ValueError("backoff needs 0 < initial_s <= max_s")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1 (None: retry for ever)")


class ServerEnded(Exception):
    """The server ended the stream with status OK (it is shutting down): opened again elsewhere."""


def retry_delay_s(error: BaseException) -> float:
    """The ``google.rpc.RetryInfo`` delay an error's status details carry, in seconds (0: none)."""
    trailing = getattr(error, "trailing_metadata", None)
    for name, value in (trailing() if callable(trailing) else None) or ():
        if name != _STATUS_DETAILS:
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.RetryInfo()
            if detail.Unpack(info):
                return info.retry_delay.ToNanoseconds() / 1e9
    return 0.0


class _Attempts:
    """What a tenacity wait strategy reads of a retry state: the failures since the last started stream."""

    __slots__ = ("attempt_number",)

    def __init__(self, attempt_number: int) -> None:
        self.attempt_number = attempt_number


class ReconnectingWatch:
    """One user's home-timeline watch, opened again after each unasked end (module docstring); with
    ``list_id``, the watch of that list of the user's (``WatchListTimeline``, docs/api.md#lists).

    ``metadata``: the call metadata, or a function returning it for each open (a fresh token).
    ``resume_token``: where the first stream starts (empty: at the timeline's head). ``timeout``: each
    stream's deadline (None: none). Attributes the caller may read: ``resume_token`` (the last one the
    server sent), ``started`` (set once a stream has started), ``opens`` (streams started),
    ``reconnects`` (waits before opening again) and ``ends`` (the ends reconnected after, by status
    name: "OK", "CANCELLED", "UNAVAILABLE", "RESOURCE_EXHAUSTED").
    """

    def __init__(self, stub: pb_grpc.TimelineServiceStub, user_id: str, *,
                 metadata: Metadata | Callable[[], Metadata] = (), resume_token: str = "",
                 backoff: Backoff = Backoff(), timeout: float | None = None, list_id: str | None = None) -> None:
        self.stub = stub
        self.user_id = user_id
        self.list_id = list_id
        self.resume_token = resume_token
        self.backoff = backoff
        self.timeout = timeout
        self.started = asyncio.Event()
        self.opens = 0
        self.reconnects = 0
        self.ends: Counter[str] = Counter()
        self._metadata = metadata
        self._call: grpc.aio.UnaryStreamCall | None = None
        self._closed = False
        self._failures = 0  # consecutive failures since the last stream started or message arrived
        self._wait = wait_random_exponential(multiplier=backoff.initial_s, max=backoff.max_s)

    def __aiter__(self) -> AsyncIterator[pb.WatchHomeTimelineResponse]:
        return self.messages()

    async def messages(self) -> AsyncIterator[pb.WatchHomeTimelineResponse]:
        """Every message of the watch, across reconnects, until :meth:`close` or a failure raised."""
        try:
            while not self._closed:
                retrying = AsyncRetrying(retry=retry_if_exception(self._reconnects_after), wait=self._wait_s,
                                         stop=self._stop, before_sleep=self._count, reraise=True)
                try:
                    message = await retrying(self._next)
                except grpc.aio.AioRpcError:
                    if self._closed:  # the cancel close() asked for
                        return
                    raise
                if message is None:  # closed
                    return
                yield message
        finally:
            self._drop_call()

    def close(self) -> None:
        """End the watch: the open stream is cancelled and the iteration ends (no reconnect)."""
        self._closed = True
        self._drop_call()

    async def _next(self) -> pb.WatchHomeTimelineResponse | None:
        """The next message: the stream opened first if none is open; raises how it ended otherwise."""
        if self._closed:
            return None
        if self._call is None:
            await self._open()
        message = await self._call.read()
        if message is grpc.aio.EOF:
            self._drop_call()
            if self._closed:
                return None
            raise ServerEnded(f"the server ended the watch of {self.user_id!r}")
        if message.resume_token:
            self.resume_token = message.resume_token
        self._failures = 0
        return message

    async def _open(self) -> None:
        metadata = self._metadata() if callable(self._metadata) else self._metadata
        if self.list_id is None:
            call = self.stub.WatchHomeTimeline(
                pb.WatchHomeTimelineRequest(user_id=self.user_id, resume_token=self.resume_token),
                metadata=tuple(metadata), timeout=self.timeout)
        else:  # its messages have the home watch's fields
            call = self.stub.WatchListTimeline(
                pb.WatchListTimelineRequest(user_id=self.user_id, list_id=self.list_id, resume_token=self.resume_token),
                metadata=tuple(metadata), timeout=self.timeout)
        self._call = call
        try:
            headers = await call.initial_metadata()
        except BaseException:
            self._drop_call()
            raise
        if call.done() and not headers:  # refused before it started: raise its status
            await self._raise_status(call)
        for name, value in headers or ():
            if name == RESUME_TOKEN_HEADER and value:
                self.resume_token = value
        self.opens += 1
        self._failures = 0
        self.started.set()

    async def _raise_status(self, call: grpc.aio.UnaryStreamCall) -> None:
        self._drop_call()
        await call.read()  # raises the call's AioRpcError (or returns EOF for an OK end)
        raise ServerEnded(f"the server ended the watch of {self.user_id!r} before it started")

    def _drop_call(self) -> None:
        call, self._call = self._call, None
        if call is not None and not call.done():
            call.cancel()

    def _reconnects_after(self, error: BaseException) -> bool:
        self._drop_call()
        if self._closed:
            return False
        if isinstance(error, ServerEnded):
            code = "OK"
        elif isinstance(error, grpc.aio.AioRpcError) and error.code() in RECONNECT_CODES:
            code = error.code().name
        else:
            return False
        self._failures += 1
        self.ends[code] += 1
        return True

    def _wait_s(self, state: RetryCallState) -> float:
        """Tenacity's jittered exponential wait of the failures since the last start (not of the
        attempts of this read), at least the server's RetryInfo delay."""
        error = state.outcome.exception() if state.outcome is not None else None
        jittered = self._wait(_Attempts(max(1, self._failures)))  # type: ignore[arg-type]
        return max(jittered, retry_delay_s(error) if error is not None else 0.0)

    def _stop(self, state: RetryCallState) -> bool:
        limit = self.backoff.max_attempts
        return self._closed or (limit is not None and self._failures >= limit)

    def _count(self, state: RetryCallState) -> None:
        self.reconnects += 1
