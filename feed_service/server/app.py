"""``TimelineServer``: the grpc.aio server around :class:`TimelineServicer`, with its lifecycle.

Lifecycle (:class:`ServerState`)::

    CREATED --start()--> SERVING --stop()--> STOPPING --> STOPPED

``start(port)`` binds (0: any free port), returns the bound port and serves at once. Cassandra is
connected in the background and retried with backoff: until it is up, calls fail with UNAVAILABLE
and the health status is NOT_SERVING (a Kubernetes readiness probe keeps traffic away), so a
Cassandra outage at start-up neither crashes the server nor yields empty timelines.

``stop(grace)`` (SIGTERM in ``feedctl serve``): health turns NOT_SERVING, new calls are refused,
watch streams end cleanly (status OK, with a resume token already sent), in-flight unary calls get
``grace`` seconds to finish, then the Cassandra session closes.

Health (``grpc.health.v1.Health``, services ``""`` and ``feed.v1.TimelineService``) and server
reflection are served without a token, on the same port and so with the same transport: plaintext,
TLS or mutual TLS (:mod:`.tls`, docs/api.md#tls). The abuse limits (docs/api.md#limits) are set
here: gRPC's own caps on a request's size and its metadata, and the rate limiters the calls share.

Unless ``FEED_INACTIVE_AFTER_S`` is 0, home reads and watch starts are reported to the ``reads``
topic (:mod:`.activity`, docs/activity.md#read-activity); the producer gets a moment at ``stop`` to
deliver what it holds.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
import time
from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection

from feed_service.api import timeline_pb2 as pb
from feed_service.kafka.read_activity import ReadActivityProducer
from feed_service.server.activity import CLOSE_FLUSH_S, ReadReporter
from feed_service.server.registration import add_health, add_timeline_service
from feed_service.server.config import ServerConfig
from feed_service.server.metrics import ServerMetrics
from feed_service.core.view_changes import ProfileChange
from feed_service.server.change_feed import ChangeFeed, Consumed
from feed_service.server.rate_limit import RateLimiter
from feed_service.server.read_cache import FLAG_RECHECK_S, ReadCache
from feed_service.server.tls import server_credentials
from feed_service.server.service import TimelineServicer
from feed_service.server.watch_hub import WatchHub
from feed_service.errors import StoreError
from feed_service.settings import Settings
from feed_service.store.cassandra_reader import CassandraReader
from feed_service.store.ports import TimelineStore

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TimelineService"].full_name  # feed.v1.TimelineService
RECONNECT_MIN_S = 0.5
RECONNECT_MAX_S = 10.0
#: ``feed_view_changes_total`` label of each change type (the message's ``kind``).
_KIND_LABELS = {"TimelineChange": "timeline", "AuthorChange": "author", "PullFollowChange": "pull_follow",
                "ProfileChange": "profile", "BlockRowChange": "block", "ExtrasChange": "extras",
                "UserRepostChange": "user_repost", "VisibleChange": "visible", "PullReposterChange": "pull_reposter",
                "HiddenChange": "hidden", "ExcludedChange": "excluded", "ListChange": "list"}

log = logging.getLogger("feed_service.server")


class ServerState(enum.Enum):
    CREATED = "created"
    SERVING = "serving"
    STOPPING = "stopping"
    STOPPED = "stopped"


class TimelineServer:
    """One gRPC server. ``store`` injects a ready store (tests; the caller keeps ownership);
    otherwise the server connects ``store_factory`` (default: Cassandra from ``config.settings``).
    ``report_reads(reader_id, value)`` injects where read reports go (tests; default: the ``reads``
    topic)."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        store: TimelineStore | None = None,
        store_factory: Callable[[], TimelineStore] | None = None,
        reuse_port: bool = False,
        now: Callable[[], float] = time.time,
        report_reads: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.config = config.validated()
        self.secret = config.auth_secret if config.auth_secret is not None else secrets.token_bytes(32)
        self.metrics = ServerMetrics()
        self._store = store
        self._owns_store = store is None
        self._store_factory = store_factory or (lambda: CassandraReader.connect(config.settings))
        self._store_error = "connecting"
        self._reuse_port = reuse_port
        self._now = now
        self.state = ServerState.CREATED
        self.port: int | None = None
        self.metrics_port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._servicer: TimelineServicer | None = None
        self._connect_task: asyncio.Task | None = None
        self._metrics_http = None
        self._feed_task: asyncio.Task | None = None
        self._feed: ChangeFeed | None = None
        self._kind_counts: dict[str, int] = {}
        self._kind_children: dict[str, object] = {}
        self._report_reads = report_reads
        self._read_reports: ReadActivityProducer | None = None

    @property
    def servicer(self) -> TimelineServicer:
        if self._servicer is None:
            raise RuntimeError("the server has not been started")
        return self._servicer

    def store_connected(self) -> bool:
        return self._store is not None

    async def start(self, port: int | None = None) -> int:
        """Bind ``port`` (default: the configured one; 0 = any free port), serve, return the bound port."""
        if self.state is not ServerState.CREATED:
            raise RuntimeError(f"cannot start a server that is {self.state.value}")
        cfg = self.config
        self._servicer = TimelineServicer(
            store=lambda: self._store, store_status=lambda: self._store_error, secret=self.secret,
            metrics=self.metrics, request_timeout_s=cfg.request_timeout_s, watch_poll_s=cfg.watch_poll_s,
            profile_cache_size=cfg.profile_cache_size, access_log=cfg.access_log, now=self._now,
            inbox_cap=cfg.settings.inbox_cap, pull_cache_ttl_s=cfg.pull_cache_ttl_s,
            user_limiter=RateLimiter(cfg.rate_limit_per_s, cfg.rate_limit_burst) if cfg.rate_limit_per_s else None,
            service_limiter=(RateLimiter(cfg.rate_limit_service_per_s,
                                         max(cfg.rate_limit_burst, int(cfg.rate_limit_service_per_s)))
                             if cfg.rate_limit_service_per_s else None),
            max_watches_per_user=cfg.max_watches_per_user,
        )
        credentials = server_credentials(cfg)  # the files are read now (ConfigError if unreadable)
        server = grpc.aio.server(
            options=[("grpc.so_reuseport", 1 if self._reuse_port else 0),
                     ("grpc.max_receive_message_length", cfg.max_request_bytes),
                     # soft and hard limit alike: above the soft one gRPC refuses calls at random
                     ("grpc.max_metadata_size", cfg.max_metadata_bytes),
                     ("grpc.absolute_max_metadata_size", cfg.max_metadata_bytes),
                     # calls waiting for the service: a reconnect storm of watches (docs/api.md#limits)
                     ("grpc.server.max_pending_requests", cfg.max_pending_requests),
                     ("grpc.server.max_pending_requests_hard_limit", cfg.max_pending_requests_hard_limit)],
            maximum_concurrent_rpcs=cfg.max_concurrent_rpcs,
        )
        add_timeline_service(self._servicer, server)
        self._health = health.aio.HealthServicer()
        add_health(self._health, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            server,
        )
        address = f"{cfg.host}:{cfg.port if port is None else port}"
        bound = (server.add_insecure_port(address) if credentials is None
                 else server.add_secure_port(address, credentials))
        if not bound:
            raise OSError(f"cannot bind the gRPC server to {address}")
        self._start_read_activity()  # before the first call is admitted
        await server.start()
        self._server, self.port = server, bound
        if cfg.metrics_port is not None:
            self._metrics_http = self.metrics.start_http(cfg.metrics_host, cfg.metrics_port)
            self.metrics_port = self._metrics_http.server_port
        self.state = ServerState.SERVING
        if self._store is not None:
            await self._set_serving(True)
        else:
            await self._set_serving(False)
            self._connect_task = asyncio.create_task(self._connect_loop(), name="cassandra-connect")
        if cfg.change_feed:
            self._feed_task = asyncio.create_task(self._feed_loop(), name="view-changes")
        log.info("serving", extra={"fields": {"port": bound, "metrics_port": self.metrics_port,
                                              "tls": "mutual" if cfg.client_ca_file else cfg.tls,
                                              "keyspace": cfg.settings.keyspace, "demo": cfg.demo,
                                              "read_reports": self.servicer.read_activity is not None}})
        return bound

    def _start_read_activity(self) -> None:
        """Report home reads to the stream's driver unless FEED_INACTIVE_AFTER_S=0 (docs/activity.md).
        The producer connects in the background: a broker down now only fails (and counts) reports."""
        settings = self.config.settings
        if not settings.inactive_after_s:
            return
        delivered, failed = (self.metrics.read_reports.labels(result) for result in ("delivered", "failed"))
        produce = self._report_reads
        if produce is None:
            self._read_reports = ReadActivityProducer(settings, on_delivered=delivered.inc, on_failure=failed.inc)
            produce = self._read_reports.produce
        reporter = ReadReporter(produce, interval_s=settings.read_report_interval_s, on_failure=failed.inc)
        self.metrics.read_report_readers.set_function(reporter.__len__)
        self.servicer.attach_read_activity(reporter)

    async def _set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            await self._health.set(name, status)
        self.metrics.store_connected.set(1 if serving else 0)

    async def _connect_loop(self) -> None:
        delay = RECONNECT_MIN_S
        settings = self.config.settings
        while self.state is ServerState.SERVING:
            try:
                store = await asyncio.to_thread(self._store_factory)
            except Exception as exc:  # StoreError, or a bug: either way keep serving UNAVAILABLE and retry
                self._store_error = str(exc) if isinstance(exc, StoreError) else f"{type(exc).__name__}: {exc}"
                log.warning("cassandra connect failed", extra={"fields": {
                    "hosts": list(settings.cassandra_hosts), "port": settings.cassandra_port,
                    "retry_in_s": delay, "error": str(exc)}})
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)
                continue
            if self.state is not ServerState.SERVING:  # stopped while connecting
                await asyncio.to_thread(store.close)
                return
            self._store, self._store_error = store, ""
            await self._set_serving(True)
            log.info("cassandra connected", extra={"fields": {"keyspace": settings.keyspace}})
            return

    async def _feed_loop(self) -> None:
        """Consume the view's change topic (retried with backoff until it can be read); until then
        watches poll and reads bypass the read cache (docs/api.md#watch)."""
        delay = RECONNECT_MIN_S
        cfg = self.config
        while self.state is ServerState.SERVING:
            feed = ChangeFeed(cfg.settings, on_batch=self._apply_changes, on_gap=self._changes_lost,
                              on_undecodable=self.metrics.view_change_errors.inc)
            try:
                await feed.start()
            except Exception as exc:  # noqa: BLE001 - Kafka down or topic missing: serve without it, retry
                feed.close()
                log.warning("view changes not consumed", extra={"fields": {"error": str(exc), "retry_in_s": delay}})
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)
                continue
            if self.state is not ServerState.SERVING:
                feed.close()
                return
            self._feed = feed
            cache = (ReadCache(feed, depth=cfg.read_cache_depth, max_keys=cfg.read_cache_keys,
                               flag_recheck_s=flag_recheck_s(cfg.settings))
                     if cfg.read_cache_keys > 0 else None)
            if cache is not None:
                self.metrics.watch_read_cache(cache)
            self.servicer.attach_changes(feed, cache, WatchHub())
            return

    async def changes_applied(self, timeout: float = 30.0) -> bool:
        """Wait until every view change published so far has been applied here (True), or
        ``timeout`` (False); True at once when the change topic is not consumed. For tests and
        benchmarks that compare reads with Cassandra right after the stream caught up."""
        feed = self._feed
        if feed is None or not feed.live:
            return True
        highs = await feed.high_watermarks_after(time.monotonic())
        return await feed.wait_reached(highs, timeout)

    def _apply_changes(self, batch: list[Consumed]) -> None:
        """One polled batch of view changes, on the loop: cache, watchers, metrics."""
        servicer = self.servicer
        if servicer.read_cache is not None:
            servicer.read_cache.apply(batch)
        if servicer.hub is not None:
            servicer.hub.route(batch)
        now_ms = time.time() * 1000
        observe, counts = self.metrics.freshness.observe, self._kind_counts
        forget_missing = getattr(servicer.cache, "forget_missing", None)
        for consumed in batch:
            change = consumed.change
            kind = type(change).__name__
            counts[kind] = counts.get(kind, 0) + 1
            if change.source_ms is not None:
                observe(max(0.0, (now_ms - change.source_ms) / 1000))
            if forget_missing is not None and isinstance(change, ProfileChange):
                forget_missing((change.user_id, change.version))
        for kind, n in counts.items():
            if n:
                self._kind_child(kind).inc(n)
                counts[kind] = 0

    def _kind_child(self, kind: str):
        child = self._kind_children.get(kind)
        if child is None:
            child = self._kind_children[kind] = self.metrics.view_changes.labels(_KIND_LABELS.get(kind, kind))
        return child

    def _changes_lost(self, reason: str) -> None:
        self.metrics.view_change_gaps.inc()
        servicer = self.servicer
        if servicer.read_cache is not None:
            servicer.read_cache.drop_all(reason)
        if servicer.hub is not None:
            servicer.hub.gap()

    async def stop(self, grace: float | None = None) -> None:
        """Drain and stop (idempotent): NOT_SERVING, end watch streams, wait ``grace`` s for calls."""
        if self.state in (ServerState.STOPPING, ServerState.STOPPED) or self._server is None:
            self.state = ServerState.STOPPED if self._server is None else self.state
            return
        grace = self.config.shutdown_grace_s if grace is None else grace
        self.state = ServerState.STOPPING
        log.info("stopping", extra={"fields": {"grace_s": grace}})
        await self._health.enter_graceful_shutdown()
        self._servicer.stop_watches()
        for task in (self._connect_task, self._feed_task):
            if task is not None:
                task.cancel()
        await self._server.stop(grace)
        if self._read_reports is not None:
            reports, self._read_reports = self._read_reports, None
            await asyncio.to_thread(reports.close, min(grace, CLOSE_FLUSH_S))
        if self._metrics_http is not None:
            self._metrics_http.shutdown()
        if self._feed is not None:
            feed, self._feed = self._feed, None
            await asyncio.to_thread(feed.close)
        if self._owns_store and self._store is not None:
            store, self._store = self._store, None
            await asyncio.to_thread(store.close)
        self.state = ServerState.STOPPED
        log.info("stopped")

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()


def flag_recheck_s(settings: Settings) -> float:
    """How long the read cache trusts a kept inbox's flag (docs/activity.md#exact-reads-without-an-inbox):
    :data:`FLAG_RECHECK_S`, less where a short ``FEED_INACTIVE_AFTER_S`` (a demo, a test) could drop a
    reader sooner: a quarter of the time between the last report of a reader's reads and its drop."""
    if not settings.inactive_after_s:
        return FLAG_RECHECK_S
    return max(0.5, min(FLAG_RECHECK_S, (settings.inactive_after_s - settings.read_report_interval_s) / 4))
