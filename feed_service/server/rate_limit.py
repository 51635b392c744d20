"""Per-principal rate limits of the read service (docs/api.md#limits), O(1) per call, no await.

A principal's calls are admitted by the generic cell rate algorithm (GCRA, the token bucket's
equivalent with one number per principal): with a rate ``r`` per second and a burst ``b``, a
principal may make ``b`` calls at once and then ``r`` per second; beyond that a call is refused
and told how long to wait. One float per principal (its theoretical arrival time), updated in
place; principals whose time has passed are pruned when the table has doubled since the last
pruning, so its size follows the principals active within a burst's worth of seconds and the
pruning costs O(1) per call, amortized.

Why not the ``limits`` package: its in-memory storage (5.8) expires keys with a timer thread that
scans every key every 10 ms, taking the GIL from the event loop each time: a cost per principal,
not per call (docs/api.md#limits).

Who a principal is (:func:`principal_of`): the bearer token's user; a service token's client
certificate CN (mutual TLS), else its subject; for a call without a valid token, the client
certificate's CN, else the peer's address.
"""

from __future__ import annotations

import time
from typing import Callable, Hashable

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

#: Principals the table holds before its first pruning.
MIN_PRUNE = 1024


class RateLimiter:
    """GCRA: ``rate`` calls per second, ``burst`` at once, per key."""

    __slots__ = ("interval", "tolerance", "_now", "_tat", "_prune_at")

    def __init__(self, rate: float, burst: int, *, now: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.interval = 1.0 / rate
        #: how far ahead of now a principal's theoretical arrival time may run: burst - 1 calls
        self.tolerance = (burst - 1) * self.interval
        self._now = now
        self._tat: dict[Hashable, float] = {}
        self._prune_at = MIN_PRUNE

    def __len__(self) -> int:
        return len(self._tat)

    def acquire(self, key: Hashable) -> float:
        """0.0 when ``key`` may call now (the call is counted); else the seconds until it may."""
        now = self._now()
        tat = self._tat.get(key, now)
        if tat < now:
            tat = now
        wait = tat - now - self.tolerance
        if wait > 1e-9:  # float rounding: a client that waited as told is admitted
            return wait
        self._tat[key] = tat + self.interval
        if len(self._tat) >= self._prune_at:
            self._prune(now)
        return 0.0

    def _prune(self, now: float) -> None:
        """Forget principals whose theoretical arrival time has passed (they start afresh anyway)."""
        self._tat = {k: t for k, t in self._tat.items() if t > now}
        self._prune_at = max(MIN_PRUNE, 2 * len(self._tat))


def peer_host(peer: str) -> str:
    """The address of a gRPC peer string without its port: ``ipv4:10.0.0.1:5000`` -> ``ipv4:10.0.0.1``."""
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() and host else peer


def certificate_name(context: grpc.aio.ServicerContext) -> str | None:
    """The CN of the client certificate verified on this call's connection (mutual TLS), or None."""
    names = context.auth_context().get("x509_common_name")
    if not names:
        return None
    name = names[0]
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def retry_later(message: str, retry_after_s: float) -> grpc.Status:
    """A RESOURCE_EXHAUSTED status whose details carry ``google.rpc.RetryInfo``: when to try again."""
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(max(1_000_000, int(retry_after_s * 1e9)))  # at least 1 ms
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return rpc_status.to_status(status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message,
                                                  details=[detail]))
