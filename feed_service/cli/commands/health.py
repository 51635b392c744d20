"""``feedctl health``: the read service's ``grpc.health.v1`` check over the same TLS it serves.

Kubernetes' built-in gRPC probe speaks plaintext only, and a secured server accepts TLS only
(docs/security.md), so the Deployment's probes run this inside the container. Exit 0 when the
service reports SERVING, 1 otherwise (NOT_SERVING, unreachable, refused, timed out).
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("health", help="check a read server's grpc.health status (TLS from FEED_GRPC_CA_FILE)")
    parser.add_argument("--target", default="localhost:50051", help="host:port of the server (default %(default)s)")
    parser.add_argument("--service", default="", help="service name to check (default: the server as a whole)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default %(default)s)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from feed_service.server.client_channel import open_channel

    channel = open_channel(args.target)
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=args.service),
                                                          timeout=args.timeout)
    except grpc.RpcError as exc:
        print(f"feedctl health: {args.target}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{args.target}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1
