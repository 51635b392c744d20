"""Serve the stream's metrics (spark_jobs/stream/metrics.py) on ``/metrics``, with the consumer lag
refreshed in the background from the topics' watermarks."""

from __future__ import annotations

import logging
from typing import Callable

from feed_service.kafka.offsets import watermarks
from feed_service.settings import Settings
from spark_jobs.stream.metrics import LAG_TIMEOUT_SECONDS, LagRefresher, StreamMetrics
from spark_jobs.stream.options import StreamOptions

log = logging.getLogger("feed.stream")


def serve_metrics(settings: Settings, options: StreamOptions) -> tuple[StreamMetrics, Callable[[], None]]:
    """The stream's metrics and, unless ``options.metrics_port`` is 0, their ``/metrics`` endpoint and
    the consumer-lag refresher; returns the metrics and what stops both.

    An address that cannot be bound is logged as an error and the stream runs without the endpoint:
    the view matters more than its figures.
    """
    metrics = StreamMetrics()
    if not options.metrics_port:
        return metrics, lambda: None
    try:
        http = metrics.start_http(options.metrics_host, options.metrics_port)
    except OSError as exc:
        log.error("metrics endpoint not started (the stream runs without it): cannot listen on %s:%d: %s",
                  options.metrics_host, options.metrics_port, exc)
        return metrics, lambda: None
    log.info("metrics on http://%s:%d/metrics", options.metrics_host, http.server_port)
    lag = LagRefresher(metrics, lambda: watermarks(settings, timeout=LAG_TIMEOUT_SECONDS)).start()

    def stop() -> None:
        lag.stop()
        http.shutdown()
        http.server_close()

    return metrics, stop
