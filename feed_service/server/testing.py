"""Run a :class:`TimelineServer` on a loopback port from synchronous code (tests, benchmarks).

The server gets its own event loop in a background thread; clients use ordinary blocking stubs.
Unit tests give it a :class:`MemoryStore` instead of Cassandra.

    with ServerThread(config, store=MemoryStore()) as server:
        stub = server.stub()
        stub.GetHomeTimeline(request, metadata=server.auth("ann"))

Its channels go through :mod:`.client_channel`: plaintext to a plaintext server; to a TLS server
(``config.tls``) with ``client`` or else the client files of the environment (FEED_GRPC_CA_FILE...),
so the same test runs against either (:func:`tls_options` makes a TLS server from those variables).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any, Coroutine, Mapping

import grpc

from feed_service.server import auth
from feed_service.server.app import TimelineServer
from feed_service.server.client_channel import ClientTLS, channel_for
from feed_service.server.config import ServerConfig

#: A fixed secret for tests only (the server itself never has a built-in secret).
TEST_SECRET = b"test-secret-0123456789abcdef"


def tls_options(env: Mapping[str, str]) -> dict[str, str]:
    """The TLS fields of a :class:`ServerConfig` from FEED_GRPC_TLS_CERT_FILE / _KEY_FILE and
    FEED_GRPC_CLIENT_CA_FILE in ``env`` (those absent are left out: plaintext, or TLS without mTLS)."""
    names = {"FEED_GRPC_TLS_CERT_FILE": "tls_cert_file", "FEED_GRPC_TLS_KEY_FILE": "tls_key_file",
             "FEED_GRPC_CLIENT_CA_FILE": "client_ca_file"}
    return {field: env[var] for var, field in names.items() if env.get(var)}


class ServerThread:
    def __init__(self, config: ServerConfig, *, client: ClientTLS | None = None, **server_kwargs: Any) -> None:
        self.config = config
        #: what the thread's own channels trust and present (None: the environment's, if the server is TLS)
        self.client = client
        self._kwargs = server_kwargs
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="grpc-server-loop", daemon=True)
        self.server: TimelineServer | None = None
        self.port = 0
        self._channels: list[grpc.Channel] = []

    def run(self, coro: Coroutine, timeout: float = 30.0) -> Any:
        """Run ``coro`` on the server's loop and wait for its result."""
        future: Future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def start(self) -> "ServerThread":
        self._thread.start()

        async def start() -> int:
            self.server = TimelineServer(self.config, **self._kwargs)
            return await self.server.start(port=0)

        self.port = self.run(start())
        return self

    def stop(self, grace: float | None = 1.0) -> None:
        for channel in self._channels:
            channel.close()
        if self.server is not None:
            self.run(self.server.stop(grace))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def changes_applied(self, timeout: float = 30.0) -> None:
        """Block until the server has applied every view change published so far (its watches and
        read cache are then as current as the stream's last committed batch)."""
        assert self.run(self.server.changes_applied(timeout), timeout + 5), "view changes not applied in time"

    def feed_live(self, timeout: float = 30.0) -> None:
        """Block until the server consumes the view's change topic."""
        import time

        deadline = time.monotonic() + timeout
        while self.server.servicer.feed is None or not self.server.servicer.feed.live:
            assert time.monotonic() < deadline, "the server did not start consuming the view changes"
            time.sleep(0.05)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client_tls(self) -> ClientTLS:
        """What this thread's channels use: plaintext to a plaintext server; else ``client``, or the
        environment's client files."""
        if not self.config.tls:
            return ClientTLS()
        return self.client if self.client is not None else ClientTLS.from_env()

    def channel(self, *, aio: bool = False, options: list[tuple[str, Any]] = ()) -> Any:
        """A channel to the server (``aio``: a ``grpc.aio`` one, for the caller's own loop)."""
        channel = channel_for(self.address, self.client_tls(), aio=aio, options=options)
        if not aio:
            self._channels.append(channel)
        return channel

    def stub(self):
        from feed_service.api import timeline_pb2_grpc

        return timeline_pb2_grpc.TimelineServiceStub(self.channel())

    def token(self, subject: str, role: auth.Role = "user", ttl_s: int = 3600) -> str:
        return auth.mint(self.server.secret, subject=subject, role=role, ttl_s=ttl_s)

    def auth(self, subject: str, role: auth.Role = "user") -> list[tuple[str, str]]:
        """Call metadata carrying a fresh token for ``subject``."""
        return [("authorization", f"Bearer {self.token(subject, role)}")]
