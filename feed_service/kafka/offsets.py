"""Where the changelog topics stand: the low and high watermark of every partition.

The backfill snapshots them (it reads ``[low, high)`` and the stream continues at ``high``); the
stream runner compares them with the stream's progress to know when it has caught up.
"""

from __future__ import annotations

from typing import Iterable

from feed_service.core.event_kinds import CHANGELOG_ROLES, TOPIC_ROLES
from feed_service.errors import PipelineError
from feed_service.kafka.client_config import client_config
from feed_service.security.roles import STREAM
from feed_service.settings import Settings

Offsets = dict[str, dict[str, int]]
"""Spark's JSON offsets shape: topic -> partition (as a string) -> offset."""

SOURCE_ROLES: tuple[str, ...] = TOPIC_ROLES
"""The topics the stream reads: the topic roles of the registry of event kinds, the changelogs
(tweets, follows, profiles, blocks_mutes, reposts, lists, list_members) and the stream's own refill
requests and list edges (list follows and exclusions). A role
added there reaches a stream restarted on an existing checkpoint from the topic's beginning
(docs/streaming.md, "Blocks and mutes")."""

CHANGELOG_SOURCE_ROLES: tuple[str, ...] = CHANGELOG_ROLES
"""The changelog topics the view is computed from: what the backfill reads (the stream's own refill
requests and list edges are no table's changes; a backfill's snapshot still records their end, where
the stream continues)."""


def watermarks(settings: Settings, roles: Iterable[str] = SOURCE_ROLES, *,
               timeout: float = 30.0) -> tuple[Offsets, Offsets]:
    """(low, high) watermarks of every partition of the topics of ``roles``, read now.

    A missing topic raises :class:`~feed_service.errors.PipelineError` (not provisioned, or the
    settings of another pipeline). Reads as ``settings.role`` (the stream's or the backfill's), else
    the stream role: listing offsets needs ``describe`` on the topics, no group access.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(client_config(settings, STREAM) | {"group.id": "feed-watermarks",
                                                           "enable.auto.commit": False})
    try:
        low: Offsets = {}
        high: Offsets = {}
        for role in roles:
            topic = settings.topic(role)
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise PipelineError(f"topic {topic!r} ({role}) not found: {getattr(meta, 'error', None)}")
            low[topic], high[topic] = {}, {}
            for p in sorted(meta.partitions):
                lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                low[topic][str(p)], high[topic][str(p)] = lo, hi
        return low, high
    finally:
        consumer.close()
