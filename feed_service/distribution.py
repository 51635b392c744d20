"""Size distributions as ``feedctl state-stats`` and the stream's progress report them: count, total,
p50, p99 and max (docs/streaming.md, "State size and rows per timeline").

Pure: the Spark side computes the same figures with ``percentile_approx`` (spark_jobs/state_stats.py),
the Cassandra side from counts in Python (feed_service/store/timeline_rows.py); both use the
nearest-rank definition, so a p99 is always a value that occurs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable

#: The quantiles reported, as (name, fraction).
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p99", 0.99))


@dataclass(frozen=True, slots=True)
class Distribution:
    """How one size is spread over a population (bytes per key, rows per timeline).

    ``count`` members, ``total`` of their sizes; ``p50``/``p99``/``max`` are sizes of single members.
    An empty population has count 0 and every figure 0.
    """

    count: int
    total: int
    p50: int
    p99: int
    max: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "Distribution":
        return cls(**{name: int(raw[name]) for name in ("count", "total", "p50", "p99", "max")})


EMPTY = Distribution(0, 0, 0, 0, 0)


def nearest_rank(ordered: list[int], fraction: float) -> int:
    """The smallest value with at least ``fraction`` of ``ordered`` (sorted ascending) at or below it.

    >>> nearest_rank([1, 2, 3, 4], 0.5), nearest_rank([1, 2, 3, 4], 0.99), nearest_rank([7], 0.5)
    (2, 4, 7)
    """
    if not ordered:
        raise ValueError("nearest_rank of an empty list")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction {fraction} is not in (0, 1]")
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summarize(sizes: Iterable[int]) -> Distribution:
    """The distribution of ``sizes`` (one per member), exact.

    >>> summarize([5, 1, 3]).to_dict()
    {'count': 3, 'total': 9, 'p50': 3, 'p99': 5, 'max': 5}
    """
    ordered = sorted(int(s) for s in sizes)
    if not ordered:
        return EMPTY
    p50, p99 = (nearest_rank(ordered, q) for _, q in QUANTILES)
    return Distribution(len(ordered), sum(ordered), p50, p99, ordered[-1])
