"""Multi-partition reads that stay under Cassandra's tombstone limit: one token range at a time.

A query over many partitions (``SELECT DISTINCT timeline_id FROM home_timeline``, every row of
``reader_activity``) is one read per page on each replica, and a page goes on reading until it holds
its page of live rows: through every deleted row (tombstone) of every partition it crosses that has
none. Trimmed inboxes and dropped readers' inboxes (docs/trimming.md, docs/activity.md) leave such
partitions behind for ``gc_grace_seconds``, and a page that crosses more tombstones than
``tombstone_failure_threshold`` fails the whole scan with ``ReadFailure`` (READ_TOO_MANY_TOMBSTONES).
Smaller pages do not help: a page of 10 rows still crosses every dead partition between two live ones.

:func:`scan_by_token` reads ``token(key) > a AND token(key) <= b`` ranges instead, the ring cut in
:data:`INITIAL_RANGES` at first, and a range refused for its tombstones is split in two from the last
partition it returned, down to a single token. Each row of the query must be one partition (a
``SELECT DISTINCT`` of the partition key, or a table without clustering columns), so resuming after
the last token returned repeats and skips nothing (docs/operations.md#failure-modes-reads-and-scans).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from feed_service.errors import StoreError

if TYPE_CHECKING:
    from cassandra.cluster import Session

#: Murmur3Partitioner's ring: tokens in (MIN_TOKEN, MAX_TOKEN] (no key hashes to MIN_TOKEN).
MIN_TOKEN = -(2**63)
MAX_TOKEN = 2**63 - 1
#: Ranges the ring is read in before any split: a scan of a table with few tombstones stays one
#: query per range, and one range refused costs at most 1/16 of the scan read again.
INITIAL_RANGES = 16
#: Rows per page within a range.
FETCH_SIZE = 1000
#: Cassandra's RequestFailureReason of a read over ``tombstone_failure_threshold``.
_TOO_MANY_TOMBSTONES = 1


class TooManyTombstones(StoreError):
    """A single token holds more tombstones than the cluster's ``tombstone_failure_threshold``."""


def too_many_tombstones(exc: BaseException) -> bool:
    """Whether ``exc`` is a read the replicas refused for the tombstones it scanned."""
    from cassandra import ReadFailure

    if not isinstance(exc, ReadFailure):
        return False
    codes = (getattr(exc, "error_code_map", None) or {}).values()
    return "TOO_MANY_TOMBSTONES" in str(exc) or any(_code(c) == _TOO_MANY_TOMBSTONES for c in codes)


def _code(value: Any) -> int | None:
    try:
        return int(value, 16) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        return None


def token_ranges(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``(start, end]`` cut into ``parts`` contiguous ranges ``(a, b]`` (fewer if it is narrower).

    >>> token_ranges(0, 10, 3)
    [(0, 3), (3, 6), (6, 10)]
    >>> token_ranges(0, 1, 4)
    [(0, 1)]
    """
    width = end - start
    parts = max(1, min(parts, width))
    bounds = [start + width * i // parts for i in range(parts)] + [end]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


def scan_by_token(session: "Session", select: str, key: str, *, profile: Any = None, start: int = MIN_TOKEN,
                  end: int = MAX_TOKEN, fetch_size: int = FETCH_SIZE,
                  initial_ranges: int = INITIAL_RANGES) -> Iterator[tuple[Any, ...]]:
    """The rows of ``select`` (``SELECT ... FROM ks.table``, no WHERE; its last column must be
    ``token(key)``) for the partitions whose token is in ``(start, end]``, in token order, read range
    by range (module docstring). Lazy: a caller may stop early (a sample).

    Raises :class:`TooManyTombstones` when one token alone exceeds the threshold, and lets other
    driver errors through (the caller translates them).
    """
    from cassandra.query import SimpleStatement

    statement = SimpleStatement(f"{select} WHERE token({key}) > %s AND token({key}) <= %s", fetch_size=fetch_size)
    options = {} if profile is None else {"execution_profile": profile}  # None: the session's default
    pending = list(reversed(token_ranges(start, end, initial_ranges)))  # a stack, lowest range on top
    while pending:
        low, high = pending.pop()
        last = low
        try:
            for row in session.execute(statement, (low, high), **options):
                last = row[-1]
                yield row
        except Exception as exc:
            if not too_many_tombstones(exc):
                raise
            if high - last < 2:
                raise TooManyTombstones(
                    f"the partitions of token {high} alone hold more tombstones than the cluster's"
                    f" tombstone_failure_threshold ({select}): compact the table or wait for gc_grace_seconds"
                    " (docs/operations.md#failure-modes-reads-and-scans)") from exc
            # what was returned stays returned: the rest of the range, in two
            pending.extend(reversed(token_ranges(last, high, 2)))
