"""Prometheus collectors of one server, in its own registry (several servers can live in one process).

=====================================  =========  ===========================================
``feed_grpc_requests_total``           counter    calls by ``method`` and gRPC ``code``
``feed_grpc_request_duration_seconds`` histogram  call latency by ``method`` and ``code``
``feed_grpc_in_flight``                gauge      calls being served, by ``method``
``feed_watch_streams``                 gauge      open WatchHomeTimeline streams
``feed_profile_cache_total``           counter    profile cache lookups by ``result`` (hit|miss)
``feed_store_connected``               gauge      1 while the Cassandra session is up
``feed_publish_to_visible_seconds``    histogram  source event's Kafka timestamp -> change applied here
``feed_view_changes_total``            counter    view changes applied, by ``kind``
``feed_view_change_errors_total``      counter    change messages that could not be read (a gap)
``feed_view_change_gaps_total``        counter    gaps: caches dropped, watchers re-read
``feed_read_cache_total``              counter    read cache lookups by ``result`` (hit|miss)
``feed_read_cache_evictions_total``    counter    cached timelines evicted (least recently read)
``feed_read_cache_timelines``          gauge      timelines, pull authors and lists cached
``feed_watch_messages_total``          counter    messages pushed to watch streams
``feed_read_reports_total``            counter    read-activity reports by ``result`` (delivered|failed;
                                                  docs/activity.md#read-activity)
``feed_read_report_readers``           gauge      readers reported within the interval (the TTL'd set)
=====================================  =========  ===========================================
"""

from __future__ import annotations

from typing import Any, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

#: Publish-to-visible: the stream's micro-batches take a second or more, so seconds matter here.
FRESHNESS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0)
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
        self.freshness = Histogram("feed_publish_to_visible_seconds",
                                   "seconds from a source event's Kafka timestamp to this server applying its change",
                                   buckets=FRESHNESS_BUCKETS, registry=r)
        self.view_changes = Counter("feed_view_changes", "view changes applied", ("kind",), registry=r)
        self.view_change_errors = Counter("feed_view_change_errors", "change messages that could not be read",
                                          registry=r)
        self.view_change_gaps = Counter("feed_view_change_gaps", "gaps in the view changes (caches dropped)",
                                        registry=r)
        self.watch_messages = Counter("feed_watch_messages", "messages pushed to watch streams", registry=r)
        self.read_reports = Counter("feed_read_reports", "read-activity reports by result (delivered|failed)",
                                    ("result",), registry=r)
        self.read_report_readers = Gauge("feed_read_report_readers",
                                         "readers reported by this process within the report interval", registry=r)
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

    def watch_read_cache(self, cache: Any) -> None:
        """Export ``cache``'s counts (``hits``, ``misses``, ``evictions``, ``len``) when scraped: no
        cost on the read path."""
        self.registry.register(_ReadCacheCollector(cache))

    def start_http(self, host: str, port: int):
        """Serve ``/metrics`` from a daemon thread; returns the HTTP server (``.server_port``)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server


class _ReadCacheCollector:
    """``feed_read_cache_*`` read from the cache's own counters at scrape time."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Any]:
        lookups = CounterMetricFamily("feed_read_cache", "read cache lookups", labels=("result",))
        lookups.add_metric(("hit",), self.cache.hits)
        lookups.add_metric(("miss",), self.cache.misses)
        yield lookups
        yield CounterMetricFamily("feed_read_cache_evictions", "cached timelines evicted", value=self.cache.evictions)
        yield GaugeMetricFamily("feed_read_cache_timelines", "timelines, pull authors and lists cached",
                                value=len(self.cache))
