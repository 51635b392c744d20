"""The configuration of a unit test's loopback gRPC server (:class:`~feed_service.server.testing.ServerThread`)
over an in-memory store (tests/unit/test_server_hybrid.py, test_server_reposts_replies.py,
test_read_cache_pages.py)."""

from __future__ import annotations

from typing import Any

from feed_service.server.config import ServerConfig
from feed_service.server.testing import TEST_SECRET


def loopback_config(**kw: Any) -> ServerConfig:
    """A :class:`ServerConfig` with the test secret, no metrics port, no change feed, no pull cache,
    watches polling every 50 ms, a 1 s shutdown grace and no rate limit; ``kw`` overrides any of them."""
    base = dict(auth_secret=TEST_SECRET, metrics_port=None, watch_poll_s=0.05, shutdown_grace_s=1.0, change_feed=False,
                pull_cache_ttl_s=0.0,
                rate_limit_per_s=0)  # many calls per user at once: the limits have their own tests
    return ServerConfig(**{**base, **kw})
