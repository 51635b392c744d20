"""What the read cache (:mod:`.read_cache`) admits and evicts: a head is filled on a user's second
read in a while (:class:`SeenOnce`), and the least recently used heads go first, counted
(:class:`CountedLRU`)."""

from __future__ import annotations

from typing import Callable

from cachetools import LRUCache


class SeenOnce:
    """Users whose inbox was read once recently: the second read of a user fills a head, the first
    reads the store as without the cache. Most users read once in a while would only churn the
    cache (a head built, kept, evicted unread; and the garbage collector's full passes over all of
    them), so a fill waits for the evidence of a repeat. Two generations of at most ``size`` ids
    each: the older is forgotten whole when the newer fills up."""

    __slots__ = ("size", "_new", "_old")

    def __init__(self, size: int) -> None:
        self.size = size
        self._new: set[str] = set()
        self._old: set[str] = set()

    def again(self, key: str) -> bool:
        """Whether ``key`` was seen recently; remembers it either way."""
        if key in self._new:
            return True
        if len(self._new) >= self.size:
            self._old, self._new = self._new, set()
        self._new.add(key)
        return key in self._old


class CountedLRU(LRUCache):
    """LRU that counts its evictions."""

    def __init__(self, maxsize: int, on_evict: Callable[[], None]) -> None:
        super().__init__(maxsize)
        self._on_evict = on_evict

    def popitem(self):  # type: ignore[override]
        item = super().popitem()
        self._on_evict()
        return item
