"""How much random input the property and model tests take: sized for CI by default, scaled up outside
it by ``FEED_TEST_SCALE`` (a whole factor, default 1: README.md, "Tests and benchmarks";
docs/operations.md#longer-test-runs). Every Hypothesis test's examples and every batch-by-batch model
test's seeds are multiplied by it."""

from __future__ import annotations

import os


def _scale() -> int:
    raw = os.environ.get("FEED_TEST_SCALE", "")
    try:
        factor = int(raw) if raw else 1
    except ValueError:
        raise ValueError(f"FEED_TEST_SCALE must be a whole factor, not {raw!r}") from None
    if factor < 1:
        raise ValueError(f"FEED_TEST_SCALE must be at least 1, not {factor}")
    return factor


#: The factor every count of random cases is multiplied by.
SCALE = _scale()
#: Hypothesis examples of a test that names no count of its own (Hypothesis' default).
DEFAULT_EXAMPLES = 100


def examples(count: int = DEFAULT_EXAMPLES) -> int:
    """``count`` random cases in CI, ``count × FEED_TEST_SCALE`` outside it."""
    return count * SCALE
