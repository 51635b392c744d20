"""State partitions without Spark: reading what a checkpoint pinned, the stream's choice and warning,
and every refusal of ``feedctl reshard`` (exit code 2, one line, before any Spark session)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest

from feed_service.cli.main import main as feedctl
from feed_service.errors import CheckpointError
from feed_service.settings import Settings
from spark_jobs import reshard, stream
from spark_jobs.stream.pinned import (
    PER_READER_LAYOUT,
    PER_READER_LAYOUT_FILE,
    per_reader_layout_for,
    state_partitions_for,
)
from spark_jobs.checkpoint import (
    LOCK_NAME, CheckpointLock, inspect_checkpoint, pinned_partitions, recent_progress,
)

CONF = {"spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5"}


def _batch(checkpoint: Path, batch: int, *, partitions: int = 2, committed: bool = True) -> None:
    """Offset (and commit) log entries as Spark 4 writes them."""
    offsets, commits = checkpoint / "join" / "offsets", checkpoint / "join" / "commits"
    offsets.mkdir(parents=True, exist_ok=True)
    commits.mkdir(parents=True, exist_ok=True)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 1,
                "conf": {**CONF, "spark.sql.shuffle.partitions": str(partitions)}}
    (offsets / str(batch)).write_text("v1\n" + json.dumps(metadata) + '\n{"feed.tweets.v1":{"0":3}}')
    (offsets / f".{batch}.crc").write_bytes(b"\0")
    if committed:
        (commits / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def _checkpoint(tmp_path: Path, *batches: tuple[int, int, bool]) -> Path:
    checkpoint = tmp_path / "ckpt"
    for batch, partitions, committed in batches:
        _batch(checkpoint, batch, partitions=partitions, committed=committed)
    return checkpoint


# --- inspection ---------------------------------------------------------------------------------


def test_a_new_checkpoint_pins_nothing(tmp_path: Path) -> None:
    info = inspect_checkpoint(tmp_path / "nothing")
    assert info.is_new and info.state_partitions is None and not info.cleanly_committed


def test_the_newest_offset_entry_says_the_partitions(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, (0, 2, True), (1, 2, True), (2, 8, True), (10, 8, False))
    info = inspect_checkpoint(checkpoint)
    assert (info.last_batch, info.last_commit, info.state_partitions) == (10, 2, 8)
    assert not info.cleanly_committed  # batch 10 planned, never committed
    _batch(checkpoint, 10, partitions=8)
    assert inspect_checkpoint(checkpoint).cleanly_committed


def test_an_offset_entry_without_the_setting_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "0"
    bad.write_text('v1\n{"batchWatermarkMs":0,"conf":{}}\n{}')
    with pytest.raises(CheckpointError, match="records no spark.sql.shuffle.partitions"):
        pinned_partitions(bad)
    bad.write_text("v1\nnot json")
    with pytest.raises(CheckpointError):
        pinned_partitions(bad)


def test_the_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    with CheckpointLock.acquire(tmp_path, "feedctl stream"):
        with pytest.raises(CheckpointError, match=rf"in use by feedctl stream \(pid {os.getpid()}\)"):
            CheckpointLock.acquire(tmp_path, "feedctl reshard")
    CheckpointLock.acquire(tmp_path, "feedctl reshard").release()  # released with the block


def test_a_fresh_progress_file_looks_in_use(tmp_path: Path) -> None:
    assert recent_progress(tmp_path) is None
    (tmp_path / "progress.json").write_text("{}")
    assert recent_progress(tmp_path) is not None
    assert recent_progress(tmp_path, now=time.time() + 60) is None


# --- the stream ---------------------------------------------------------------------------------


def test_a_new_checkpoint_takes_the_setting(tmp_path: Path) -> None:
    assert state_partitions_for(tmp_path / "ckpt", 8) == 8


def test_an_existing_checkpoint_keeps_its_own_and_says_how_to_change_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    checkpoint = _checkpoint(tmp_path, (0, 2, True))
    caplog.set_level(logging.INFO, logger="feed.stream")
    assert state_partitions_for(checkpoint, 2) == 2
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert state_partitions_for(checkpoint, 8) == 2
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and f"feedctl reshard --checkpoint {checkpoint} --partitions 8" in warning[0]


def test_the_stream_session_gets_the_pinned_partitions(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, (0, 8, True))
    (checkpoint / PER_READER_LAYOUT_FILE).write_text(PER_READER_LAYOUT)  # made by this release
    seen: dict[str, str] = {}

    def session(*_: object, extra_conf: dict[str, str], **__: object) -> object:
        seen.update(extra_conf)
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        stream.run_stream(Settings(), stream.StreamOptions(checkpoint=checkpoint, settings_changes={"state_partitions": 3}),
                          dependencies=stream.StreamDependencies(build_session=session, input_guard=lambda *a: None))
    assert seen["spark.sql.shuffle.partitions"] == "8"
    CheckpointLock.acquire(checkpoint, "test").release()  # the refusal released the lock


@pytest.mark.usefixtures("no_spark")
def test_state_partitions_zero_is_refused_before_spark(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert stream.main(["--state-partitions", "0", "--checkpoint", str(tmp_path / "ckpt")]) == 2
    assert "state partitions must be an integer from 1 to 4096, got 0" in capsys.readouterr().err


@pytest.mark.usefixtures("no_spark")
def test_a_second_stream_on_a_checkpoint_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with CheckpointLock.acquire(tmp_path / "ckpt", "feedctl stream"):
        assert stream.main(["--checkpoint", str(tmp_path / "ckpt")]) == 2
    assert "is in use by feedctl stream" in capsys.readouterr().err


# --- reshard refusals: exit 2, one line, no Spark -----------------------------------------------


def _refusal(capsys: pytest.CaptureFixture, *args: str) -> str:
    assert feedctl(["reshard", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("feedctl reshard: ") and "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.usefixtures("no_spark")
def test_reshard_refuses_an_uncommitted_last_batch(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    checkpoint = _checkpoint(tmp_path, (0, 2, True), (1, 2, False))
    err = _refusal(capsys, "--checkpoint", str(checkpoint), "--partitions", "8")
    assert "last batch (1)" in err and "offsets/1 without commits/1" in err and "add --finish-pending" in err


@pytest.mark.usefixtures("no_spark")
def test_reshard_refuses_a_checkpoint_in_use(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    checkpoint = _checkpoint(tmp_path, (0, 2, True))
    with CheckpointLock.acquire(checkpoint, "feedctl stream"):
        err = _refusal(capsys, "--checkpoint", str(checkpoint), "--partitions", "8")
    assert "in use by feedctl stream" in err
    (checkpoint / "progress.json").write_text("{}")
    assert "looks in use" in _refusal(capsys, "--checkpoint", str(checkpoint), "--partitions", "8")


@pytest.mark.usefixtures("no_spark")
def test_reshard_refuses_what_is_not_a_used_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert "not a stream checkpoint" in _refusal(capsys, "--checkpoint", str(tmp_path / "x"), "--partitions", "8")
    assert not (tmp_path / "x").exists()  # no lock file left in a mistyped folder
    (tmp_path / "new" / "join").mkdir(parents=True)
    assert "has no batch yet" in _refusal(capsys, "--checkpoint", str(tmp_path / "new"), "--partitions", "8")
    checkpoint = _checkpoint(tmp_path, (0, 2, True))
    assert "from 1 to 4096, got 0" in _refusal(capsys, "--checkpoint", str(checkpoint), "--partitions", "0")
    assert not (checkpoint / LOCK_NAME).exists()


@pytest.mark.usefixtures("no_spark")
def test_reshard_via_backfill_needs_a_new_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    checkpoint = _checkpoint(tmp_path, (0, 2, True), (1, 2, False))  # the backfill route does not need a commit
    _batch(tmp_path / "used", 0)
    err = _refusal(capsys, "--checkpoint", str(checkpoint), "--partitions", "8", "--via", "backfill",
                   "--new-checkpoint", str(tmp_path / "used"))
    assert "must be a new checkpoint folder" in err


@pytest.mark.usefixtures("no_spark")
@pytest.mark.parametrize("retired", ["transformWithStateInPandas", "applyInPandasWithState"])
def test_reshard_in_place_refuses_a_checkpoint_of_a_retired_operator_and_the_backfill_route_takes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture, retired: str) -> None:
    from spark_jobs.stream.pinned import OPERATOR_FILE

    checkpoint = _checkpoint(tmp_path, (0, 2, True))
    (checkpoint / OPERATOR_FILE).write_text(retired)
    err = _refusal(capsys, "--checkpoint", str(checkpoint), "--partitions", "8")
    assert f"created with --operator {retired}" in err and "--via backfill" in err
    # the way out the refusal names passes the checks (the backfill reads the topics, not the state)
    info = reshard.check_reshard(reshard.ReshardOptions(checkpoint=checkpoint, partitions=8, via="backfill"))
    assert info.state_partitions == 2


@pytest.mark.usefixtures("no_spark")
def test_reshard_to_the_pinned_number_does_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    checkpoint = _checkpoint(tmp_path, (0, 8, True))
    assert feedctl(["reshard", "--checkpoint", str(checkpoint), "--partitions", "8"]) == 0
    assert "already has 8 state partitions; nothing to do" in capsys.readouterr().err


# --- reshard --finish-pending: the stream runs until caught up first, then the repartition ------


class FakeFinishingStream:
    """Stands for the child ``subprocess.Popen`` of :func:`reshard.finish_pending`: it records the
    command and, when waited for, commits the checkpoint's pending batch (or not: ``commits``)."""

    def __init__(self, checkpoint: Path, *, commits: bool = True, code: int = 0) -> None:
        self.checkpoint, self.commits, self.code = checkpoint, commits, code
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, cmd: list[str], *, env: dict[str, str]) -> "FakeFinishingStream":
        self.calls.append((cmd, env))
        return self

    def wait(self) -> int:
        # The child takes the checkpoint's lock itself: the reshard must not hold it meanwhile.
        with CheckpointLock.acquire(self.checkpoint, "feedctl stream"):
            if self.commits:
                info = inspect_checkpoint(self.checkpoint)
                _batch(self.checkpoint, info.last_batch, partitions=info.state_partitions)
                _batch(self.checkpoint, info.last_batch + 1, partitions=info.state_partitions)
        return self.code


