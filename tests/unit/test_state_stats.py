"""The figures of ``feedctl state-stats`` and of the stream's progress, without Spark or Cassandra:
the distribution summary, the sample estimate, the live state figures, the periodic thread, the
progress record and the command's arguments and table."""

from __future__ import annotations

import argparse
import io
import math
import threading
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feed_service.cli.commands.state_stats import print_report
from feed_service.cli.main import build_parser
from feed_service.distribution import EMPTY, Distribution, nearest_rank, summarize
from feed_service.store.timeline_rows import estimate_partitions
from spark_jobs import stream
from spark_jobs.state_stats import PeriodicStats, StateSize, last_committed_batch, live_state


# --- the summary -----------------------------------------------------------------------------------


def test_summary_of_known_sizes() -> None:
    assert summarize([]) == EMPTY
    assert summarize([7]) == Distribution(1, 7, 7, 7, 7)
    assert summarize(range(1, 101)) == Distribution(100, 5050, 50, 99, 100)
    # 1 member in 100 is big: p99 still a typical one; 2 in 100: p99 is the big one.
    assert summarize([10] * 99 + [1000]).p99 == 10
    assert summarize([10] * 98 + [1000] * 2).p99 == 1000


@given(st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=300))
def test_summary_properties(sizes: list[int]) -> None:
    d = summarize(sizes)
    assert (d.count, d.total, d.max) == (len(sizes), sum(sizes), max(sizes))
    assert min(sizes) <= d.p50 <= d.p99 <= d.max
    assert d.p50 in sizes and d.p99 in sizes  # nearest rank: always a size that occurs
    # at least the fraction is at or below the percentile, and less than that strictly below it
    for value, q in ((d.p50, 0.5), (d.p99, 0.99)):
        assert sum(s <= value for s in sizes) >= math.ceil(q * len(sizes))
        assert sum(s < value for s in sizes) < math.ceil(q * len(sizes))
    assert Distribution.from_dict(d.to_dict()) == d


def test_nearest_rank_refuses_what_has_no_answer() -> None:
    with pytest.raises(ValueError):
        nearest_rank([], 0.5)
    with pytest.raises(ValueError):
        nearest_rank([1], 0.0)


def test_partition_estimate_from_the_share_of_the_ring() -> None:
    assert estimate_partitions(10, 0, 2**62) == 40
    # an arc that wraps past the end of the ring
    assert estimate_partitions(10, 2**63 - 2**61, -(2**63) + 2**61) == 40
    assert estimate_partitions(5, 0, 0) == 5  # the whole ring: what was found
    assert estimate_partitions(5, 0, 2**64 - 1) >= 5


# --- state figures ---------------------------------------------------------------------------------

#: The shape of a transformWithState query's ``lastProgress["stateOperators"]`` (abridged from a real run).
STATE_OPERATORS = [{
    "operatorName": "transformWithStateInPySparkExec", "numRowsTotal": 30, "numRowsUpdated": 4, "numRowsRemoved": 0,
    "memoryUsedBytes": 8872, "commitTimeMs": 738, "numShufflePartitions": 2, "numStateStoreInstances": 2,
    "customMetrics": {"rocksdbSstFileSize": 23352, "rocksdbPinnedBlocksMemoryUsage": 176,
                      "rocksdbTotalBytesWritten": 43864, "rocksdbCommitFlushLatency": 30, "numValueStateVars": 4},
}]


def test_live_state_keeps_the_size_figures() -> None:
    assert live_state(None) is None and live_state({"batchId": 3}) is None and live_state({"stateOperators": []}) is None
    assert live_state({"stateOperators": STATE_OPERATORS}) == {
        "numRowsTotal": 30, "numRowsUpdated": 4, "numRowsRemoved": 0, "memoryUsedBytes": 8872,
        "rocksdbSstFileSize": 23352, "rocksdbPinnedBlocksMemoryUsage": 176, "rocksdbTotalBytesWritten": 43864}


def test_state_size_record() -> None:
    size = StateSize(4, Distribution(2, 30, 10, 20, 20), {"author_state": Distribution(2, 25, 10, 15, 15),
                                                          "author_edges": Distribution(1, 5, 5, 5, 5)})
    assert size.to_dict() == {"batch_id": 4, "keys": 2, "total_bytes": 30,
                              "bytes_per_key": {"count": 2, "total": 30, "p50": 10, "p99": 20, "max": 20},
                              "variables": {"author_state": {"count": 2, "total": 25, "p50": 10, "p99": 15, "max": 15},
                                            "author_edges": {"count": 1, "total": 5, "p50": 5, "p99": 5, "max": 5}}}
    assert StateSize(None).to_dict()["keys"] == 0


def test_last_committed_batch_reads_the_commit_log(tmp_path: Any) -> None:
    assert last_committed_batch(tmp_path) is None
    commits = tmp_path / "commits"
    commits.mkdir()
    assert last_committed_batch(tmp_path) is None
    for name in ("0", "1", "10", ".10.crc", "2"):
        (commits / name).write_text("v1")
    assert last_committed_batch(tmp_path) == 10


# --- the periodic computation ----------------------------------------------------------------------


