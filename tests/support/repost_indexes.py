"""The indexes by tweet of reposts (``home_extras_reposts``, ``reposts_by_tweet``;
docs/reposts-and-replies.md): what Cassandra holds after the writer's changes of them, in a
:class:`MemoryStore`, and what a view says they hold (tests/unit/test_pull_reposters_storage.py; on
the real node: tests/integration/test_per_reader_tables.py)."""

from __future__ import annotations

from typing import Any

from feed_service.core.view import TimelineView
from feed_service.store.cassandra_writer import extras_index, reposts_index
from feed_service.store.memory import MemoryStore


class IndexedStore(MemoryStore):
    """A MemoryStore that also keeps the indexes as Cassandra resolves the writer's changes of them
    (:func:`extras_index`, :func:`reposts_index`): per row the highest timestamp, a delete at a tie."""

    def __init__(self) -> None:
        super().__init__()
        self.indexes: dict[str, dict[tuple[str, str], tuple[int, bool, tuple | None]]] = {
            "home_extras_reposts": {}, "reposts_by_tweet": {}}

    def write(self, **kwargs: Any) -> Any:
        kwargs = {k: list(v) for k, v in kwargs.items()}
        counts = super().write(**kwargs)
        for table, changes in (("home_extras_reposts", extras_index(kwargs.get("extras", ()))),
                               ("reposts_by_tweet", reposts_index(kwargs.get("user_reposts", ())))):
            for key, e, ts in changes:
                values = None if e is None else (e.author_id, e.reposted_at, e.reposted_by)
                new = (ts, e is None, values)
                old = self.indexes[table].get(key)
                if old is None or new[:2] > old[:2]:
                    self.indexes[table][key] = new
        return counts

    def index(self, table: str) -> dict[tuple[str, str], tuple]:
        """The live rows of ``table``: (author, reposted_at, reposter) by key."""
        return {k: v for k, (_, _, v) in self.indexes[table].items() if v is not None}


def view_indexes(view: TimelineView) -> dict[str, dict[tuple[str, str], tuple]]:
    """The indexes the port derives from the view's ``home_extras`` and ``user_reposts``."""
    return {"home_extras_reposts": {(reader, e.tweet_id): (e.author_id, e.reposted_at, e.reposted_by)
                                    for reader, rows in view.extras.items() for e in rows.values() if e.reposted_by},
            "reposts_by_tweet": {(e.tweet_id, reposter): (e.author_id, e.reposted_at, e.reposted_by)
                                 for reposter, rows in view.own_reposts.items() for e in rows.values()}}
