"""The backfill's manifest, orchestration and command line, without Spark.

The stages are replaced by fakes that return fixed counts: what is checked is what the job does
with them (the manifest it writes and returns, the summary it prints) and what it refuses before
any Spark session starts.
"""

from __future__ import annotations

import doctest
import importlib
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from feed_service.settings import Settings
from spark_jobs.backfill import BackfillOptions, job, main, run_backfill
from spark_jobs.backfill.progress import format_summary
from spark_jobs.backfill.read import PartitionCounts, ReadCounts
from spark_jobs.backfill.snapshot import Snapshot
from spark_jobs.backfill.write import TableReport
from spark_jobs.bootstrap import MANIFEST_FORMAT, MANIFEST_NAME, build_manifest, load_bootstrap, write_manifest

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_returned_manifest_is_the_files_content(tmp_path: Path) -> None:
    settings = Settings().replace(inbox_cap=3)
    summary: dict[str, Any] = {"rows": {"timeline": 6}, "duration_seconds": 1.5}
    offsets = {settings.topic("tweets"): {"0": 4}}
    written = write_manifest(tmp_path, build_manifest(settings, backfill_ts=10, start_offsets={}, end_offsets=offsets,
                                                      summary=summary))
    summary["duration_seconds"] = 99.0  # a later edit of the caller's summary changes neither
    assert written == json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert written["summary"]["duration_seconds"] == 1.5
    assert (written["format"], written["inbox_cap"], written["stream_clock_start"]) == (MANIFEST_FORMAT, 3, 10)
    assert not list(tmp_path.glob(".*.tmp"))
    (tmp_path / "state").mkdir()
    (tmp_path / "per_reader").mkdir()
    (tmp_path / "lists").mkdir()
    boot = load_bootstrap(tmp_path, settings)
    assert (json.loads(boot.starting_offsets), boot.inbox_cap, boot.clock_start) == (offsets, 3, 10)


class FakeFrame:
    """Stands for every DataFrame of the job: persist/unpersist only."""

    def persist(self, *_: Any) -> "FakeFrame":
        return self

    def unpersist(self) -> None:
        pass


class FakeWinners:
    def map(self, fn: Any) -> "FakeWinners":
        fn(FakeFrame())
        return self

    def count(self) -> dict[str, int]:
        return {"tweets_live": 3, "follow_edges_active": 2}

    def with_list_edges(self, follows: Any, exclusions: Any) -> "FakeWinners":
        return self


class FakeListFrames:
    follows = exclusions = FakeFrame()

    class done:  # noqa: N801 - the ListStageResult's attribute
        facts = ()


class FakeSpark:
    class sparkContext:  # noqa: N801 - the attribute name Spark uses
        @staticmethod
        def statusTracker() -> Any:
            class Tracker:
                getActiveStageIds = staticmethod(lambda: [])

            return Tracker()

        @staticmethod
        def setJobDescription(_: str) -> None:
            pass


