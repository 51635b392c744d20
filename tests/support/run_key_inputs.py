"""The inputs of the stateful operator's per-key step (:func:`spark_jobs.timeline_join.run_key`)
without Spark: events as the routed rows the Row API hands over, and an edges reader for keys that
have no edges part (tests/unit/test_run_key.py, test_view_changes.py; the stream's and the backfill's
paths of :mod:`tests.support.per_reader_stream` and :mod:`tests.support.backfill_stages`)."""

from __future__ import annotations

from feed_service.core.event_kinds import KIND_OF_CLASS
from feed_service.core.events import Event, TweetDelete, join_keys
from spark_jobs.envelope import EVENT_COLUMNS

#: The envelope ``type`` of each event class (the registry's).
TYPES = {cls: kind.type for cls, kind in KIND_OF_CLASS.items()}


class Routed:
    """A routed row as the Row API hands it over: the event columns as attributes (absent ones
    ``None``), its envelope ``type`` and ``op`` (a tweet delete's ``delete``, ``upsert`` for an
    event without one), and ``key``: the group's join key, by default the event's first."""

    def __init__(self, event: Event, key: str | None = None) -> None:
        for name, _ in EVENT_COLUMNS:
            setattr(self, name, getattr(event, name, None))
        self.type = TYPES[type(event)]
        self.op = getattr(event, "op", "delete" if type(event) is TweetDelete else "upsert")
        self.key = key if key is not None else join_keys(event)[0]


def no_edges() -> bytes | None:
    """The edges reader of a key whose edges are stored inline: reading it fails the test."""
    raise AssertionError("a key whose edges are stored inline has no edges part to read")
