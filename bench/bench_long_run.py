"""Long-run benchmark of bounded growth: a long workload run with and without trimming and retention.

Runs against the developer stack (``feedctl stack up``; settings from the environment) on isolated
topics (suffix), keyspaces and checkpoints, one configuration after the other on the same generated
events, and prints figures; it asserts nothing.

- ``unbounded``: ``trim_slack`` = 10**9 (no home timeline is ever trimmed) and ``history_horizon_s`` = 0
  (the join keeps every tombstone, cold digest and dead edge);
- ``bounded``: the default trim slack (docs/trimming.md) and a history horizon of ``--horizon-s``
  seconds of event time (docs/retention.md).

Events: ``generate(users, events, seed, mean_following, events_per_second=--sim-rate)`` of
feed_service/workload/generator.py, published with Kafka record timestamps = ``version // 1000``,
the generator's simulated milliseconds (the event time the horizon is measured in): at the default
50 simulated events/s, a million events span about 5.5 hours, 33 horizons of 600 s.

Each configuration runs in two phases on one checkpoint:

1. the setup (one profile per user, the follow graph, all at the simulated start) is published and
   streamed until caught up, then the stream stops. Why apart: Spark's ``maxOffsetsPerTrigger``
   shares a batch between partitions in proportion to their backlog, so with everything published
   at once the setup follows (a fifth of the follows topic) would be read alongside tweets of the
   first hour; an author key whose watermark its tweets have already moved more than a horizon on
   rejects those follows (``beyond_horizon``), and the bounded run would lose its follow graph;
2. the whole stream of ``--events`` changes is published as one backlog, then the stream restarts
   with ``--max-offsets-per-trigger`` = ``--batch-events``, so every micro-batch reads the same number
   of records covering the same span of event time (batch-events / sim-rate seconds), and runs until
   caught up. The bench topics get ``min.compaction.lag.ms`` of ten years: the records carry
   simulated timestamps months old, so the log cleaner would otherwise compact closed segments
   (edits and deletes superseding upserts) during the run, and early batches would hold fewer
   records than late ones. The stream's periodic state statistics are off (``--state-stats-interval
   0``): a pass over the whole state every 5 minutes would land in some batches and not others.

Reported per configuration (after the stream of phase 2 stopped):

- publish rate; time from the stream start (JVM start included) and from the first batch to caught
  up, and events/s over the latter;
- micro-batch duration p50 over the first 10 % and the last 10 % of the phase-2 batches and the ratio
  end/start (target: at most 1.20), after skipping the first 3 batches as warm-up and leaving out
  partial batches (under 90 % of ``--batch-events`` records, i.e. the last one). Two sources: Spark's
  ``triggerExecution`` from the stream's progress file, polled every 0.25 s (the file is rewritten
  once a second, so batches shorter than that can be missed; the coverage is printed), and the
  checkpoint's own logs, seen for every batch: offset log written (batch planned) to commit written;
- state bytes per key (count, p50, p99, max, total; per state variable too): ``read_state_size`` on
  the stopped stream's checkpoint, with a Spark session of this process;
- home_timeline rows per timeline (p50, p99, max, total) and its logical bytes (one scan of the table:
  partition key once per partition, then per row the UTF-8 bytes of its text columns and 8 per bigint),
  author_timeline rows per timeline (feed_service/store/timeline_rows.py); ``system_views.disk_usage``
  per table (SSTables only: memtables not flushed yet are not counted, so small runs show ~0);
- dead letters the run produced (the bounded run should have none: the events are in order);
- the load average at the start and the end of phase 2.

Then a side-by-side table of the configurations with the ratios bounded / unbounded. By default the
keyspaces, topics and checkpoints are dropped at the end of each configuration (``--keep`` keeps
them); the stream logs stay in the printed folder.

    flock /tmp/feed-bench.lock .venv/bin/python bench/bench_long_run.py [--events 1000000] [--users 5000] \\
        [--sim-rate 50] [--horizon-s 600] [--batch-events 10000] [--configs unbounded,bounded] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from feed_service.distribution import EMPTY, Distribution, summarize
from feed_service.kafka.client_config import client_config
from feed_service.ops.provision import provision
from feed_service.security.roles import PRODUCER
from feed_service.settings import DEFAULT_TRIM_SLACK, Settings
from feed_service.stack.stream_process import StreamProcess
from isolated import drop, exit_on_sigterm

UNBOUNDED_SLACK = 10**9
WARMUP_BATCHES = 3
PARTIAL_SHARE = 0.9
"""A batch with fewer records than this share of --batch-events is partial (the backlog's last one)."""
NO_COMPACTION_LAG_MS = 10 * 365 * 86_400_000
POLL_SECONDS = 0.25
MIB = 1024 * 1024


# -- events ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Record:
    role: str
    key: str
    value: bytes
    timestamp_ms: int


def make_records(args: argparse.Namespace) -> tuple[list[Record], list[Record]]:
    """(setup records, stream records) of the generated workload, encoded once for every configuration."""
    from feed_service.core.events import parse_event
    from feed_service.kafka.keys import record_key, topic_role
    from feed_service.workload.generator import generate

    encode = json.JSONEncoder(separators=(",", ":")).encode
    records = []
    for envelope in generate(users=args.users, events=args.events, seed=args.seed,
                             mean_following=args.mean_following, events_per_second=args.sim_rate):
        event = parse_event(envelope)
        records.append(Record(topic_role(event), record_key(event), encode(envelope).encode(),
                              envelope["version"] // 1000))
    setup = len(records) - args.events
    return records[:setup], records[setup:]


def publish(settings: Settings, records: list[Record]) -> float:
    """Produce ``records`` with their timestamps (same client settings as EventProducer); seconds taken,
    the final flush included. Raises if any record was not delivered."""
    from confluent_kafka import Producer

    from feed_service.kafka.offsets import SOURCE_ROLES
    from feed_service.kafka.producer import PRODUCER_DEFAULTS

    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(f"{msg.topic()}: {err}")

    producer = Producer(client_config(settings, PRODUCER) | PRODUCER_DEFAULTS | {"on_delivery": on_delivery})
    topics = {role: settings.topic(role) for role in SOURCE_ROLES}  # the workload has blocks and mutes too
    started = time.perf_counter()
    for n, r in enumerate(records):
        while True:
            try:
                producer.produce(topics[r.role], r.value, r.key, timestamp=r.timestamp_ms)
                break
            except BufferError:  # local queue full: let librdkafka deliver some
                producer.poll(0.05)
        if n % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    if left or failures:
        raise RuntimeError(f"{left} records undelivered after flush, {len(failures)} failed: {failures[:3]}")
    return elapsed


# -- pipelines -------------------------------------------------------------------------------------
def pipeline(base: Settings, tag: str) -> Settings:
    """Isolated topics (suffix) and keyspace, provisioned; compaction held back on the changelogs."""
    settings = replace(base.with_topic_suffix(f".bench.{tag}"), keyspace=f"bench_{tag}")
    topics = {role: replace(spec, config={**spec.config, "min.compaction.lag.ms": str(NO_COMPACTION_LAG_MS)})
              if spec.config.get("cleanup.policy") == "compact" else spec
              for role, spec in settings.topics.items()}
    settings = settings.replace(topics=topics)
    provision(settings)
    return settings


# -- micro-batches ---------------------------------------------------------------------------------
@dataclass(slots=True)
class Batch:
    duration_ms: float | None = None
    """Spark's triggerExecution, from the progress file (None: not seen there)."""
    input_rows: int | None = None
    planned: float | None = None
    """mtime of the offset log entry (batch planned)."""
    committed: float | None = None
    """mtime of the commit log entry (batch done)."""
    end_offset: int | None = None
    """Sum of the source end offsets in the offset log entry."""
    trim_ms: float | None = None
    """The batch's trim time on its critical path (the sink's ``trim_ms``, docs/trimming.md)."""
    trim_background_ms: float | None = None
    """Background trimming done while this batch ran (``trim_background_ms``)."""
    rows_written_total: int | None = None
    """The stream's home-timeline rows written so far, read with this batch's sink record: the
    difference from the previous batch's is this batch's work (approximately: the accumulator may
    already hold part of the next batch)."""


@dataclass(slots=True)
class BatchRecorder:
    """Polls the progress file and the checkpoint's offset and commit logs (Spark keeps only the last
    100 entries of those, so they are recorded as they appear)."""

    stream: StreamProcess
    batches: dict[int, Batch] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "BatchRecorder":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self._poll()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll()
            except Exception:  # noqa: BLE001 - a file replaced under us: next time
                pass
            self._stop.wait(POLL_SECONDS)

    def _poll(self) -> None:
        join = (self.stream.progress() or {}).get("timeline-join") or {}
        b, duration, rows = join.get("batch_id"), join.get("duration_ms"), join.get("input_rows")
        if b is not None and duration is not None and rows:
            batch = self.batches.setdefault(b, Batch())
            batch.duration_ms, batch.input_rows = duration, rows
            sink = (self.stream.progress() or {}).get("sink") or {}
            if sink.get("batch_id") == b:
                batch.trim_ms, batch.trim_background_ms = sink.get("trim_ms"), sink.get("trim_background_ms")
                if batch.rows_written_total is None:
                    batch.rows_written_total = (self.stream.progress() or {}).get("timeline_rows_written")
        query = self.stream.checkpoint / "join"
        for sub in ("offsets", "commits"):
            folder = query / sub
            if not folder.is_dir():
                continue
            for f in folder.iterdir():
                if not f.name.isdigit():
                    continue
                batch = self.batches.setdefault(int(f.name), Batch())
                if sub == "commits" and batch.committed is None:
                    batch.committed = f.stat().st_mtime
                elif sub == "offsets" and batch.end_offset is None:
                    batch.planned, batch.end_offset = f.stat().st_mtime, _end_offset(f)


def _end_offset(path: Path) -> int | None:
    """Sum of the Kafka end offsets in an offset log entry (``v1``, metadata, then one line per source)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    total = 0
    for line in lines[2:]:
        try:
            source = json.loads(line)
        except ValueError:
            return None
        total += sum(int(o) for partitions in source.values() for o in partitions.values())
    return total


@dataclass(slots=True)
class BatchFigures:
    total: int = 0
    """Phase-2 batches with input, by the checkpoint logs."""
    seen: int = 0
    """Of those, seen in the progress file."""
    compared: int = 0
    partial: int = 0
    window: int = 0
    start_ms: float = float("nan")
    end_ms: float = float("nan")
    log_start_ms: float = float("nan")
    log_end_ms: float = float("nan")
    first_planned: float | None = None
    last_committed: float | None = None
    trim_share: float = float("nan")
    """Critical-path trim time over batch time, the compared batches."""
    trim_share_end: float = float("nan")
    """The same over the last 10 % of them."""
    trim_background_share: float = float("nan")
    """Background trim time (overlapping the batches) over batch time."""
    rows_start: float = float("nan")
    rows_end: float = float("nan")
    """Home-timeline rows written per batch, p50 over the first / last 10 % (the work per batch)."""
    ms_per_krow_start: float = float("nan")
    ms_per_krow_end: float = float("nan")
    """Batch time per 1,000 rows written, p50 over the same windows (the cost per unit of work)."""

    @property
    def ratio(self) -> float:
        return self.end_ms / self.start_ms if self.start_ms else float("nan")

    @property
    def log_ratio(self) -> float:
        return self.log_end_ms / self.log_start_ms if self.log_start_ms else float("nan")


def batch_figures(batches: dict[int, Batch], after: int, batch_events: int) -> BatchFigures:
    """First-10 % and last-10 % p50 of the batches after batch ``after`` (phase 1's last)."""
    ids = sorted(b for b in batches if b > after)
    rows: dict[int, int] = {}
    for b in ids:
        batch, previous = batches[b], batches.get(b - 1)
        if batch.input_rows:
            rows[b] = batch.input_rows
        elif batch.end_offset is not None and previous is not None and previous.end_offset is not None:
            rows[b] = batch.end_offset - previous.end_offset  # no compaction: offsets = records
    ids = [b for b in ids if rows.get(b, 0) > 0]
    out = BatchFigures(total=len(ids), seen=sum(1 for b in ids if batches[b].duration_ms is not None))
    if not ids:
        return out
    out.first_planned = batches[ids[0]].planned
    out.last_committed = max((batches[b].committed for b in ids if batches[b].committed), default=None)
    measured = ids[WARMUP_BATCHES:]
    full = [b for b in measured if rows[b] >= PARTIAL_SHARE * batch_events]
    out.partial, out.compared = len(measured) - len(full), len(full)
    if not full:
        return out
    n = max(1, round(len(full) / 10))
    out.window = n
    head, tail = full[:n], full[-n:]

    def p50(chosen: list[int], value: Any) -> float:
        values = [v for v in (value(batches[b]) for b in chosen) if v is not None]
        return statistics.median(values) if values else float("nan")

    progress = lambda b: b.duration_ms  # noqa: E731
    logs = lambda b: (b.committed - b.planned) * 1000 if b.committed and b.planned else None  # noqa: E731
    # the progress file's windows: the first and last n of the full batches it saw
    seen = [b for b in full if batches[b].duration_ms is not None]
    if seen:
        m = max(1, round(len(seen) / 10))
        out.start_ms, out.end_ms = p50(seen[:m], progress), p50(seen[-m:], progress)
    out.log_start_ms, out.log_end_ms = p50(head, logs), p50(tail, logs)
    written: dict[int, int] = {}
    for prev, b in zip(ids, ids[1:]):
        before, now = batches[prev].rows_written_total, batches[b].rows_written_total
        if before is not None and now is not None and now > before:
            written[b] = now - before
    worked = [b for b in full if b in written and batches[b].duration_ms is not None]
    if worked:
        k = max(1, round(len(worked) / 10))
        out.rows_start = statistics.median(written[b] for b in worked[:k])
        out.rows_end = statistics.median(written[b] for b in worked[-k:])
        out.ms_per_krow_start = statistics.median(1000 * batches[b].duration_ms / written[b] for b in worked[:k])
        out.ms_per_krow_end = statistics.median(1000 * batches[b].duration_ms / written[b] for b in worked[-k:])
    trimmed = [batches[b] for b in full if batches[b].trim_ms is not None and batches[b].duration_ms]
    if trimmed:
        total = sum(b.duration_ms for b in trimmed)  # type: ignore[misc]
        out.trim_share = sum(b.trim_ms for b in trimmed) / total  # type: ignore[misc]
        out.trim_background_share = sum(b.trim_background_ms or 0 for b in trimmed) / total  # type: ignore[misc]
        last = trimmed[-max(1, round(len(trimmed) / 10)):]
        out.trim_share_end = sum(b.trim_ms for b in last) / sum(b.duration_ms for b in last)  # type: ignore[misc]
    return out


# -- measurements after the run --------------------------------------------------------------------
@dataclass(slots=True)
class StoreFigures:
    home: Distribution = EMPTY
    home_bytes: int = 0
    author: Distribution = EMPTY
    disk_mib: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def store_figures(settings: Settings) -> StoreFigures:
    from cassandra.cluster import EXEC_PROFILE_DEFAULT
    from cassandra.concurrent import execute_concurrent_with_args
    from cassandra.query import tuple_factory

    from feed_service.store.session import connect
    from feed_service.store.timeline_rows import TimelineRows
    from feed_service.store.token_scan import scan_by_token

    out = StoreFigures()
    cluster, session = connect(settings)
    try:
        profile = session.execution_profile_clone_update(EXEC_PROFILE_DEFAULT, row_factory=tuple_factory,
                                                         request_timeout=120)
        try:
            # partition by partition: one query across them reads every trimmed row's tombstone in a
            # page (docs/operations.md#failure-modes-reads-and-scans)
            keys = [r[0] for r in scan_by_token(
                session, f"SELECT DISTINCT timeline_id, token(timeline_id) FROM {settings.keyspace}.home_timeline",
                "timeline_id", profile=profile)]
            read = session.prepare(f"SELECT tweet_id, author_id, text FROM {settings.keyspace}.home_timeline"
                                   " WHERE timeline_id = ?")
            rows: dict[str, int] = {}
            size = 0
            for timeline_id, (ok, result) in zip(keys, execute_concurrent_with_args(
                    session, read, [(k,) for k in keys], concurrency=16, raise_on_first_error=True,
                    execution_profile=profile)):
                live = [r for r in result if r[0] is not None]  # a partition of statics only: no row
                if not live:
                    continue
                rows[timeline_id] = len(live)
                # created_at, version, profile_version: 8 bytes each
                size += len(timeline_id.encode()) + sum(
                    len(t.encode()) + len(a.encode()) + len((x or "").encode()) + 24 for t, a, x in live)
            out.home, out.home_bytes = summarize(rows.values()), size
        except Exception as exc:  # noqa: BLE001 - e.g. one partition over the tombstone threshold: report, go on
            out.notes.append(f"home_timeline scan failed: {type(exc).__name__}: {exc}"[:300])
        try:
            out.author = TimelineRows(session, settings.keyspace).count("author_timeline", "author_id").rows
        except Exception as exc:  # noqa: BLE001
            out.notes.append(f"author_timeline count failed: {type(exc).__name__}: {exc}"[:300])
        try:
            for row in session.execute("SELECT table_name, mebibytes FROM system_views.disk_usage "
                                       "WHERE keyspace_name = %s", (settings.keyspace,), execution_profile=profile):
                out.disk_mib[row[0]] = float(row[1])
        except Exception as exc:  # noqa: BLE001 - older Cassandra: no such view
            out.notes.append(f"system_views.disk_usage unavailable: {type(exc).__name__}: {exc}"[:300])
    finally:
        cluster.shutdown()
    return out


def dead_letters(settings: Settings) -> int | None:
    from feed_service.kafka.offsets import watermarks

    try:
        low, high = watermarks(settings, ("dead_letter",))
    except Exception:  # noqa: BLE001
        return None
    return sum(high[t][p] - low[t][p] for t in high for p in high[t])


class StateReader:
    """One Spark session of this process, built at the first read."""

    def __init__(self) -> None:
        self._spark = None

    def read(self, checkpoint: Path) -> Any:
        from spark_jobs.runtime.session import build_session
        from spark_jobs.state_stats import read_state_size

        if self._spark is None:
            self._spark = build_session("bench-long-run-state")
        return read_state_size(self._spark, checkpoint)

    def stop(self) -> None:
        if self._spark is not None:
            self._spark.stop()


# -- one configuration -----------------------------------------------------------------------------
@dataclass(slots=True)
class Result:
    name: str
    publish_s: float = float("nan")
    wall_s: float = float("nan")
    processing_s: float = float("nan")
    events: int = 0
    batches: BatchFigures = field(default_factory=BatchFigures)
    state: Any = None
    store: StoreFigures = field(default_factory=StoreFigures)
    dead_letters: int | None = None
    load_start: tuple[float, ...] = ()
    load_end: tuple[float, ...] = ()
    error: str | None = None

    @property
    def events_per_s(self) -> float:
        ok = self.processing_s == self.processing_s and self.processing_s > 0  # not nan, not 0
        return self.events / self.processing_s if ok else float("nan")


def run_config(name: str, settings: Settings, setup: list[Record], events: list[Record], args: argparse.Namespace,
               workdir: Path, states: StateReader) -> Result:
    result = Result(name, events=len(events))
    tag = f"lr{name[:4]}{uuid.uuid4().hex[:4]}"
    settings = pipeline(settings, tag)
    checkpoint = workdir / f"ckpt-{tag}"
    extra = ["--max-offsets-per-trigger", str(args.batch_events), "--state-stats-interval", "0"]

    def new_stream() -> StreamProcess:
        return StreamProcess(settings, checkpoint, log_file=workdir / f"stream-{tag}.log", extra_args=extra)

    print(f"\n[{name}] trim_slack {settings.trim_slack}, history_horizon_s {settings.history_horizon_s}, "
          f"inbox_cap {settings.inbox_cap}; keyspace {settings.keyspace}, topics *.bench.{tag}", flush=True)
    stream: StreamProcess | None = None
    try:
        seconds = publish(settings, setup)
        print(f"  phase 1: published the setup, {len(setup):,} records in {seconds:.1f}s; streaming it", flush=True)
        stream = new_stream().start()
        progress = stream.wait_caught_up(timeout=1800)
        setup_last = progress["timeline-join"]["batch_id"]
        stream.stop()
        stream = None

        result.publish_s = publish(settings, events)
        print(f"  phase 2: published {len(events):,} records in {result.publish_s:.1f}s "
              f"({len(events) / result.publish_s:,.0f}/s); streaming the backlog in batches of {args.batch_events:,}",
              flush=True)
        result.load_start = os.getloadavg()
        started = time.time()
        stream = new_stream().start()
        recorder = BatchRecorder(stream).start()
        try:
            stream.wait_caught_up(timeout=args.timeout_s)
        finally:
            recorder.stop()
        result.wall_s = time.time() - started
        result.load_end = os.getloadavg()
        stream.stop()
        stream = None
        result.batches = b = batch_figures(recorder.batches, setup_last, args.batch_events)
        if b.first_planned and b.last_committed:
            result.processing_s = b.last_committed - b.first_planned
        result.dead_letters = dead_letters(settings)
        result.store = store_figures(settings)
        try:
            result.state = states.read(checkpoint)
        except Exception as exc:  # noqa: BLE001 - report the rest anyway
            result.store.notes.append(f"state size unavailable: {type(exc).__name__}: {exc}"[:300])
        print_result(result, settings, args)
    except Exception as exc:  # noqa: BLE001 - the other configurations still run
        result.error = f"{type(exc).__name__}: {exc}"
        print(f"  FAILED: {result.error[:2000]}\n  stream log: {workdir / f'stream-{tag}.log'}")
        traceback.print_exc()
    finally:
        if stream is not None:
            stream.stop()
        if not args.keep:
            drop(settings)
            shutil.rmtree(checkpoint, ignore_errors=True)
    return result


# -- printing --------------------------------------------------------------------------------------
def _load(values: tuple[float, ...]) -> str:
    return " ".join(f"{x:.2f}" for x in values) or "-"


def _dist(d: Distribution) -> str:
    return f"p50 {d.p50:,} p99 {d.p99:,} max {d.max:,} (count {d.count:,}, total {d.total:,})"


def print_result(r: Result, settings: Settings, args: argparse.Namespace) -> None:
    b = r.batches
    print(f"  time: {r.wall_s:.1f}s from the stream start to caught up (JVM start included), {r.processing_s:.1f}s "
          f"from the first batch planned to the last committed: {r.events_per_s:,.0f} events/s; "
          f"load average {_load(r.load_start)} -> {_load(r.load_end)}")
    print(f"  micro-batches: {b.total} with input, {b.seen} of them seen in the progress file; first {WARMUP_BATCHES} "
          f"skipped as warm-up, {b.partial} partial (< {PARTIAL_SHARE:.0%} of {args.batch_events:,} records) left out, "
          f"{b.compared} compared, windows of {b.window} (10 %)")
    print(f"    duration p50, progress file (triggerExecution): start {b.start_ms:,.0f} ms, end {b.end_ms:,.0f} ms, "
          f"end/start {b.ratio:.2f} (target <= 1.20)")
    print(f"    duration p50, checkpoint logs (offset log -> commit, every batch): start {b.log_start_ms:,.0f} ms, "
          f"end {b.log_end_ms:,.0f} ms, end/start {b.log_ratio:.2f}")
    print(f"    home-timeline rows written per batch p50: start {b.rows_start:,.0f}, end {b.rows_end:,.0f}; batch time "
          f"per 1,000 rows: start {b.ms_per_krow_start:,.0f} ms, end {b.ms_per_krow_end:,.0f} ms, end/start "
          f"{b.ms_per_krow_end / b.ms_per_krow_start if b.ms_per_krow_start else float('nan'):.2f} (cost per unit of work)")
    print(f"    trimming on the critical path: {b.trim_share:.1%} of batch time over the compared batches, "
          f"{b.trim_share_end:.1%} over the last 10 % (target <= 10 %); background trimming meanwhile "
          f"{b.trim_background_share:.1%} of batch time (docs/trimming.md)")
    if r.state is not None:
        s = r.state
        print(f"  state at batch {s.batch_id}: bytes per key {_dist(s.per_key)}")
        for var, d in sorted(s.variables.items()):
            print(f"    {var}: p50 {d.p50:,} p99 {d.p99:,} max {d.max:,} over {d.count:,} keys, total {d.total:,}")
    st = r.store
    print(f"  home_timeline rows per timeline: {_dist(st.home)}")
    print(f"  home_timeline logical bytes: {st.home_bytes / MIB:,.2f} MiB "
          f"({st.home_bytes / st.home.total if st.home.total else 0:,.0f} per row)")
    print(f"  author_timeline rows per timeline: {_dist(st.author)}")
    disk = ", ".join(f"{t} {m:,.2f}" for t, m in sorted(st.disk_mib.items())) or "-"
    print(f"  disk_usage MiB (SSTables only, unflushed memtables not counted): {disk}")
    print(f"  dead letters: {r.dead_letters if r.dead_letters is not None else '?'}")
    for note in st.notes:
        print(f"  note: {note}")


def print_table(results: list[Result]) -> None:
    ok = [r for r in results if r.error is None]
    if not ok:
        return

    def state(attr: str) -> Any:
        return lambda r: getattr(r.state.per_key, attr) if r.state is not None else float("nan")

    metrics: list[tuple[str, Any, str]] = [
        ("events/s (first batch -> caught up)", lambda r: r.events_per_s, ",.0f"),
        ("batch p50 start, ms (progress)", lambda r: r.batches.start_ms, ",.0f"),
        ("batch p50 end, ms (progress)", lambda r: r.batches.end_ms, ",.0f"),
        ("batch end/start (progress)", lambda r: r.batches.ratio, ".2f"),
        ("batch end/start (checkpoint logs)", lambda r: r.batches.log_ratio, ".2f"),
        ("state keys", state("count"), ",.0f"),
        ("state bytes per key p50", state("p50"), ",.0f"),
        ("state bytes per key p99", state("p99"), ",.0f"),
        ("state bytes per key max", state("max"), ",.0f"),
        ("state bytes total", state("total"), ",.0f"),
        ("home rows per timeline p50", lambda r: r.store.home.p50, ",.0f"),
        ("home rows per timeline p99", lambda r: r.store.home.p99, ",.0f"),
        ("home rows per timeline max", lambda r: r.store.home.max, ",.0f"),
        ("home rows total", lambda r: r.store.home.total, ",.0f"),
        ("home logical MiB", lambda r: r.store.home_bytes / MIB, ",.2f"),
        ("home disk_usage MiB", lambda r: r.store.disk_mib.get("home_timeline", float("nan")), ",.2f"),
        ("author rows total", lambda r: r.store.author.total, ",.0f"),
        ("author rows per timeline max", lambda r: r.store.author.max, ",.0f"),
        ("dead letters", lambda r: r.dead_letters if r.dead_letters is not None else float("nan"), ",.0f"),
        ("load average 1 min, start", lambda r: r.load_start[0] if r.load_start else float("nan"), ".2f"),
        ("load average 1 min, end", lambda r: r.load_end[0] if r.load_end else float("nan"), ".2f"),
    ]
    ratio_of = {r.name: r for r in ok}
    pair = ("bounded", "unbounded") if {"bounded", "unbounded"} <= set(ratio_of) else None
    width = max(len(m[0]) for m in metrics)
    header = f"{'':<{width}}" + "".join(f"{r.name:>16}" for r in ok) + (f"{'bounded/unb.':>16}" if pair else "")
    print("\n" + header)
    for label, get, fmt in metrics:
        line = f"{label:<{width}}" + "".join(f"{format(get(r), fmt):>16}" for r in ok)
        if pair:
            num, den = get(ratio_of[pair[0]]), get(ratio_of[pair[1]])
            line += f"{(num / den if den else float('nan')):>16.2f}"
        print(line)
    for r in results:
        if r.error is not None:
            print(f"{r.name}: FAILED ({r.error[:200]})")


def main() -> int:
    base = Settings.from_env()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="stream changes after the setup")
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--mean-following", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sim-rate", type=float, default=50.0, help="simulated events per second of event time")
    parser.add_argument("--horizon-s", type=int, default=600, help="history horizon of the bounded configuration")
    parser.add_argument("--batch-events", type=int, default=10_000, help="--max-offsets-per-trigger of the stream")
    parser.add_argument("--inbox-cap", type=int, default=base.inbox_cap)
    parser.add_argument("--configs", default="unbounded,bounded", help="comma list of unbounded, bounded")
    parser.add_argument("--timeout-s", type=float, default=6 * 3600, help="catch-up timeout of phase 2")
    parser.add_argument("--keep", action="store_true", help="keep keyspaces, topics and checkpoints")
    args = parser.parse_args()
    configs = {
        "unbounded": base.replace(inbox_cap=args.inbox_cap, trim_slack=UNBOUNDED_SLACK, history_horizon_s=0),
        "bounded": base.replace(inbox_cap=args.inbox_cap, trim_slack=DEFAULT_TRIM_SLACK,
                                history_horizon_s=args.horizon_s),
    }
    chosen = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in configs]
    if unknown:
        parser.error(f"unknown configurations {unknown}; choose from {sorted(configs)}")
    workdir = Path(tempfile.mkdtemp(prefix="bench-long-run-"))
    print(f"bench_long_run: kafka {base.kafka_bootstrap}, cassandra {base.cassandra_hosts}:{base.cassandra_port}, "
          f"logs in {workdir}")
    started = time.perf_counter()
    setup, events = make_records(args)
    span_s = (events[-1].timestamp_ms - events[0].timestamp_ms) / 1000 if events else 0.0
    print(f"generated {len(setup):,} setup records and {len(events):,} stream changes in "
          f"{time.perf_counter() - started:.1f}s (users {args.users:,}, mean following {args.mean_following:g}, "
          f"seed {args.seed}); event time spans {span_s / 3600:.2f} h = {span_s / args.horizon_s:.1f} horizons of "
          f"{args.horizon_s} s; a batch of {args.batch_events:,} covers {args.batch_events / args.sim_rate:.0f} s",
          flush=True)
    states = StateReader()
    results = []
    try:
        for name in chosen:
            results.append(run_config(name, configs[name], setup, events, args, workdir, states))
    finally:
        states.stop()
    print_table(results)
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    raise SystemExit(main())
