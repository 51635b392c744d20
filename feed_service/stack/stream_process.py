"""Run the streaming job as a child process and watch its progress (demo, tests, benchmarks).

The job writes its progress (per query: last batch, source end offsets) to a status file every
second; "caught up" means the query's last batch ended at the topics' current end offsets.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

from feed_service.errors import StreamNotReady
from feed_service.kafka.offsets import Offsets, watermarks
from feed_service.settings import Settings


log = logging.getLogger("feed.stack")

#: The address a stream started here serves its metrics on (when given a port).
METRICS_HOST = "127.0.0.1"


def high_watermarks(settings: Settings) -> Offsets:
    """The end offsets of the changelog topics now: what "caught up" is measured against."""
    return watermarks(settings)[1]


def batch_reached(progress: dict[str, Any], batch_id: int) -> bool:
    """Whether the progress record shows batch ``batch_id`` (or a later one) done; batch 0 counts."""
    done = progress["timeline-join"]["batch_id"]
    return done is not None and done >= batch_id


class StreamProcess:
    """``python -m spark_jobs.stream`` in its own process group, against ``settings``."""

    def __init__(self, settings: Settings, checkpoint: Path, *, log_file: Path, extra_args: list[str] = (),
                 status_file: Path | None = None, metrics_port: int = 0, env: Mapping[str, str] | None = None) -> None:
        """``metrics_port``: where the job serves Prometheus ``/metrics`` on 127.0.0.1; 0 (the default)
        none, so that streams of tests and benchmarks never compete for the job's default port.
        ``env``: more environment for the job (``FEED_SPARK_MASTER`` of a cluster stack, ``FEED_SPARK_CONF``)."""
        self.settings = settings
        self.checkpoint = checkpoint
        self.status_file = status_file or checkpoint.parent / f"{checkpoint.name}.progress.json"
        self.log_file = log_file
        self.extra_args = list(extra_args)
        self.metrics_port = metrics_port
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "StreamProcess":
        env = {**os.environ, **self.settings.to_env(), **self.env}
        cmd = [sys.executable, "-m", "spark_jobs.stream", "--checkpoint", str(self.checkpoint),
               "--status-file", str(self.status_file), "--metrics-port", str(self.metrics_port),
               "--metrics-host", METRICS_HOST, *self.extra_args]
        self.status_file.unlink(missing_ok=True)
        with self.log_file.open("ab") as log:
            # the installed package's module from our own working directory: no source tree needed
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def metrics_text(self, timeout: float = 10.0) -> str:
        """The job's ``/metrics`` page now (Prometheus text format); needs ``metrics_port``."""
        from urllib.request import urlopen

        if not self.metrics_port:
            raise ValueError("this stream was started without a metrics port")
        with urlopen(f"http://{METRICS_HOST}:{self.metrics_port}/metrics", timeout=timeout) as response:
            return response.read().decode()

    def progress(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return None

    def _check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            tail = self.log_file.read_text(errors="replace")[-4000:]
            code = self.proc.returncode if self.proc else None
            raise StreamNotReady(f"stream exited with {code}; log {self.log_file}, tail:\n{tail}")

    def wait_for_batch(self, batch_id: int, timeout: float = 240) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            p = self.progress()
            if p and batch_reached(p, batch_id):
                return p
            time.sleep(0.5)
        raise StreamNotReady(f"no batch {batch_id} within {timeout}s; progress {self.progress()}")

    def wait_caught_up(self, timeout: float = 300) -> dict[str, Any]:
        """Until the query's last batch ended at the topics' end offsets, read after that batch's
        progress: the stream writes refill requests to a topic it reads (docs/trimming.md#refill), so
        the end it must reach can move while it runs."""
        deadline = time.monotonic() + timeout
        target: Offsets = {}
        while time.monotonic() < deadline:
            self._check_alive()
            p = self.progress()
            if p:
                try:
                    target = high_watermarks(self.settings)
                except Exception as exc:  # noqa: BLE001 - a broker failing over (NOT_LEADER...): ask again
                    log.debug("end offsets not read (%s); asking again", exc)
                else:
                    if p["timeline-join"]["end_offsets"] == target:
                        return p
            time.sleep(0.5)
        raise StreamNotReady(f"stream not caught up within {timeout}s: want {target}, progress {self.progress()}")

    def wait_exited(self, timeout: float = 120) -> int:
        """Until the job ends by itself (a refusal, a fatal error: docs/operations.md); its exit code.
        :class:`StreamNotReady` if it still runs after ``timeout`` seconds (it is left running)."""
        if self.proc is None:
            raise StreamNotReady("the stream was never started")
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise StreamNotReady(f"stream still running after {timeout}s; log {self.log_file}") from None

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash, not a graceful stop."""
        if self.proc is None:
            return
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        os.kill(self.proc.pid, signal.SIGTERM)  # the driver only: it stops the queries and its JVM
        try:
            return self.proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(30)
