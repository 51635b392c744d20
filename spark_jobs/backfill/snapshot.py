"""Stage ``snapshot``: the end offset of every changelog partition, taken once at the start.

Every later stage reads exactly ``[earliest, snapshot)``; the stream that continues after the
backfill starts exactly at the snapshot, so no event is skipped or applied twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from feed_service.kafka.offsets import SOURCE_ROLES, Offsets, watermarks
from feed_service.settings import Settings


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Per topic partition, the first offset present and the end offset, at the backfill's start."""

    start: Offsets
    end: Offsets

    def records_expected(self) -> int:
        """Upper bound of records in the snapshot (compaction leaves gaps inside it)."""
        return sum(self.end[t][p] - self.start[t][p] for t in self.end for p in self.end[t])

    def describe(self) -> list[str]:
        """One progress line per topic: ``topic: p0: start..end, ...``."""
        return [f"{topic}: " + ", ".join(f"p{p}: {self.start[topic][p]}..{self.end[topic][p]}" for p in parts)
                for topic, parts in self.end.items()]


def snapshot_offsets(settings: Settings, *, timeout: float = 30.0) -> Snapshot:
    """Low and high watermarks of every partition of the changelog topics (``SOURCE_ROLES``), read now.

    A missing topic raises :class:`PipelineError` (not provisioned, or settings of another pipeline).
    """
    start, end = watermarks(settings, SOURCE_ROLES, timeout=timeout)
    return Snapshot(start, end)
