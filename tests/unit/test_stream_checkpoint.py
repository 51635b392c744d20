"""What a stream checkpoint fixes at creation: its clock start and its stateful operator."""

from __future__ import annotations

from pathlib import Path

import pytest

from feed_service.errors import CheckpointError
from spark_jobs.stream.pinned import OPERATOR, OPERATOR_FILE, clock_start_for, pin_operator


def test_clock_start_is_fixed_at_creation(tmp_path: Path) -> None:
    first = clock_start_for(tmp_path / "ckpt")
    assert first > 1_600_000_000_000_000  # µs since the epoch
    assert clock_start_for(tmp_path / "ckpt") == first
    assert clock_start_for(tmp_path / "ckpt", initial=5) == first  # a restart never moves it
    assert clock_start_for(tmp_path / "other", initial=5) == 5  # a backfill's clock seeds a new one


def test_operator_is_recorded_at_creation(tmp_path: Path) -> None:
    pin_operator(tmp_path / "a")
    assert (tmp_path / "a" / OPERATOR_FILE).read_text() == OPERATOR == "transformWithState"
    pin_operator(tmp_path / "a")  # a restart continues, the record as it was
    assert (tmp_path / "a" / OPERATOR_FILE).read_text() == OPERATOR


def test_a_checkpoint_of_the_current_release_continues(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / OPERATOR_FILE).write_text("transformWithState\n")  # as this release's checkpoints hold it
    pin_operator(tmp_path / "c")
    assert (tmp_path / "c" / OPERATOR_FILE).read_text() == "transformWithState\n"


def test_a_checkpoint_of_an_unknown_operator_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / OPERATOR_FILE).write_text("flatMapGroupsWithState")
    with pytest.raises(CheckpointError, match="names an unknown operator 'flatMapGroupsWithState'"):
        pin_operator(tmp_path / "d")


@pytest.mark.parametrize("retired", ["transformWithStateInPandas", "applyInPandasWithState"])
def test_a_checkpoint_of_a_retired_operator_is_refused_with_the_way_to_move_it(tmp_path: Path, retired: str) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / OPERATOR_FILE).write_text(retired)
    with pytest.raises(CheckpointError, match=f"created with --operator {retired}, which this release no"
                                              " longer runs") as refused:
        pin_operator(tmp_path / "b")
    assert "feedctl reshard --checkpoint" in str(refused.value) and "--via backfill" in str(refused.value)
    assert "--bootstrap-from" in str(refused.value)
    assert (tmp_path / "b" / OPERATOR_FILE).read_text() == retired  # left as it was