@pytest.fixture
def fake_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = Snapshot(start={"feed.tweets.v1": {"0": 0}}, end={"feed.tweets.v1": {"0": 5}})
    counts = ReadCounts((PartitionCounts("feed.tweets.v1", 0, 5, 1, 1),), {"bad_json": 1})
    fakes = {
        "snapshot_offsets": lambda settings: snap,
        "read_snapshot": lambda *a: FakeFrame(), "parse_changes": lambda df: df, "classify": lambda df: df,
        "count_records": lambda df, snapshot=None: counts, "valid_events": lambda df: df,
        "winning_changes": lambda df: FakeWinners(),
        "list_stage": lambda *a: FakeListFrames(),
        "write_list_inputs": lambda *a: {"lists_live": 1, "list_follows": 2, "exclusions": 1, "inputs": 4},
        "winner_events": lambda winners: FakeFrame(), "engine_states": lambda *a, **k: FakeFrame(),
        "write_states": lambda *a, **k: 4, "messages_of": lambda engine: FakeFrame(),
        "per_reader_stage": lambda *a: object(),
        "write_per_reader_inputs": lambda *a: {"messages": 9, "inputs": 7, "extras_rows": 3},
        "join_timelines_batch": lambda *a: FakeFrame(), "count_timelines": lambda *a: 2,
        "tables_to_write": lambda *a, **k: [("timeline", FakeFrame()), ("tweets", FakeFrame())],
        "write_table": lambda settings, table, df, ts, write: TableReport(table, 6, 0.5, ((0, 6),)),
        "inactive_readers": lambda settings, ts: set(), "mark_readers": lambda *a, **k: None,
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(job, name, fake)


def _figures(report: str) -> list[list[str]]:
    """Each line's label and comma-separated figures, the figures in any order."""
    return [sorted(re.split(r", |\s{2,}", line.strip())) for line in report.strip().splitlines()]


@pytest.mark.usefixtures("fake_stages")
def test_run_backfill_returns_and_reports_what_the_manifest_holds(tmp_path: Path) -> None:
    out = io.StringIO()
    settings = Settings().replace(inbox_cap=7)
    result = run_backfill(FakeSpark(), settings, BackfillOptions(out=tmp_path / "bf", backfill_ts=123), out=out)
    on_disk = json.loads((tmp_path / "bf" / MANIFEST_NAME).read_text())
    assert result.manifest == on_disk
    summary = on_disk["summary"]
    assert result.summary == summary
    # The printed summary is the recorded one (its figures in the order they were computed).
    printed = "backfill summary" + out.getvalue().split("backfill summary")[-1]
    assert _figures(printed) == _figures(format_summary(summary))
    assert (summary["records_read"], summary["invalid_by_reason"], summary["keys"], summary["timelines"]) == (
        5, {"bad_json": 1}, 4, 2)
    assert summary["per_reader"] == {"messages": 9, "inputs": 7, "extras_rows": 3}
    assert summary["lists"] == {"lists_live": 1, "list_follows": 2, "exclusions": 1, "inputs": 4}
    assert summary["rows"] == {"timeline": 6, "tweets": 6} and summary["written"] is True
    assert on_disk["inbox_cap"] == summary["inbox_cap"] == 7 and on_disk["backfill_ts"] == 123
    assert set(summary["stage_seconds"]) == {"snapshot", "read", "winners", "lists", "states", "per_reader",
                                                "join", "write"}
    assert "stage manifest: done" in out.getvalue()


# --- command line: refusals before Spark -------------------------------------------------------




@pytest.mark.usefixtures("no_spark")
def test_inbox_cap_zero_is_refused_before_spark(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--out", str(tmp_path / "bf"), "--inbox-cap", "0"]) == 2
    assert "feedctl backfill: inbox cap must be an integer >= 1, got 0" in capsys.readouterr().err


@pytest.mark.usefixtures("no_spark")
def test_inbox_cap_defaults_to_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("FEED_INBOX_CAP", "-1")
    assert main(["--out", str(tmp_path / "bf")]) == 2
    assert "got -1" in capsys.readouterr().err
    args = job.argparse.ArgumentParser()
    job.add_arguments(args)
    assert job.options_from_args(args.parse_args(["--out", "x"])).settings_changes == {}
    assert job.options_from_args(args.parse_args(["--out", "x", "--inbox-cap", "9"])).settings_changes == {
        "inbox_cap": 9}


@pytest.mark.usefixtures("no_spark")
def test_a_completed_backfill_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_manifest(tmp_path, build_manifest(Settings(), backfill_ts=1, start_offsets={}, end_offsets={},
                                            summary={}))
    assert main(["--out", str(tmp_path)]) == 2
    assert "already holds a completed backfill" in capsys.readouterr().err


def test_the_package_runs_as_a_module(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "spark_jobs.backfill", "--out", str(tmp_path / "bf"),
                           "--inbox-cap", "0"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "feedctl backfill: inbox cap must be" in proc.stderr, proc.stderr
    assert time.monotonic() - started < 30 and not (tmp_path / "bf").exists()


@pytest.mark.parametrize("module", ["spark_jobs.backfill.progress", "spark_jobs.backfill.winners"])
def test_doctests(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted and result.failed == 0