@pytest.fixture
def fake_repartition(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A reshard session and repartition without Spark: the repartition batch is written as Spark would."""
    import spark_jobs.runtime.session

    class Session:
        def stop(self) -> None:
            pass

    done: list[int] = []

    def repartition(_spark: object, checkpoint: Path, partitions: int) -> int:
        batch = inspect_checkpoint(checkpoint).last_batch + 1
        _batch(checkpoint, batch, partitions=partitions)
        done.append(batch)
        return batch

    monkeypatch.setattr(spark_jobs.runtime.session, "build_session", lambda *a, **k: Session())
    monkeypatch.setattr(reshard, "repartition_checkpoint", repartition)
    return done


def test_finish_pending_is_parsed() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    reshard.add_arguments(parser)
    args = ["--checkpoint", "c", "--partitions", "8"]
    assert not reshard.options_from_args(parser.parse_args(args)).finish_pending
    assert reshard.options_from_args(parser.parse_args([*args, "--finish-pending"])).finish_pending


def test_finish_pending_runs_the_stream_until_caught_up_then_repartitions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
        fake_repartition: list[int]) -> None:
    checkpoint = _checkpoint(tmp_path, (0, 2, True), (1, 2, False))
    child = FakeFinishingStream(checkpoint)
    monkeypatch.setattr(reshard.subprocess, "Popen", child)
    monkeypatch.setenv("FEED_INBOX_CAP", "7")
    assert feedctl(["reshard", "--checkpoint", str(checkpoint), "--partitions", "8", "--finish-pending"]) == 0
    (cmd, env), = child.calls
    assert cmd[1:] == ["-m", "spark_jobs.stream", "--checkpoint", str(checkpoint), "--until-caught-up",
                       "--state-stats-interval", "0", "--metrics-port", "0", "--status-file", str(checkpoint / reshard.FINISH_STATUS_NAME)]
    assert env["FEED_INBOX_CAP"] == "7"  # the reshard's settings, handed to the stream
    assert fake_repartition == [3]  # after batch 1 re-run and batch 2 caught up
    info = inspect_checkpoint(checkpoint)
    assert info.state_partitions == 8 and info.cleanly_committed
    err = capsys.readouterr().err
    assert "finished pending batch 1 and caught up in" in err and "2 -> 8 state partitions" in err


def test_finish_pending_leaves_a_committed_checkpoint_to_the_repartition(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_repartition: list[int]) -> None:
    checkpoint = _checkpoint(tmp_path, (0, 2, True))
    child = FakeFinishingStream(checkpoint)
    monkeypatch.setattr(reshard.subprocess, "Popen", child)
    assert feedctl(["reshard", "--checkpoint", str(checkpoint), "--partitions", "8", "--finish-pending"]) == 0
    assert child.calls == [] and fake_repartition == [1]


@pytest.mark.parametrize("commits, code", [(False, 0), (True, 1)])
def test_finish_pending_refuses_when_the_stream_did_not_get_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
        commits: bool, code: int) -> None:
    # Stopped by a signal before it caught up (exit 0, still pending), or failed: nothing is resharded.
    monkeypatch.setattr(reshard, "repartition_checkpoint", lambda *a: pytest.fail("repartitioned"))
    checkpoint = _checkpoint(tmp_path, (0, 2, True), (1, 2, False))
    monkeypatch.setattr(reshard.subprocess, "Popen", FakeFinishingStream(checkpoint, commits=commits, code=code))
    with monkeypatch.context() as m:
        m.setattr("spark_jobs.runtime.session.build_session", lambda *a, **k: pytest.fail("Spark session built"))
        err = _refusal(capsys, "--checkpoint", str(checkpoint), "--partitions", "8", "--finish-pending")
    assert f"ended with exit code {code}" in err and "nothing was resharded" in err
    assert inspect_checkpoint(checkpoint).state_partitions == 2


@pytest.mark.usefixtures("no_spark")
def test_finish_pending_refuses_a_checkpoint_that_never_committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture) -> None:
    # Its batch 0 may be a bootstrap's, which needs the stream's own --bootstrap-from.
    monkeypatch.setattr(reshard.subprocess, "Popen", lambda *a, **k: pytest.fail("stream started"))
    checkpoint = _checkpoint(tmp_path, (0, 2, False))
    err = _refusal(capsys, "--checkpoint", str(checkpoint), "--partitions", "8", "--finish-pending")
    assert "none of its batches committed yet" in err and "--bootstrap-from" in err


@pytest.mark.usefixtures("no_spark")
def test_finish_pending_keeps_the_in_use_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(reshard.subprocess, "Popen", lambda *a, **k: pytest.fail("stream started"))
    checkpoint = _checkpoint(tmp_path, (0, 2, True), (1, 2, False))
    args = ("--checkpoint", str(checkpoint), "--partitions", "8", "--finish-pending")
    with CheckpointLock.acquire(checkpoint, "feedctl stream"):
        assert "in use by feedctl stream" in _refusal(capsys, *args)
    (checkpoint / "progress.json").write_text("{}")
    assert "looks in use" in _refusal(capsys, *args)


def test_backfill_route_paths_sit_next_to_the_old_checkpoint(tmp_path: Path) -> None:
    options = reshard.ReshardOptions(tmp_path / "ckpt", 8, via="backfill")
    assert options.new_checkpoint_path() == tmp_path / "ckpt-p8"
    assert options.backfill_path() == tmp_path / "ckpt-p8.backfill"


# --- the state layout a checkpoint records (docs/state-buckets.md) --------------------------------


def test_a_new_checkpoint_records_the_state_buckets_asked_for(tmp_path: Path) -> None:
    from spark_jobs.stream.pinned import recorded_state_buckets, state_buckets_for

    checkpoint = tmp_path / "ckpt"
    assert state_buckets_for(checkpoint, 16) == 16
    assert state_buckets_for(checkpoint, 64) == 16  # fixed at creation
    assert recorded_state_buckets(checkpoint) == 16


def test_a_checkpoint_made_before_state_buckets_keeps_one_state_per_key(tmp_path: Path) -> None:
    from spark_jobs.stream.pinned import recorded_state_buckets, state_buckets_for

    checkpoint = _checkpoint(tmp_path, (0, 2, True), (1, 2, True))  # batches, no state_buckets file
    assert recorded_state_buckets(checkpoint) == 0
    assert state_buckets_for(checkpoint, 16) == 0
    assert recorded_state_buckets(checkpoint) == 0


def test_a_new_checkpoint_of_one_state_per_key_keeps_it_when_the_setting_changes(tmp_path: Path) -> None:
    from spark_jobs.stream.pinned import state_buckets_for

    assert state_buckets_for(tmp_path / "a", 0) == 0  # FEED_STATE_BUCKETS=0: one state per key
    assert state_buckets_for(tmp_path / "a", 16) == 0


def test_a_damaged_layout_file_is_a_clear_error(tmp_path: Path) -> None:
    from feed_service.errors import CheckpointError
    from spark_jobs.stream.pinned import STATE_BUCKETS_FILE, state_buckets_for

    (tmp_path / STATE_BUCKETS_FILE).write_text("many")
    with pytest.raises(CheckpointError, match="number of state buckets"):
        state_buckets_for(tmp_path, 16)


def test_a_checkpoint_of_the_reposter_and_reader_steps_is_refused_with_the_way_to_move_it(tmp_path: Path) -> None:
    new = tmp_path / "new"
    assert per_reader_layout_for(new) == PER_READER_LAYOUT  # recorded at the first start
    assert per_reader_layout_for(new) == PER_READER_LAYOUT
    old = _checkpoint(tmp_path, (0, 2, True))  # committed batches, no layout recorded: an earlier release's
    with pytest.raises(CheckpointError, match="feedctl backfill --out DIR.*--bootstrap-from DIR"):
        per_reader_layout_for(old)
    with pytest.raises(CheckpointError, match="feedctl backfill"):
        stream.run_stream(Settings(), stream.StreamOptions(checkpoint=old),
                          dependencies=stream.StreamDependencies(build_session=lambda *a, **k: 1 / 0))
    CheckpointLock.acquire(old, "test").release()  # the refusal released the lock
