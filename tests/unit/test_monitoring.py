"""The Grafana dashboard (k8s/monitoring/grafana-dashboard.json) charts only series that exist: every
metric name its PromQL uses is exported by the stream's registry (spark_jobs/stream/metrics.py) or by
the read server's (feed_service/server/metrics.py), each registry instantiated and given one value
in every collector so that every series is on the page."""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from feed_service.server.metrics import ServerMetrics
from feed_service.store.ports import WriteCounts
from spark_jobs.stream.sink import PartitionReport
from spark_jobs.stream.metrics import StreamMetrics
from tests.dashboard import dashboard_metric_names, expressions, exported_names, load, metric_names

#: Read-server series of the view's change topic and the read cache that the dashboard charts.
EXPECTED_SERVER_NAMES = frozenset({
    "feed_publish_to_visible_seconds_bucket",
    "feed_view_changes_total",
    "feed_view_change_errors_total",
    "feed_view_change_gaps_total",
    "feed_read_cache_total",
    "feed_read_cache_evictions_total",
    "feed_read_cache_timelines",
    "feed_watch_messages_total",
})


def stream_series() -> dict[str, float]:
    """Every series of a StreamMetrics registry, each collector given one value."""
    m = StreamMetrics()
    m.batch_written(PartitionReport({"u1": 1}, WriteCounts(timeline_upserts=1, tweets=1), {"bad_json": 1}, 1),
                    trimmed_rows=1)
    m.observe_progress({"batchId": 0, "numInputRows": 1, "timestamp": "2026-11-22T16:48:38.010Z",
                        "durationMs": {"addBatch": 700, "triggerExecution": 900},
                        "sources": [{"endOffset": '{"feed.tweets.v1": {"0": 1}}'}],
                        "stateOperators": [{"numRowsTotal": 1, "customMetrics": {"rocksdbSstFileSize": 10}}]})
    m.consumer_lag.labels("feed.tweets.v1", "0").set(0)
    m.restarted()
    return exported_names(generate_latest(m.registry).decode())


class _Cache:
    """What ``ServerMetrics.watch_read_cache`` reads from a read cache."""

    hits, misses, evictions = 3, 1, 1

    def __len__(self) -> int:
        return 2


def server_series() -> dict[str, float]:
    """Every series of a ServerMetrics registry: each of its collectors given one value (labelled
    ones one child), and a read cache to watch if it can."""
    m = ServerMetrics()
    for collector in vars(m).values():
        if not isinstance(collector, MetricWrapperBase):
            continue
        labelnames = getattr(collector, "_labelnames", ())
        child: Any = collector.labels(*("x" for _ in labelnames)) if labelnames else collector
        for action, arg in (("observe", 0.01), ("inc", 1), ("set", 1)):
            if hasattr(child, action):
                getattr(child, action)(arg)
                break
    if hasattr(m, "watch_read_cache"):
        m.watch_read_cache(_Cache())
    return exported_names(generate_latest(m.registry).decode())


def test_the_dashboard_is_a_grafana_dashboard_on_a_datasource_variable() -> None:
    dashboard = load()
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert [p["title"] for p in panels if p["type"] == "row"] == ["Freshness", "Stream", "Reads"]
    for panel in panels:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"] and all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
    for title, expr in expressions(dashboard):
        names = metric_names(expr)
        assert names and all(n.startswith("feed_") for n in names), (title, expr, names)


def test_every_dashboard_name_is_exported_by_the_stream_or_the_server() -> None:
    used = dashboard_metric_names()
    stream, server = stream_series(), server_series()
    unknown = used - stream.keys() - server.keys() - EXPECTED_SERVER_NAMES
    assert not unknown, f"charted but exported by neither registry: {sorted(unknown)}"
    # Stream names are the stream's own: none is left to the server.
    assert {n for n in used if n.startswith("feed_stream_")} <= stream.keys()


def test_every_stream_metric_is_charted() -> None:
    used = dashboard_metric_names()
    page = generate_latest(StreamMetrics().registry).decode()
    families = {f.name for f in text_string_to_metric_families(page) if not f.name.endswith("_created")}
    assert len(families) == 14
    uncharted = {f for f in families if not any(n == f or n.startswith(f + "_") for n in used)}
    assert not uncharted, sorted(uncharted)


def test_the_expected_server_names_are_exported_by_the_server() -> None:
    assert EXPECTED_SERVER_NAMES <= dashboard_metric_names()
    missing = EXPECTED_SERVER_NAMES - server_series().keys()
    assert not missing, sorted(missing)
