"""Changes that race a page being served: a scripted change feed that says whether changes are
pending, and a store whose next profile read first delivers them, so that they land while the read
cache's server hydrates a page (tests/unit/test_read_cache_pages.py, test_server_reposts_replies.py)."""

from __future__ import annotations

from typing import Any

from feed_service.store.memory import MemoryStore

from .model import ScriptedFeed


class PendingFeed(ScriptedFeed):
    """:class:`tests.support.model.ScriptedFeed` (one partition; ``deliver`` applies what is pending)
    that also says whether changes are pending."""

    @property
    def pending(self) -> bool:
        return self.position[0] < len(self.topic)


class DeliveringStore(MemoryStore):
    """A store whose next profile read first applies the pending changes of ``feed`` (``arm``):
    changes that land while a page is being hydrated; ``fired`` says that it did."""

    def __init__(self) -> None:
        super().__init__()
        self.feed: PendingFeed | None = None
        self.armed = False
        self.fired = False

    async def profiles(self, keys: Any, *, timeout: Any) -> Any:
        if self.armed and self.feed is not None and self.feed.pending:
            self.armed, self.fired = False, True
            self.feed.deliver()
        return await super().profiles(keys, timeout=timeout)
