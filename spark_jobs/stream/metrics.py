"""Prometheus collectors of the streaming job, in their own registry, served over HTTP from the stream's
driver process (``feedctl stream --metrics-port``, default 9465; the read server's are
feed_service/server/metrics.py).

============================================  =========  ===================================================
``feed_stream_batch_duration_seconds``        histogram  micro-batch duration (progress ``triggerExecution``)
``feed_stream_batches_total``                 counter    micro-batches completed
``feed_stream_input_rows_total``              counter    Kafka records read by those batches (``numInputRows``)
``feed_stream_last_batch_timestamp_seconds``  gauge      when the last batch ended (Unix seconds)
``feed_stream_rows_written_total``            counter    Cassandra rows written, by ``table``: home_timeline
                                                         (upserts and deletes), tweets, profiles,
                                                         author_timeline, pull_follows, blocks, home_extras,
                                                         user_reposts, reader_visible, pull_reposters
                                                         (elements of home_timeline.pull_reposters),
                                                         reader_hidden, reader_excluded, lists (a list's
                                                         fact: its lists row and its reader's statics)
``feed_stream_dead_letters_total``            counter    dead letters published, by ``reason`` (reason code)
``feed_stream_view_changes_published_total``  counter    view-change messages published
``feed_stream_trimmed_rows_total``            counter    home-timeline rows deleted by trimming (docs/trimming.md)
``feed_stream_consumer_lag``                  gauge      records between the stream's last end offset and the
                                                         high watermark, by ``topic`` and ``partition``
``feed_stream_state_keys``                    gauge      state rows of the join (``numRowsTotal`` of the last
                                                         batch, all state partitions: one per author key, two
                                                         for a key with an edges part)
``feed_stream_state_bytes``                   gauge      the state store's files on local disk
                                                         (``rocksdbSstFileSize`` of the last batch)
``feed_stream_restarts_total``                counter    query restarts by the supervisor (spark_jobs/stream/restarts.py)
``feed_stream_readers``                       gauge      readers the driver has recorded, by ``state``: active,
                                                         inactive (inbox not kept), rebuilding (docs/activity.md)
``feed_stream_inbox_rows_skipped_total``      counter    inbox row writes left out for inactive readers
                                                         (what skipping saved; docs/activity.md)
============================================  =========  ===================================================

Where the figures come from, and when they count:

- **Batch figures** (duration, batches, input rows, last batch time, state gauges) come from the
  query's progress (``lastProgress``; ``recentProgress`` when more than one batch ended between two
  looks), once per batch id that ran (``addBatch`` in its ``durationMs``): the idle progress Spark
  reports while no data arrives is skipped. A batch that failed reports no progress; its replay
  counts once.
- **Sink figures** (rows written, dead letters, view changes, trimmed rows) are what the executors'
  ``write_partition`` returned (spark_jobs/stream/sink.py ``PartitionReport``), summed over the
  batch's partitions and counted once per *completed* ``foreachBatch`` call. A batch that fails after
  some writes, or whose trim fails, counts nothing; when it is replayed it counts again in full, so
  after a restart these counters can exceed the rows that exist (the writes are idempotent,
  docs/idempotent-writes.md; dead letters are at least once).
- **Consumer lag** is refreshed by a background thread (:class:`LagRefresher`, every
  :data:`LAG_INTERVAL_SECONDS`) from the topics' watermarks, never on the batch path: it is the high
  watermark minus the end offset of the last progress (a partition that progress does not name yet:
  minus its low watermark). No lag is reported before the process's first progress names its
  offsets. A refresh that fails (Kafka unreachable) is logged and the previous values stay.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from spark_jobs.state_stats import live_state

if TYPE_CHECKING:
    from feed_service.kafka.offsets import Offsets
    from spark_jobs.stream.sink import PartitionReport

log = logging.getLogger("feed.stream")

DEFAULT_METRICS_PORT = 9465
DEFAULT_METRICS_HOST = "127.0.0.1"
"""Loopback unless configured: the endpoint has no authentication (docs/security.md); a deployment
whose Prometheus scrapes the pod sets ``--metrics-host 0.0.0.0`` (k8s/stream-sparkapplication.yaml)."""
#: Micro-batches take ~1-2 s in steady state on this machine (docs/streaming.md) and tens of seconds
#: for a backlog after downtime.
BATCH_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0)
#: The ``table`` label values of ``feed_stream_rows_written_total`` (all exported from the start, at 0).
TABLES = ("home_timeline", "tweets", "profiles", "author_timeline", "pull_follows", "blocks", "home_extras",
          "user_reposts", "reader_visible", "pull_reposters", "reader_hidden", "reader_excluded", "lists")
#: How often the consumer lag is refreshed, and how long one watermark request may take.
LAG_INTERVAL_SECONDS = 5.0
LAG_TIMEOUT_SECONDS = 5.0
#: The state figures of :func:`~spark_jobs.state_stats.live_state` the two state gauges show.
STATE_KEYS_FIGURE = "numRowsTotal"
STATE_BYTES_FIGURE = "rocksdbSstFileSize"


def ran(progress: Mapping[str, Any]) -> bool:
    """Whether a progress record is a batch that ran: Spark also reports idle progress while no data
    arrives (every ``noDataProgressEventInterval``), naming the *next* batch id, without ``addBatch``.

    >>> ran({"batchId": 3, "durationMs": {"addBatch": 700, "triggerExecution": 900}})
    True
    >>> ran({"batchId": 4, "durationMs": {"latestOffset": 5, "triggerExecution": 8}})
    False
    """
    return "addBatch" in (progress.get("durationMs") or {})


def end_offsets(progress: Mapping[str, Any] | None) -> dict[str, dict[str, int]]:
    """The sources' end offsets of a progress record, topic -> partition -> offset (Spark gives
    each source's ``endOffset`` as a JSON string).

    >>> end_offsets({"sources": [{"endOffset": '{"t": {"0": 5, "1": 7}}'}]})
    {'t': {'0': 5, '1': 7}}
    """
    out: dict[str, dict[str, int]] = {}
    for source in (progress or {}).get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if isinstance(end, Mapping):
            for topic, parts in end.items():
                if isinstance(parts, Mapping):
                    out.setdefault(topic, {}).update({str(p): int(o) for p, o in parts.items()
                                                      if isinstance(o, int)})
    return out


def batch_end_time(progress: Mapping[str, Any]) -> float | None:
    """When a batch ended (Unix seconds): its start (``timestamp``) plus ``triggerExecution``.

    >>> batch_end_time({"timestamp": "2026-11-22T16:48:38.010Z", "durationMs": {"triggerExecution": 1000}})
    1795366119.01
    """
    try:
        start = datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError):
        return None
    return round(start + ((progress.get("durationMs") or {}).get("triggerExecution") or 0) / 1000, 3)


class StreamMetrics:
    """The stream's collectors (module docstring) and the bookkeeping of which batches they counted."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.batch_duration = Histogram("feed_stream_batch_duration_seconds", "micro-batch duration (triggerExecution)",
                                        buckets=BATCH_BUCKETS, registry=r)
        self.batches = Counter("feed_stream_batches", "micro-batches completed", registry=r)
        self.input_rows = Counter("feed_stream_input_rows", "Kafka records read by completed micro-batches", registry=r)
        self.last_batch = Gauge("feed_stream_last_batch_timestamp_seconds", "when the last micro-batch ended",
                                registry=r)
        self.rows_written = Counter("feed_stream_rows_written", "Cassandra rows written by table", ("table",),
                                    registry=r)
        self.dead_letters = Counter("feed_stream_dead_letters", "dead letters published by reason code", ("reason",),
                                    registry=r)
        self.view_changes = Counter("feed_stream_view_changes_published", "view-change messages published",
                                    registry=r)
        self.trimmed_rows = Counter("feed_stream_trimmed_rows", "home-timeline rows deleted by trimming", registry=r)
        self.consumer_lag = Gauge("feed_stream_consumer_lag", "records from the stream's last end offset to the"
                                  " high watermark", ("topic", "partition"), registry=r)
        self.state_keys = Gauge("feed_stream_state_keys", "state rows of the join at the last batch (numRowsTotal)",
                                registry=r)
        self.state_bytes = Gauge("feed_stream_state_bytes", "state store files on local disk at the last batch"
                                 " (rocksdbSstFileSize)", registry=r)
        self.restarts = Counter("feed_stream_restarts", "query restarts by the supervisor", registry=r)
        self.readers = Gauge("feed_stream_readers", "readers the driver has recorded, by state", ("state",),
                             registry=r)
        self.rows_skipped = Counter("feed_stream_inbox_rows_skipped", "inbox row writes left out for inactive readers",
                                    registry=r)
        for state in ("active", "inactive", "rebuilding"):
            self.readers.labels(state)  # exported from the start, at 0
        self._skipped_seen = 0
        self._tables = {table: self.rows_written.labels(table) for table in TABLES}
        self._last_batch_id = -1
        self._last_seen: tuple[Any, Any] | None = None
        self._end_offsets: dict[str, dict[str, int]] = {}

    # --- the sink: what one completed foreachBatch call wrote ----------------------------------

    def batch_written(self, report: "PartitionReport", *, trimmed_rows: int = 0) -> None:
        """Count one completed ``foreachBatch`` call: ``report`` summed over its partitions, and the
        rows its trim pass deleted."""
        counts = report.counts
        for table, n in (("home_timeline", counts.timeline_upserts + counts.timeline_deletes),
                         ("tweets", counts.tweets), ("profiles", counts.profiles),
                         ("author_timeline", counts.author_timeline), ("pull_follows", counts.pull_follows),
                         ("blocks", counts.blocks), ("home_extras", counts.extras_upserts + counts.extras_deletes),
                         ("user_reposts", counts.user_reposts), ("reader_visible", counts.visible),
                         ("pull_reposters", counts.pull_reposters), ("reader_hidden", counts.hidden),
                         ("reader_excluded", counts.excluded), ("lists", counts.lists)):
            if n:
                self._tables[table].inc(n)
        for reason, n in report.dead_letters.items():
            if n:
                self.dead_letters.labels(reason).inc(n)
        if report.changes_published:
            self.view_changes.inc(report.changes_published)
        if trimmed_rows:
            self.trimmed_rows.inc(trimmed_rows)

    def observe_activity(self, record: Mapping[str, Any]) -> None:
        """Readers by state and the rows skipping saved, from the driver's activity record."""
        for state, figure in (("active", "active_readers"), ("inactive", "inactive_readers"),
                              ("rebuilding", "rebuilding_readers")):
            self.readers.labels(state).set(record.get(figure, 0))
        skipped = record.get("skipped_rows", 0)
        if skipped > self._skipped_seen:
            self.rows_skipped.inc(skipped - self._skipped_seen)
            self._skipped_seen = skipped

    # --- the query's progress ---------------------------------------------------------------------

    def observe_progress(self, progress: Mapping[str, Any] | None) -> bool:
        """Count one progress record if it is a batch that ran and was not counted yet; True if it was."""
        if not progress or not ran(progress):
            return False
        batch = progress.get("batchId")
        if not isinstance(batch, int) or batch <= self._last_batch_id:
            return False
        self._last_batch_id = batch
        self.batches.inc()
        rows = progress.get("numInputRows")
        if isinstance(rows, (int, float)) and rows > 0:
            self.input_rows.inc(rows)
        duration = (progress.get("durationMs") or {}).get("triggerExecution")
        if isinstance(duration, (int, float)):
            self.batch_duration.observe(duration / 1000)
        ended = batch_end_time(progress)
        self.last_batch.set(ended if ended is not None else time.time())
        state = live_state(progress) or {}
        if isinstance(state.get(STATE_KEYS_FIGURE), (int, float)):
            self.state_keys.set(state[STATE_KEYS_FIGURE])
        if isinstance(state.get(STATE_BYTES_FIGURE), (int, float)):
            self.state_bytes.set(state[STATE_BYTES_FIGURE])
        return True

    def observe_query(self, query: Any) -> None:
        """Count the batches ``query`` (a ``StreamingQuery``) finished since the last call.

        Called about once a second by the stream's supervisor: ``lastProgress`` alone when it is the
        batch after the last one counted, else ``recentProgress`` (the query's last 100 records: the
        batches that ended between two calls, or, at the first call, all of this run's so far).
        """
        last = query.lastProgress
        if not last:
            return
        seen = (last.get("batchId"), last.get("timestamp"))
        if seen == self._last_seen:
            return
        self._last_seen = seen
        offsets = end_offsets(last)
        if offsets:
            self._end_offsets = offsets  # replaced whole: the lag thread reads it without a lock
        batch = last.get("batchId")
        if not isinstance(batch, int):
            return
        newest = batch if ran(last) else batch - 1  # an idle record names the batch after the last one run
        if newest <= self._last_batch_id:
            return
        only_last = ran(last) and newest == self._last_batch_id + 1
        for progress in [last] if only_last else (query.recentProgress or [last]):
            self.observe_progress(progress)

    def restarted(self) -> None:
        """The supervisor started the query again after a failure."""
        self.restarts.inc()

    # --- consumer lag -----------------------------------------------------------------------------

    def update_lag(self, low: "Offsets", high: "Offsets") -> bool:
        """Set the lag of every partition of ``high`` (the watermarks now) from the last end offsets;
        False, and nothing set, while no progress has named any."""
        done = self._end_offsets
        if not done:
            return False
        for topic, parts in high.items():
            for partition, hi in parts.items():
                at = done.get(topic, {}).get(partition)
                if at is None:  # not read yet (a topic the checkpoint has not seen): all its records
                    at = low.get(topic, {}).get(partition, 0)
                self.consumer_lag.labels(topic, partition).set(max(0, hi - at))
        return True

    # --- serving ----------------------------------------------------------------------------------

    def start_http(self, host: str, port: int) -> Any:
        """Serve ``/metrics`` from a daemon thread; returns the HTTP server (``.server_port``,
        ``.shutdown()``). Raises OSError if the address cannot be bound."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server


class LagRefresher:
    """Refreshes :meth:`StreamMetrics.update_lag` every ``interval`` seconds from ``fetch`` (the topics'
    (low, high) watermarks) in a daemon thread, off the batch path.

    A failing ``fetch`` is logged once (and its recovery), never raised: the previous values stay.
    """

    def __init__(self, metrics: StreamMetrics, fetch: Callable[[], tuple["Offsets", "Offsets"]], *,
                 interval: float = LAG_INTERVAL_SECONDS) -> None:
        self.metrics = metrics
        self._fetch = fetch
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failing = False

    def refresh(self) -> bool:
        """One refresh; True if the lag was set."""
        try:
            low, high = self._fetch()
            updated = self.metrics.update_lag(low, high)
        except Exception as exc:  # noqa: BLE001 - a Kafka hiccup must never reach the stream
            if not self.failing:
                log.warning("consumer lag not refreshed, previous values kept (retried every %gs): %s",
                            self._interval, exc)
            self.failing = True
            return False
        if self.failing:
            log.info("consumer lag refreshed again")
        self.failing = False
        return updated

    def start(self) -> "LagRefresher":
        self._thread = threading.Thread(target=self._run, name="feed-consumer-lag", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.refresh()

    def stop(self) -> None:
        """Stop refreshing; a refresh in flight is not waited for beyond a moment (daemon thread)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
