"""Restart a running stack's Kafka and Cassandra nodes one at a time (a certificate rotation).

Each node is stopped, started again and probed healthy before the next one goes down, so a cluster
(three brokers, a three-node ring at quorum) keeps accepting writes and reads throughout; a
single-node stack is simply down for its restart.
"""

from __future__ import annotations

import time

from feed_service.stack.local_stack import LocalStack


def rolling_restart(stack: LocalStack) -> dict[str, float]:
    """Restart every broker, then every Cassandra node, one at a time; seconds each took to be healthy."""
    timings: dict[str, float] = {}
    for node in (*stack.kafka_nodes, *stack.cassandra_nodes):
        started = time.monotonic()
        node.process.stop()
        node.start()
        stack.wait_healthy(node)
        timings[f"{node.process.name} restarted"] = time.monotonic() - started
    return timings
