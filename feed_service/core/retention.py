"""The history horizon: how long the pipeline remembers what no longer shows, and the settings of
Kafka and Cassandra that must agree with it (docs/retention.md).

The join keeps, per author key, the versions of dead follow edges, the tombstones of deleted tweets
and the digests of live tweets pushed out of the newest ``inbox_cap`` (``cold``): they are what
stops a late or replayed older change from undoing a newer one. Kept for ever, they grow with the
key's whole history. With a horizon ``H`` a key rejects every change whose own event time is more
than ``H`` behind the key's *watermark* (its newest event time, Kafka record timestamps): a dead
letter with reason ``beyond_horizon``; and it forgets a history entry once the entry's stamp (the
watermark when it was last changed) is more than ``2H`` behind. The factor two is what makes the
guarantee exact: any change still accepted was published more than ``H`` after everything
forgotten, so the producers' version clocks need only order changes of one entity that are more
than ``H`` apart (docs/retention.md states the guarantee and its two producer assumptions).

Kafka and Cassandra hold the same kind of history, and each must keep it at least as long:

- changelog topics (compacted): ``delete.retention.ms`` = ``H``, so a consumer that is less than ``H``
  behind still reads every delete marker compaction leaves;
- Cassandra tables: ``gc_grace_seconds`` = ``H``, so a tombstone the view wrote (a delete, an unfollow's
  removal, a trim) outlives every write the pipeline can still make for that row.

:class:`Retention` is the one place those values come from: provisioning (``feed_service/kafka/topics.py``,
``feed_service/store/schema.py``) and the engine both read it, so the three cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HISTORY_HORIZON_S = 864_000
"""Ten days: Cassandra's own default ``gc_grace_seconds`` (its repair cycle is planned around it),
far longer than any replay window of the stream, and two orders of magnitude above edit windows."""

BEYOND_HORIZON = "beyond_horizon"
"""Reason code of a change rejected for being older than its key's horizon (dead letter, CLI reject)."""

NO_WATERMARK = -1
"""The watermark of a key that has seen no timed event: nothing is forgotten or rejected."""


@dataclass(frozen=True, slots=True)
class Retention:
    """A history horizon, in milliseconds of event time; ``None`` keeps everything (no horizon).

    >>> r = Retention(horizon_ms=1_000)
    >>> r.floor(5_000), r.forget_floor(5_000), r.beyond(3_999, watermark=5_000), r.beyond(4_000, watermark=5_000)
    (4000, 3000, True, False)
    >>> Retention(None).beyond(0, watermark=10**12)
    False
    >>> Retention.from_seconds(864_000).cassandra_gc_grace_seconds()
    864000
    """

    horizon_ms: int | None

    def __post_init__(self) -> None:
        if self.horizon_ms is not None and (type(self.horizon_ms) is not int or self.horizon_ms < 1):
            raise ValueError(f"history horizon must be a positive number of ms or None, got {self.horizon_ms!r}")

    @classmethod
    def from_seconds(cls, seconds: int | None) -> Retention:
        """The horizon of a setting given in seconds (``0`` or ``None``: keep everything)."""
        return cls(seconds * 1000 if seconds else None)

    @property
    def enabled(self) -> bool:
        return self.horizon_ms is not None

    def floor(self, watermark: int) -> int:
        """Event times strictly below this are beyond the horizon of a key at ``watermark``."""
        if self.horizon_ms is None or watermark == NO_WATERMARK:
            return NO_WATERMARK
        return watermark - self.horizon_ms

    def forget_floor(self, watermark: int) -> int:
        """History entries stamped strictly below this may be forgotten (two horizons back)."""
        if self.horizon_ms is None or watermark == NO_WATERMARK:
            return NO_WATERMARK
        return watermark - 2 * self.horizon_ms

    def beyond(self, event_time: int, *, watermark: int) -> bool:
        """Whether a change at ``event_time`` is too old for a key whose watermark is ``watermark``."""
        return event_time < self.floor(watermark)

    def kafka_changelog_config(self) -> dict[str, str]:
        """Configs every compacted changelog topic must carry for this horizon."""
        if self.horizon_ms is None:
            return {}
        return {"delete.retention.ms": str(self.horizon_ms)}

    def cassandra_gc_grace_seconds(self) -> int | None:
        """``gc_grace_seconds`` of every table the view writes tombstones to (None: leave the schema's)."""
        if self.horizon_ms is None:
            return None
        return -(-self.horizon_ms // 1000)


def beyond_horizon_reason(event_time: int, watermark: int, retention: Retention) -> str:
    """The human reason of a ``beyond_horizon`` rejection.

    >>> beyond_horizon_reason(1_000, 100_000, Retention(60_000))
    'event time 1000 is 99000 ms behind its key (watermark 100000); the history horizon is 60000 ms'
    """
    return (f"event time {event_time} is {watermark - event_time} ms behind its key (watermark {watermark});"
            f" the history horizon is {retention.horizon_ms} ms")
