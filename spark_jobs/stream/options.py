"""How to run the stream (:class:`StreamOptions`), the job's defaults, and the trigger they give."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from spark_jobs.stream.metrics import DEFAULT_METRICS_HOST

DEFAULT_CHECKPOINT = Path(".stack/local/checkpoints/stream")
#: Bounds a micro-batch after downtime so the first batches after a restart stay short.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 200_000
#: How often the per-key state size and rows per timeline are computed for the progress record
#: (spark_jobs/state_stats.py; 0 = never): a pass over the whole state, so minutes apart.
DEFAULT_STATE_STATS_INTERVAL = 300.0


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """How to run the stream; the view's shape (inbox cap) comes from the settings."""

    checkpoint: Path = DEFAULT_CHECKPOINT
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    trigger_seconds: float = 0.0
    starting_offsets: str = "earliest"
    bootstrap_from: Path | None = None
    """A completed backfill's folder (``feedctl backfill --out``) to continue from (new checkpoint only)."""
    settings_changes: Mapping[str, Any] = field(default_factory=dict)
    """Settings given on the command line (``--inbox-cap``): :func:`~spark_jobs.stream.runner.run_stream`
    applies them with :meth:`Settings.replace` before anything starts;
    :func:`~spark_jobs.stream.query.start_stream` reads only the settings."""
    state_stats_interval: float = DEFAULT_STATE_STATS_INTERVAL
    """Seconds between computations of the state size per key and rows per timeline; 0 = off."""
    until_caught_up: bool = False
    """Spark's availableNow trigger instead of ``trigger_seconds``: finish a pending batch with its logged
    offsets, process what the topics hold at the start, then end with every batch committed (what
    ``feedctl reshard --finish-pending`` needs; docs/streaming.md, "State partitions")."""
    metrics_port: int = 0
    """Port of the Prometheus ``/metrics`` endpoint the driver serves (spark_jobs/stream/metrics.py); 0 = none.
    ``feedctl stream`` defaults to ``FEED_STREAM_METRICS_PORT``, else 9465."""
    metrics_host: str = DEFAULT_METRICS_HOST
    """Address the endpoint listens on (``FEED_STREAM_METRICS_HOST``)."""


def trigger_of(options: StreamOptions) -> dict[str, Any]:
    """The ``DataStreamWriter.trigger`` arguments: a fixed interval (0 = back to back) or, with
    ``until_caught_up``, availableNow. Either one re-runs an uncommitted batch with its logged offsets first."""
    if options.until_caught_up:
        return {"availableNow": True}
    return {"processingTime": f"{options.trigger_seconds} seconds"}
