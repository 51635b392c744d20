"""Late changes: what the history horizon rejects before a batch is folded (docs/retention.md).

The key's watermark first takes the batch's newest event time, so which changes are late does not
depend on their order inside the batch; a change more than the horizon behind it is not applied and
its position is reported (``StepResult.late``: a dead letter ``beyond_horizon`` in the stream).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from feed_service.core.events import Event, join_keys
from feed_service.core.join.fold import foreign
from feed_service.core.retention import Retention


class Timely(NamedTuple):
    """The changes a batch applies, the key's watermark after it and the positions it rejects."""

    changes: Sequence[Event]
    watermark: int
    late: tuple[int, ...]


def timely(key: str, watermark: int, changes: Sequence[Event], times: Sequence[int], retention: Retention
           ) -> Timely:
    """Split ``changes`` (event ``times``, one each) of a key at ``watermark`` into those applied
    and the positions of those beyond the horizon.

    >>> from feed_service.core.events import TweetDelete
    >>> t = timely("bob", 0, [TweetDelete("t1", "bob", 1), TweetDelete("t2", "bob", 1)], [5_000, 500], Retention(1_000))
    >>> [ev.tweet_id for ev in t.changes], t.watermark, t.late
    (['t1'], 5000, (1,))
    """
    if len(times) != len(changes):
        raise ValueError(f"step: {len(times)} times for {len(changes)} changes")
    if times:
        watermark = max(watermark, max(times))
    floor = retention.floor(watermark)
    late = tuple(i for i, t in enumerate(times) if t < floor)
    if late:
        for i in late:  # a foreign event must fail loudly even when it is late
            if key not in join_keys(changes[i]):
                foreign(changes[i], key)
        skip = set(late)
        changes = [ev for i, ev in enumerate(changes) if i not in skip]
    return Timely(changes=changes, watermark=watermark, late=late)
