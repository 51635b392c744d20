"""What a stream checkpoint fixes at creation: its clock start and its stateful operator."""

from __future__ import annotations

from pathlib import Path

import pytest

from feed_service.errors import CheckpointError
from spark_jobs.stream.options import DEFAULT_OPERATOR
from spark_jobs.stream.pinned import clock_start_for, operator_for


def test_clock_start_is_fixed_at_creation(tmp_path: Path) -> None:
    first = clock_start_for(tmp_path / "ckpt")
    assert first > 1_600_000_000_000_000  # µs since the epoch
    assert clock_start_for(tmp_path / "ckpt") == first
    assert clock_start_for(tmp_path / "ckpt", initial=5) == first  # a restart never moves it
    assert clock_start_for(tmp_path / "other", initial=5) == 5  # a backfill's clock seeds a new one


def test_operator_is_fixed_at_creation(tmp_path: Path) -> None:
    assert operator_for(tmp_path / "a", None) == DEFAULT_OPERATOR
    assert operator_for(tmp_path / "a", None) == DEFAULT_OPERATOR
    assert operator_for(tmp_path / "b", "applyInPandasWithState") == "applyInPandasWithState"
    assert operator_for(tmp_path / "b", None) == "applyInPandasWithState"
    with pytest.raises(CheckpointError, match="created with --operator applyInPandasWithState"):
        operator_for(tmp_path / "b", "transformWithStateInPandas")
