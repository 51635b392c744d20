"""The stream's Prometheus metrics (spark_jobs/stream/metrics.py) and their wiring in spark_jobs/stream/,
without Spark: fake progress records, partition reports and queries; values read back from the text
page the endpoint serves."""

from __future__ import annotations

import argparse
import json
import logging
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from feed_service.settings import Settings
from feed_service.store.ports import WriteCounts
from spark_jobs import stream
from spark_jobs.stream.batch import foreach_batch
from spark_jobs.stream.metrics import LagRefresher, StreamMetrics
from spark_jobs.stream.metrics_endpoint import serve_metrics
from spark_jobs.stream.restarts import Restarts
from spark_jobs.stream.sink import PartitionReport, merge_reports
from spark_jobs.stream.supervisor import observe

TOPIC = "feed.tweets.v1"


def samples(metrics: StreamMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(series name, sorted labels) -> value, parsed from the page ``/metrics`` serves."""
    page = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(page) for s in family.samples}


def value(metrics: StreamMetrics, name: str, **labels: str) -> float:
    return samples(metrics)[(name, tuple(sorted(labels.items())))]


def progress(batch: int, *, ran: bool = True, rows: int = 10, ms: int = 1500, end: int | None = None,
             state: bool = True) -> dict[str, Any]:
    """A progress record shaped like ``StreamingQuery.lastProgress`` (an idle one without ``addBatch``)."""
    durations = {"addBatch": ms - 300, "queryPlanning": 50, "triggerExecution": ms} if ran else \
        {"latestOffset": 5, "triggerExecution": 8}
    record: dict[str, Any] = {
        "batchId": batch, "numInputRows": rows if ran else 0,
        "timestamp": f"2026-11-22T16:48:{10 + batch:02d}.{'010' if ran else '500'}Z",
        "durationMs": durations,
        "sources": [{"endOffset": json.dumps({TOPIC: {"0": end if end is not None else batch * 10, "1": 5}})}],
    }
    if state:
        record["stateOperators"] = [{"operatorName": "transformWithStateInPySparkExec", "numRowsTotal": 30 + batch,
                                     "memoryUsedBytes": 8872,
                                     "customMetrics": {"rocksdbSstFileSize": 23352, "other": 1}}]
    return record


class FakeQuery:
    name = "timeline-join"

    def __init__(self, *records: dict[str, Any], error: str | None = None) -> None:
        self.records = list(records)
        self.error = error
        self.isActive = error is None

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        return self.records[-1] if self.records else None

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        return list(self.records)

    def exception(self) -> str | None:
        return self.error

    def stop(self) -> None:
        self.isActive = False


def test_a_completed_batch_counts_its_partitions_reports() -> None:
    m = StreamMetrics()
    report = merge_reports([
        PartitionReport({"ann": 2}, WriteCounts(timeline_upserts=2, timeline_deletes=1, tweets=1, profiles=1),
                        {"bad_json": 2}, 3),
        PartitionReport({"cat": 1}, WriteCounts(timeline_upserts=1, author_timeline=4, pull_follows=2, blocks=1),
                        {"bad_json": 1, "self_follow": 1}, 4),
    ])
    m.batch_written(report, trimmed_rows=5)
    m.batch_written(PartitionReport(), trimmed_rows=0)  # an empty batch adds nothing
    assert {t: value(m, "feed_stream_rows_written_total", table=t) for t in
            ("home_timeline", "tweets", "profiles", "author_timeline", "pull_follows", "blocks")} == {
        "home_timeline": 4, "tweets": 1, "profiles": 1, "author_timeline": 4, "pull_follows": 2, "blocks": 1}
    assert value(m, "feed_stream_dead_letters_total", reason="bad_json") == 3
    assert value(m, "feed_stream_dead_letters_total", reason="self_follow") == 1
    assert value(m, "feed_stream_view_changes_published_total") == 7
    assert value(m, "feed_stream_trimmed_rows_total") == 5


def test_progress_counts_each_batch_that_ran_once() -> None:
    m = StreamMetrics()
    assert m.observe_progress(progress(7, rows=42, ms=1500))
    assert not m.observe_progress(progress(7, rows=42, ms=1500))  # the same batch seen again
    assert not m.observe_progress(progress(8, ran=False))  # idle: names the next batch, ran nothing
    assert not m.observe_progress(None)
    assert value(m, "feed_stream_batches_total") == 1
    assert value(m, "feed_stream_input_rows_total") == 42
    assert value(m, "feed_stream_batch_duration_seconds_count") == 1
    assert value(m, "feed_stream_batch_duration_seconds_sum") == 1.5
    assert value(m, "feed_stream_batch_duration_seconds_bucket", le="1.0") == 0
    assert value(m, "feed_stream_batch_duration_seconds_bucket", le="1.5") == 1
    # batch 7 started at 16:48:17.010 and took 1.5 s
    assert value(m, "feed_stream_last_batch_timestamp_seconds") == pytest.approx(1795366097.010 + 1.5)
    assert value(m, "feed_stream_state_keys") == 37  # numRowsTotal
    assert value(m, "feed_stream_state_bytes") == 23352  # rocksdbSstFileSize
    # A batch without state figures leaves the gauges as they were.
    assert m.observe_progress(progress(8, state=False))
    assert value(m, "feed_stream_state_keys") == 37


def test_batches_finished_between_two_looks_are_all_counted() -> None:
    m = StreamMetrics()
    query = FakeQuery(progress(3, rows=1))
    m.observe_query(query)
    m.observe_query(query)  # nothing new
    # Three batches and an idle record since: lastProgress alone shows none of them.
    query.records += [progress(4, rows=2), progress(5, rows=4), progress(6, rows=8), progress(7, ran=False, end=60)]
    m.observe_query(query)
    assert value(m, "feed_stream_batches_total") == 4
    query.records.append(progress(7, ran=False, end=60) | {"timestamp": "2026-11-22T16:48:30.000Z"})
    m.observe_query(query)  # idle again
    query.records.append(progress(7, rows=16, end=70))  # the batch the idle records named, run at last
    m.observe_query(query)
    query.records += [progress(8, rows=32), progress(9, rows=64)]  # two more between two looks
    m.observe_query(query)
    assert value(m, "feed_stream_batches_total") == 7
    assert value(m, "feed_stream_input_rows_total") == 1 + 2 + 4 + 8 + 16 + 32 + 64


def test_the_first_look_counts_every_batch_of_this_run() -> None:
    m = StreamMetrics()
    m.observe_query(FakeQuery(progress(57, rows=1), progress(58, rows=2)))  # a checkpoint resumed at 57
    assert value(m, "feed_stream_batches_total") == 2


def test_consumer_lag_from_the_last_end_offsets_and_the_watermarks() -> None:
    m = StreamMetrics()
    other = "feed.follows.v1"
    low = {TOPIC: {"0": 0, "1": 0}, other: {"0": 3}}
    high = {TOPIC: {"0": 100, "1": 5}, other: {"0": 10}}
    assert not m.update_lag(low, high)  # no progress yet: no lag rather than a made-up one
    assert not any(name == "feed_stream_consumer_lag" for name, _ in samples(m))
    m.observe_query(FakeQuery(progress(2, end=40)))
    assert m.update_lag(low, high)
    assert value(m, "feed_stream_consumer_lag", topic=TOPIC, partition="0") == 60
    assert value(m, "feed_stream_consumer_lag", topic=TOPIC, partition="1") == 0
    # a topic the progress does not name yet: everything it holds
    assert value(m, "feed_stream_consumer_lag", topic=other, partition="0") == 7


def test_a_kafka_failure_keeps_the_previous_lag_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    m = StreamMetrics()
    m.observe_query(FakeQuery(progress(2, end=40)))
    answers: list[Any] = [({TOPIC: {"0": 0}}, {TOPIC: {"0": 50}}), RuntimeError("broker down"),
                          RuntimeError("broker down"), ({TOPIC: {"0": 0}}, {TOPIC: {"0": 45}})]

    def fetch() -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    refresher = LagRefresher(m, fetch, interval=60)
    caplog.set_level(logging.INFO, logger="feed.stream")
    assert refresher.refresh()
    assert not refresher.refresh() and not refresher.refresh()
    assert value(m, "feed_stream_consumer_lag", topic=TOPIC, partition="0") == 10  # kept
    assert [r.levelname for r in caplog.records if "consumer lag" in r.getMessage()] == ["WARNING"]
    assert refresher.refresh()
    assert value(m, "feed_stream_consumer_lag", topic=TOPIC, partition="0") == 5
    assert [r.levelname for r in caplog.records if "consumer lag" in r.getMessage()] == ["WARNING", "INFO"]


def test_the_refresher_thread_runs_and_stops() -> None:
    m = StreamMetrics()
    m.observe_query(FakeQuery(progress(1, end=10)))
    called = threading.Event()

    def fetch() -> Any:
        called.set()
        return {TOPIC: {"0": 0}}, {TOPIC: {"0": 12}}

    refresher = LagRefresher(m, fetch, interval=0.01).start()
    try:
        assert called.wait(5)
    finally:
        refresher.stop()
    assert value(m, "feed_stream_consumer_lag", topic=TOPIC, partition="0") == 2


# --- the wiring in spark_jobs/stream/ -------------------------------------------------------------


class FakeRDD:
    def __init__(self, partitions: list[list[Any]]) -> None:
        self.partitions = partitions
        self.function: Any = None

    def mapPartitions(self, function: Any) -> "FakeRDD":
        self.function = function
        return self

    def collect(self) -> list[Any]:
        return [out for rows in self.partitions for out in self.function(iter(rows))]


class FakeTrimming:
    def __init__(self) -> None:
        self.upserts: list[dict[str, int]] = []
        self.trimmed_rows = 100

    def after_batch(self, upserts: dict[str, int]) -> None:
        self.upserts.append(dict(upserts))
        self.trimmed_rows += 7


def test_the_foreach_batch_function_trims_with_the_upserts_and_keeps_the_report() -> None:
    def write_partition(settings: Any, rows: Any, counter: Any = None, write_seconds: Any = None) -> PartitionReport:
        rows = list(rows)
        return PartitionReport({r: 1 for r in rows}, WriteCounts(timeline_upserts=len(rows)), {"bad_json": 1}, 2)

    trimming, times = FakeTrimming(), stream.BatchTimes()
    write = foreach_batch(Settings(), None, trimming, None, times,  # type: ignore[arg-type]
                          partition_writer=write_partition)
    batch = type("Batch", (), {"rdd": FakeRDD([["ann", "bob"], ["ann"]])})()
    write(batch, 4)
    assert trimming.upserts == [{"ann": 2, "bob": 1}]
    assert times.batch_id == 4
    [(report, trimmed)] = times.take_completed()
    assert (report.counts.timeline_upserts, report.dead_letters, report.changes_published, trimmed) == (
        3, {"bad_json": 2}, 4, 7)
    assert times.take_completed() == []


def test_supervise_feeds_batches_and_restarts_to_the_metrics(tmp_path: Path) -> None:
    m = StreamMetrics()
    stop = threading.Event()
    failed, working = FakeQuery(progress(0), error="boom"), FakeQuery(progress(1, rows=5))
    queries = [failed, working]

    def start() -> stream.RunningStream:
        running = stream.RunningStream(queries.pop(0), type("Rows", (), {"value": 0})())
        if running.join is working:
            running.times.completed.append((PartitionReport(counts=WriteCounts(tweets=3)), 0))
            threading.Timer(0.3, stop.set).start()
        return running

    code = stream.supervise(start, stop, status_file=tmp_path / "progress.json",
                            restarts=Restarts(5, 0.0), metrics=m)
    assert code == 0
    assert value(m, "feed_stream_restarts_total") == 1
    assert value(m, "feed_stream_batches_total") == 2  # the failed query's last batch, then the new one's
    assert value(m, "feed_stream_input_rows_total") == 15
    assert value(m, "feed_stream_rows_written_total", table="tweets") == 3
    assert json.loads((tmp_path / "progress.json").read_text())["restarts"] == 1


def test_a_broken_query_does_not_stop_the_supervisor(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(FakeQuery):
        @property
        def lastProgress(self) -> Any:
            raise RuntimeError("py4j gone")

    running = stream.RunningStream(Broken(), None)
    caplog.set_level(logging.WARNING, logger="feed.stream")
    observe(StreamMetrics(), running)
    assert any("metrics not updated" in r.getMessage() for r in caplog.records)


# --- options and the endpoint ----------------------------------------------------------------------


def _parse(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], argv: list[str]) -> stream.StreamOptions:
    for name in ("FEED_STREAM_METRICS_PORT", "FEED_STREAM_METRICS_HOST"):
        monkeypatch.delenv(name, raising=False)
    for name, val in env.items():
        monkeypatch.setenv(name, val)
    parser = argparse.ArgumentParser()
    stream.add_arguments(parser)
    return stream.options_from_args(parser.parse_args(["--checkpoint", "ckpt", *argv]))


def test_metrics_options_from_flags_environment_and_defaults(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    default = _parse(monkeypatch, {}, [])
    assert (default.metrics_port, default.metrics_host) == (9465, "127.0.0.1")
    from_env = _parse(monkeypatch, {"FEED_STREAM_METRICS_PORT": "0", "FEED_STREAM_METRICS_HOST": "127.0.0.1"}, [])
    assert (from_env.metrics_port, from_env.metrics_host) == (0, "127.0.0.1")
    flag = _parse(monkeypatch, {"FEED_STREAM_METRICS_PORT": "0"}, ["--metrics-port", "9999", "--metrics-host", "::1"])
    assert (flag.metrics_port, flag.metrics_host) == (9999, "::1")
    # a flag wins over a bad environment value, which is refused by name when it is used
    assert _parse(monkeypatch, {"FEED_STREAM_METRICS_PORT": "x"}, ["--metrics-port", "1"]).metrics_port == 1
    for bad in ("x", "70000", "-1"):
        with pytest.raises(SystemExit) as exit_info:
            _parse(monkeypatch, {"FEED_STREAM_METRICS_PORT": bad}, [])
        assert exit_info.value.code == 2
        assert "FEED_STREAM_METRICS_PORT" in capsys.readouterr().err
    assert stream.StreamOptions().metrics_port == 0  # the library default: no endpoint unless asked


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_endpoint_serves_the_registry_and_a_taken_port_is_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings()
    metrics, stop = serve_metrics(settings, stream.StreamOptions(metrics_port=0))
    stop()  # port 0: nothing served, nothing to stop
    port = _free_port()
    metrics, stop = serve_metrics(settings, stream.StreamOptions(metrics_port=port, metrics_host="127.0.0.1"))
    try:
        metrics.restarted()
        with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            page = response.read().decode()
        assert "feed_stream_restarts_total 1.0" in page
        caplog.set_level(logging.ERROR, logger="feed.stream")
        taken, stop_taken = serve_metrics(settings, stream.StreamOptions(metrics_port=port,
                                                                                metrics_host="127.0.0.1"))
        stop_taken()
        assert isinstance(taken, StreamMetrics)
        assert any("metrics endpoint not started" in r.getMessage() for r in caplog.records)
    finally:
        stop()
