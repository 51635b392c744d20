"""Publish change events to the changelog topics: the producer library's public surface.

The pieces live in :mod:`feed_service.producing` (one job per module):

- :mod:`~feed_service.producing.producer`  :class:`EventProducer`, record keys, the exception tree
- :mod:`~feed_service.producing.versions`  :class:`VersionClock` (where versions come from)
- :mod:`~feed_service.producing.schema`    the JSON Schema check of envelopes
- :mod:`~feed_service.producing.replay`    :func:`publish_lines` for replay files

See ``docs/producers.md``.
"""

from feed_service.producing.producer import (
    PRODUCER_DEFAULTS,
    DeliveryFailed,
    EventProducer,
    EventRejected,
    FailedDelivery,
    ProducerClosed,
    ProducerError,
    ProducerStats,
    record_key,
    topic_role,
)
from feed_service.producing.replay import ReplayStats, publish_lines
from feed_service.producing.schema import EnvelopeCheck, load_envelope_check
from feed_service.producing.versions import VersionClock

__all__ = [
    "PRODUCER_DEFAULTS",
    "DeliveryFailed",
    "EnvelopeCheck",
    "EventProducer",
    "EventRejected",
    "FailedDelivery",
    "ProducerClosed",
    "ProducerError",
    "ProducerStats",
    "ReplayStats",
    "VersionClock",
    "load_envelope_check",
    "publish_lines",
    "record_key",
    "topic_role",
]
