"""Prometheus collectors of one server, in its own registry (several servers can live in one process).

=====================================  =========  ===========================================
``feed_grpc_requests_total``           counter    calls by ``method`` and gRPC ``code``
``feed_grpc_request_duration_seconds`` histogram  call latency by ``method`` and ``code``
``feed_grpc_in_flight``                gauge      calls being served, by ``method``
``feed_watch_streams``                 gauge      open WatchHomeTimeline streams
``feed_profile_cache_total``           counter    profile cache lookups by ``result`` (hit|miss)
``feed_store_connected``               gauge      1 while the Cassandra session is up
=====================================  =========  ===========================================
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Fine resolution below the 25 ms p99 target, coarse above it.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("feed_grpc_requests", "gRPC calls by method and status code",
                                ("method", "code"), registry=r)
        self.latency = Histogram("feed_grpc_request_duration_seconds", "gRPC call latency by method and status code",
                                 ("method", "code"), buckets=LATENCY_BUCKETS, registry=r)
        self.in_flight = Gauge("feed_grpc_in_flight", "gRPC calls being served", ("method",), registry=r)
        self.watch_streams = Gauge("feed_watch_streams", "open WatchHomeTimeline streams", registry=r)
        self.profile_cache = Counter("feed_profile_cache", "profile cache lookups", ("result",), registry=r)
        self.store_connected = Gauge("feed_store_connected", "1 while the Cassandra session is up", registry=r)
        self._children: dict[tuple[str, str], tuple] = {}
        self._in_flight: dict[str, Gauge] = {}

    def in_flight_of(self, method: str) -> Gauge:
        """The in-flight gauge child of ``method`` (looked up once: label lookup takes a lock)."""
        child = self._in_flight.get(method)
        if child is None:
            child = self._in_flight[method] = self.in_flight.labels(method)
        return child

    def observe(self, method: str, code: str, seconds: float) -> None:
        children = self._children.get((method, code))
        if children is None:  # label lookup is the slow part of prometheus_client: do it once per pair
            children = self._children[(method, code)] = (
                self.requests.labels(method, code), self.latency.labels(method, code)
            )
        children[0].inc()
        children[1].observe(seconds)

    def start_http(self, host: str, port: int):
        """Serve ``/metrics`` from a daemon thread; returns the HTTP server (``.server_port``)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server