def _until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_periodic_stats_keep_the_last_result_and_report_a_failure_beside_it() -> None:
    results: list[Any] = [{"n": 1}, RuntimeError("cassandra down"), {"n": 3}]
    go = threading.Semaphore(0)  # one run per release: the test sees every state in turn
    done = threading.Semaphore(0)

    def compute() -> dict[str, Any]:
        go.acquire()
        result = results.pop(0) if results else {"n": 99}
        try:
            if isinstance(result, Exception):
                raise result
            return result
        finally:
            done.release()

    stats = PeriodicStats(compute, 0.01, first_delay=0.0)
    assert stats.latest() is None
    seen: list[Any] = []
    stats.start()
    try:
        for _ in range(3):
            go.release()
            assert done.acquire(timeout=5)
            _until(lambda: stats.latest() is not None and stats.latest() not in seen[-1:])
            seen.append(stats.latest())
    finally:
        go.release()
        stats.stop()
    assert seen[0] == {"n": 1}
    assert seen[1]["n"] == 1 and "cassandra down" in seen[1]["error"]["message"]  # the last good figures stay
    assert seen[2] == {"n": 3}  # a good run clears the error


def test_stopping_cancels_a_computation_in_flight() -> None:
    started, release = threading.Event(), threading.Event()
    cancelled: list[bool] = []

    def compute() -> dict[str, Any]:
        started.set()
        release.wait(5)
        raise RuntimeError("job cancelled")

    def cancel() -> None:
        cancelled.append(True)
        release.set()

    stats = PeriodicStats(compute, 60, first_delay=0.0, cancel=cancel).start()
    assert started.wait(5)
    stats.stop()
    assert cancelled == [True] and stats.latest() is None  # a cancelled run is not reported as a failure


def test_idle_stats_stop_without_cancelling() -> None:
    stats = PeriodicStats(lambda: {}, 300, cancel=lambda: pytest.fail("nothing to cancel")).start()
    started = time.monotonic()
    stats.stop()
    assert time.monotonic() - started < 2
    with pytest.raises(ValueError):
        PeriodicStats(lambda: {}, 0)


# --- the progress record and the arguments ---------------------------------------------------------


class _Query:
    name = "timeline-join"
    isActive = True
    lastProgress = {"batchId": 2, "numInputRows": 5, "durationMs": {"triggerExecution": 9}, "sources": [],
                    "stateOperators": STATE_OPERATORS}


class _Rows:
    value = 11


class _Stats:
    def latest(self) -> dict[str, Any]:
        return {"time": 1.0, "state": {"keys": 30}}


def test_progress_record_reports_live_state_and_the_latest_periodic_figures() -> None:
    running = stream.RunningStream(_Query(), _Rows())  # type: ignore[arg-type]
    record = stream.progress_record(running, _Stats())  # type: ignore[arg-type]
    assert record["timeline-join"]["state"]["numRowsTotal"] == 30
    assert record["state_stats"] == {"time": 1.0, "state": {"keys": 30}}
    assert "state_stats" not in stream.progress_record(running)


def test_state_stats_interval_argument() -> None:
    parser = argparse.ArgumentParser()
    stream.add_arguments(parser)
    assert stream.options_from_args(parser.parse_args([])).state_stats_interval == 300
    assert stream.options_from_args(parser.parse_args(["--state-stats-interval", "0"])).state_stats_interval == 0
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--state-stats-interval", bad])


def test_command_arguments() -> None:
    args = build_parser().parse_args(["state-stats", "--checkpoint", "ck", "--sample", "50", "--json"])
    assert (str(args.checkpoint), args.sample, args.json) == ("ck", 50, True)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["state-stats", "--sample", "0"])


def test_command_refuses_a_folder_without_checkpoint_before_spark(tmp_path: Any, capsys: Any,
                                                                  no_spark: None) -> None:
    from feed_service.cli.main import main

    assert main(["state-stats", "--checkpoint", str(tmp_path)]) == 2
    assert "no stream checkpoint at" in capsys.readouterr().err


def test_command_refuses_a_checkpoint_of_a_retired_operator_before_spark(tmp_path: Any, capsys: Any,
                                                                         no_spark: None) -> None:
    from feed_service.cli.main import main

    (tmp_path / "join").mkdir()
    (tmp_path / "operator").write_text("transformWithStateInPandas")
    assert main(["state-stats", "--checkpoint", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "created with --operator transformWithStateInPandas" in err and "--via backfill" in err


def test_human_report() -> None:
    rows = {"count": 30, "total": 2579, "p50": 63, "p99": 229, "max": 229}
    report = {"time": 1.0, "duration_s": 2.5, "checkpoint": "/ck",
              "state": StateSize(7, Distribution(30, 41225, 1219, 3760, 3760),
                                 {"author_state": Distribution(30, 41225, 1219, 3760, 3760)}).to_dict(),
              "timelines": {"home_timeline": {"table": "home_timeline", "partitions": 30, "exact": True,
                                              "sampled": 30, "rows": rows},
                            "author_timeline": {"table": "author_timeline", "partitions": 4000, "exact": False,
                                                "sampled": 10, "rows": rows}}}
    out = io.StringIO()
    print_report(report, out)
    text = out.getvalue()
    assert "batch 7, 30 keys, 41225 bytes" in text
    assert [line.split() for line in text.splitlines() if line.startswith("bytes per key")] == [
        ["bytes", "per", "key", "30", "41225", "1219", "3760", "3760"]]
    assert "10 sampled; about 4000 in all" in text and "computed in 2.5 s" in text
    out = io.StringIO()
    print_report({**report, "state": StateSize(None).to_dict()}, out)
    assert "no committed batch yet" in out.getvalue()
