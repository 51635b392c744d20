"""The streaming job's driver loop and command line, without Spark: a fake session and fake queries.

What is checked: a clean stop logs cleanly; the progress file counts every restart since the process
started and names the last error; the job gives up after too many failures in a row; and settings,
checkpoint and bootstrap refusals end with exit code 2 and a message before any Spark session exists.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from feed_service.settings import Settings
from spark_jobs import stream
from spark_jobs.bootstrap import build_manifest, write_manifest
from spark_jobs.stream.options import trigger_of
from spark_jobs.stream.pinned import OPERATOR_FILE
from tests.support.stream_driver import Driver, FakeQuery

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, dependencies: stream.StreamDependencies) -> tuple[int, Path]:
    status = tmp_path / "progress.json"
    code = stream.run(Settings(), stream.StreamOptions(checkpoint=tmp_path / "ckpt"), status_file=status,
                      dependencies=dependencies)
    return code, status


def test_a_clean_stop_logs_without_a_logging_error(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    # pytest's log handler raises when a record cannot be formatted (logging itself would print a
    # traceback to stderr and carry on), so a bad format string fails this test.
    driver = Driver([FakeQuery()])
    caplog.set_level(logging.INFO, logger="feed.stream")
    code, status = _run(tmp_path, driver.dependencies())
    assert code == 0 and driver.sessions_stopped == 1
    assert any(r.getMessage().startswith("stream stopped") for r in caplog.records)
    assert json.loads(status.read_text())["timeline-join"]["batch_id"] == 0


def test_progress_counts_every_restart_and_names_the_last_error(tmp_path: Path) -> None:
    driver = Driver([FakeQuery("boom 1"), FakeQuery("boom 2"), FakeQuery()])
    before = time.time()
    code, status = _run(tmp_path, driver.dependencies())
    assert code == 0 and driver.started == 3
    record = json.loads(status.read_text())
    # A completed batch ends the failures in a row, not the count of restarts.
    assert record["timeline-join"]["batch_id"] == 0
    assert record["restarts"] == 2
    assert record["last_error"]["message"] == "boom 2"
    assert before <= record["last_error"]["time"] <= time.time()
    assert record["consecutive_failures"] == 0


def test_gives_up_after_too_many_failures_in_a_row(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    driver = Driver([FakeQuery(f"boom {i}") for i in range(1, 4)])
    caplog.set_level(logging.INFO, logger="feed.stream")
    code, _ = _run(tmp_path, driver.dependencies(max_consecutive_restarts=2))
    assert code == 1 and driver.started == 3 and driver.sessions_stopped == 1
    assert any("gave up" in r.getMessage() and "boom 3" in r.getMessage() for r in caplog.records)


# --- --until-caught-up: the availableNow trigger, and its end is a success ---------------------


class CaughtUp(FakeQuery):
    """A query that ended by itself, without an error (what availableNow does once caught up)."""

    def __init__(self) -> None:
        super().__init__()
        self.isActive = False


def test_until_caught_up_is_parsed_and_picks_available_now(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    stream.add_arguments(parser)
    default = stream.options_from_args(parser.parse_args(["--checkpoint", str(tmp_path)]))
    assert not default.until_caught_up and trigger_of(default) == {"processingTime": "0.0 seconds"}
    options = stream.options_from_args(parser.parse_args(["--checkpoint", str(tmp_path), "--until-caught-up"]))
    assert options.until_caught_up and trigger_of(options) == {"availableNow": True}


def test_a_query_that_caught_up_ends_the_run_with_0(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    driver = Driver([CaughtUp()])
    seen: list[stream.StreamOptions] = []

    def start(_spark: object, _settings: object, options: stream.StreamOptions, **_: object) -> stream.RunningStream:
        seen.append(options)
        driver.started += 1
        rows = argparse.Namespace(value=7)  # the accumulator of timeline rows written
        return stream.RunningStream(driver.queries.pop(0), rows, until_caught_up=options.until_caught_up)

    caplog.set_level(logging.INFO, logger="feed.stream")
    code = stream.run(Settings(), stream.StreamOptions(checkpoint=tmp_path / "ckpt", until_caught_up=True),
                      status_file=tmp_path / "progress.json", dependencies=driver.dependencies(start=start))
    assert code == 0 and driver.started == 1 and driver.sessions_stopped == 1 and seen[0].until_caught_up
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("caught up and ended (last batch 0)" in r.getMessage() for r in caplog.records)
    record = json.loads((tmp_path / "progress.json").read_text())  # the last batch, not a second-old one
    assert record["timeline-join"]["active"] is False and record["timeline-join"]["batch_id"] == 0
    assert record["restarts"] == 0


def test_a_query_that_ends_without_until_caught_up_is_restarted(tmp_path: Path) -> None:
    # Only the availableNow trigger ends a query by itself: any other end is a failure to recover from.
    driver = Driver([CaughtUp(), FakeQuery()])
    code, status = _run(tmp_path, driver.dependencies())
    assert code == 0 and driver.started == 2
    assert json.loads(status.read_text())["restarts"] == 1


# --- refusals: exit code 2, a message, no Spark session ----------------------------------------




@pytest.mark.usefixtures("no_spark")
def test_inbox_cap_zero_is_refused_before_spark(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert stream.main(["--inbox-cap", "0", "--checkpoint", str(tmp_path / "ckpt")]) == 2
    err = capsys.readouterr().err
    assert "feedctl stream:" in err and "inbox cap must be an integer >= 1, got 0" in err
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.usefixtures("no_spark")
def test_inbox_cap_defaults_to_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("FEED_INBOX_CAP", "0")
    assert stream.main(["--checkpoint", str(tmp_path / "ckpt")]) == 2
    assert "inbox cap must be an integer >= 1, got 0" in capsys.readouterr().err


def test_inbox_cap_zero_exits_quickly_from_the_command_line(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "spark_jobs.stream", "--inbox-cap", "0",
                           "--checkpoint", str(tmp_path / "ckpt")], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "feedctl stream: inbox cap must be an integer >= 1, got 0" in proc.stderr
    assert "Traceback" not in proc.stderr and time.monotonic() - started < 30


def _backfill(folder: Path, settings: Settings) -> Path:
    (folder / "state").mkdir(parents=True)
    (folder / "per_reader").mkdir()
    (folder / "lists").mkdir()
    write_manifest(folder, build_manifest(settings, backfill_ts=10, start_offsets={}, end_offsets={},
                                          summary={}))
    return folder


@pytest.mark.usefixtures("no_spark")
def test_bootstrap_with_another_inbox_cap_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = _backfill(tmp_path / "backfill", Settings())
    assert stream.main(["--checkpoint", str(tmp_path / "ckpt"), "--bootstrap-from", str(folder),
                        "--inbox-cap", "5"]) == 2
    assert "feedctl stream: inbox cap 5" in capsys.readouterr().err


@pytest.mark.usefixtures("no_spark")
def test_bootstrap_into_a_used_checkpoint_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = _backfill(tmp_path / "backfill", Settings())
    (tmp_path / "ckpt" / "join" / "commits").mkdir(parents=True)
    (tmp_path / "ckpt" / "join" / "commits" / "0").write_text("v1")
    assert stream.main(["--checkpoint", str(tmp_path / "ckpt"), "--bootstrap-from", str(folder)]) == 2
    assert "committed batches" in capsys.readouterr().err


@pytest.mark.usefixtures("no_spark")
def test_bootstrap_from_a_folder_without_backfill_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert stream.main(["--checkpoint", str(tmp_path / "ckpt"), "--bootstrap-from", str(tmp_path)]) == 2
    assert "holds no completed backfill" in capsys.readouterr().err


@pytest.mark.usefixtures("no_spark")
def test_a_checkpoint_of_a_retired_operator_is_refused_at_start(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / OPERATOR_FILE).write_text("applyInPandasWithState")
    assert stream.main(["--checkpoint", str(tmp_path / "ckpt")]) == 2
    err = capsys.readouterr().err
    assert "feedctl stream: " in err and "created with --operator applyInPandasWithState" in err
    assert "--via backfill" in err and "Traceback" not in err


@pytest.mark.usefixtures("no_spark")
@pytest.mark.parametrize("operator", ["applyInPandasWithState", "transformWithState"])
def test_the_operator_is_no_longer_a_choice(tmp_path: Path, capsys: pytest.CaptureFixture, operator: str) -> None:
    """No ``--operator`` flag, not even naming the one operator: a usage error before anything runs
    (docs/streaming.md, "One stateful operator")."""
    with pytest.raises(SystemExit) as exited:
        stream.main(["--checkpoint", str(tmp_path / "ckpt"), "--operator", operator])
    assert exited.value.code == 2 and "unrecognized arguments: --operator" in capsys.readouterr().err
    assert not (tmp_path / "ckpt").exists()
