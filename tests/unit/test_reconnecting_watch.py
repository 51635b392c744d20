"""The client's :class:`ReconnectingWatch` against a tiny in-process grpc.aio server that ends each stream
as scripted: which ends reconnect, which are raised, and that every reconnect resumes from the last
resume token the server sent (a message's, or the start token of its initial metadata)."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import grpc
import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc as pb_grpc
from feed_service.client.watch import RESUME_TOKEN_HEADER, Backoff, ReconnectingWatch, retry_delay_s
from feed_service.server.rate_limit import retry_later

FAST = Backoff(initial_s=0.01, max_s=0.02)
Step = Callable[[pb.WatchHomeTimelineRequest, grpc.aio.ServicerContext], Awaitable[None]]


def message(token: str, tweet_id: str) -> pb.WatchHomeTimelineResponse:
    return pb.WatchHomeTimelineResponse(entries=[pb.TimelineEntry(tweet_id=tweet_id)], resume_token=token)


class Scripted(pb_grpc.TimelineServiceServicer):
    """Stream n follows ``script[n]``: an async generator of (header | message | abort) steps."""

    def __init__(self, script: list) -> None:
        self.script = script
        self.requests: list[pb.WatchHomeTimelineRequest] = []

    async def WatchHomeTimeline(self, request, context):
        self.requests.append(request)
        async for item in self.script[len(self.requests) - 1](request, context):
            yield item


async def serve(servicer: Scripted, body: Callable[[pb_grpc.TimelineServiceStub], Awaitable[None]]) -> None:
    server = grpc.aio.server()
    pb_grpc.add_TimelineServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await body(pb_grpc.TimelineServiceStub(channel))
    finally:
        await server.stop(0)


def start(token: str):
    async def step(request, context):
        await context.send_initial_metadata(((RESUME_TOKEN_HEADER, token),))
    return step


def test_reconnects_on_unasked_ends_and_resumes_from_the_last_token() -> None:
    async def started_then_unavailable(request, context):
        await start("t0")(request, context)
        yield message("t1", "a")
        await context.abort(grpc.StatusCode.UNAVAILABLE, "server restarting")

    async def refused(request, context):  # refused before it starts: the token it had stays
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many watches")
        yield  # pragma: no cover

    async def cancelled(request, context):  # gRPC's refusal in a storm
        await context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")
        yield  # pragma: no cover

    async def started_then_server_shutdown(request, context):
        await start(request.resume_token)(request, context)
        yield message("t2", "b")  # and then status OK: the server is shutting down

    async def started_only(request, context):  # an empty timeline's start token, then the end
        await start("t3")(request, context)
        await context.abort(grpc.StatusCode.UNAVAILABLE, "gone")
        yield  # pragma: no cover

    async def unauthenticated(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "token expired")
        yield  # pragma: no cover

    servicer = Scripted([started_then_unavailable, refused, cancelled, started_then_server_shutdown, started_only,
                         unauthenticated])
    got: list[str] = []

    async def body(stub):
        watch = ReconnectingWatch(stub, "ann", metadata=lambda: [("authorization", "Bearer x")], backoff=FAST)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for m in watch:
                got.extend(e.tweet_id for e in m.entries)
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED  # not an end to reconnect after
        assert (watch.opens, watch.reconnects, watch.resume_token) == (3, 5, "t3")
        assert watch.ends == {"UNAVAILABLE": 2, "RESOURCE_EXHAUSTED": 1, "CANCELLED": 1, "OK": 1}
        assert watch.started.is_set()

    asyncio.run(serve(servicer, body))
    assert got == ["a", "b"]
    assert [r.resume_token for r in servicer.requests] == ["", "t1", "t1", "t1", "t2", "t3"]
    assert {r.user_id for r in servicer.requests} == {"ann"}


def test_gives_up_after_max_attempts_consecutive_failures() -> None:
    async def unavailable(request, context):
        await context.abort(grpc.StatusCode.UNAVAILABLE, "down")
        yield  # pragma: no cover

    servicer = Scripted([unavailable] * 5)

    async def body(stub):
        watch = ReconnectingWatch(stub, "ann", backoff=Backoff(initial_s=0.01, max_s=0.02, max_attempts=3))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for _ in watch:
                pass
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        assert not watch.started.is_set()

    asyncio.run(serve(servicer, body))
    assert len(servicer.requests) == 3


def test_close_ends_the_iteration_without_a_reconnect() -> None:
    async def idle(request, context):
        await start("t0")(request, context)
        yield message("t1", "a")
        await asyncio.sleep(30)

    servicer = Scripted([idle, idle])

    async def body(stub):
        watch = ReconnectingWatch(stub, "ann", backoff=FAST)
        got = []
        async for m in watch:
            got.append(m.resume_token)
            watch.close()  # the cancel it asks for: no reconnect, no error
        assert got == ["t1"] and watch.reconnects == 0

    asyncio.run(serve(servicer, body))
    assert len(servicer.requests) == 1


def test_retry_info_delay_is_read_from_the_status_details() -> None:
    status = retry_later("rate limit exceeded", 0.25)
    error = grpc.aio.AioRpcError(status.code, grpc.aio.Metadata(), grpc.aio.Metadata(*status.trailing_metadata),
                                 status.details)
    assert retry_delay_s(error) == pytest.approx(0.25)
    assert retry_delay_s(grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                              grpc.aio.Metadata())) == 0.0


def test_backoff_rejects_nonsense() -> None:
    for bad in (dict(initial_s=0), dict(initial_s=2, max_s=1), dict(max_attempts=0)):
        with pytest.raises(ValueError):
            Backoff(**bad)
