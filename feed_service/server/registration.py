"""``feed.v1.TimelineService`` registered on a ``grpc.aio`` server, with responses that may arrive
already encoded.

The generated ``add_TimelineServiceServicer_to_server`` serializes every response with its message's
``SerializeToString``. A handler of this service may instead return (or, on a stream, yield) the
``bytes`` of the response, encoded earlier: a read-cache hit serves a page encoded when the cache
last changed, and a watch change is encoded once for all its watchers (docs/api.md#read-cache,
#watch). Bytes go to the wire as they are; a message is serialized as the generated code would.

A request that does not decode becomes a :class:`Malformed` in place of the message, which the
handler's decorator answers with INVALID_ARGUMENT (:mod:`.calls`): a decoder that raised would end
the call with UNKNOWN, a status no client can act on (docs/api.md#status-codes-by-rpc).
"""

from __future__ import annotations

from typing import Any, Callable

import grpc
from google.protobuf.message import DecodeError

from feed_service.api import timeline_pb2 as pb

SERVICE_NAME = "feed.v1.TimelineService"


def serialize(response: Any) -> bytes:
    """The wire form of a response: ``bytes`` as they are, a message serialized."""
    if type(response) is bytes:
        return response
    return response.SerializeToString()


class Malformed:
    """A request whose bytes are not its message (the decoder's error in :attr:`error`)."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def parser(message: type) -> Callable[[bytes], Any]:
    """``message.FromString``, returning a :class:`Malformed` instead of raising."""
    from_string = message.FromString
    name = message.DESCRIPTOR.name

    def parse(data: bytes) -> Any:
        try:
            return from_string(data)
        except (DecodeError, ValueError) as exc:  # ValueError: e.g. a string field that is not UTF-8
            return Malformed(f"request is not a valid {name}: {exc}")

    return parse


def add_timeline_service(servicer: Any, server: grpc.aio.Server) -> None:
    """Register ``servicer``'s RPCs, each with :func:`serialize` as its response serializer."""
    unary, stream = grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler
    handlers = {
        "GetHomeTimeline": unary(servicer.GetHomeTimeline, parser(pb.GetHomeTimelineRequest), serialize),
        "GetTweet": unary(servicer.GetTweet, parser(pb.GetTweetRequest), serialize),
        "GetProfile": unary(servicer.GetProfile, parser(pb.GetProfileRequest), serialize),
        "WatchHomeTimeline": stream(servicer.WatchHomeTimeline, parser(pb.WatchHomeTimelineRequest), serialize),
        "GetUserTimeline": unary(servicer.GetUserTimeline, parser(pb.GetUserTimelineRequest), serialize),
        "GetListTimeline": unary(servicer.GetListTimeline, parser(pb.GetListTimelineRequest), serialize),
        "WatchListTimeline": stream(servicer.WatchListTimeline, parser(pb.WatchListTimelineRequest), serialize),
        "ListLists": unary(servicer.ListLists, parser(pb.ListListsRequest), serialize),
    }
    missing = set(pb.DESCRIPTOR.services_by_name["TimelineService"].methods_by_name) - set(handlers)
    if missing:  # a method added to the proto must be registered here too
        raise RuntimeError(f"{SERVICE_NAME} methods not registered: {sorted(missing)}")
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def add_health(servicer: Any, server: grpc.aio.Server) -> None:
    """Register ``grpc.health.v1.Health`` (``servicer``: grpc_health's aio servicer) with :func:`parser`
    as its decoder, so an undecodable request ends INVALID_ARGUMENT there too, not UNKNOWN."""
    from grpc_health.v1 import health_pb2

    check, watch = servicer.Check, servicer.Watch

    async def Check(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if type(request) is Malformed:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.error)
        return await check(request, context)

    async def Watch(request: Any, context: grpc.aio.ServicerContext) -> None:
        if type(request) is Malformed:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.error)
        await watch(request, context)

    request, serialize_status = health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse.SerializeToString
    handlers = {
        "Check": grpc.unary_unary_rpc_method_handler(Check, parser(request), serialize_status),
        "Watch": grpc.unary_stream_rpc_method_handler(Watch, parser(request), serialize_status),
    }
    name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)
