"""Fakes for the streaming job's driver loop (:func:`spark_jobs.stream.run`) without Spark: queries
that fail at once or run and report a batch, and a driver that hands the run a fake session, starts
the queries in turn and sends SIGTERM after a number of progress records
(tests/unit/test_stream_run.py, test_stream_inputs.py)."""

from __future__ import annotations

import json
import signal
from typing import Any

from spark_jobs import stream


class FakeQuery:
    """A streaming query that either failed at once (``error``) or runs and reports batch 0."""

    name = "timeline-join"

    def __init__(self, error: str | None = None) -> None:
        self.error = error
        self.isActive = error is None
        self.lastProgress = None if error else {
            "batchId": 0, "numInputRows": 3, "durationMs": {"triggerExecution": 5},
            "sources": [{"endOffset": json.dumps({"feed.tweets.v1": {"0": 3}})}],
        }

    def exception(self) -> str | None:
        return self.error

    def stop(self) -> None:
        self.isActive = False


class Driver:
    """Fakes for :func:`spark_jobs.stream.run`: the session, the queries it starts, the signals, given to
    it as :meth:`dependencies`.

    ``stop_after`` progress records, the SIGTERM handler the job installed is called, as an operator would.
    """

    def __init__(self, queries: list[FakeQuery], *, stop_after: int = 2) -> None:
        self.queries = list(queries)
        self.started = 0
        self.records = 0
        self.stop_after = stop_after
        self.handlers: dict[int, Any] = {}
        self.sessions_stopped = 0
        driver = self

        class Session:
            def stop(self) -> None:
                driver.sessions_stopped += 1

        class Rows:
            @property
            def value(self) -> int:
                driver.records += 1
                if driver.records == driver.stop_after:
                    driver.handlers[signal.SIGTERM](signal.SIGTERM, None)
                return 7

        self._session, self._rows = Session, Rows

    def dependencies(self, **changes: Any) -> stream.StreamDependencies:
        """The fakes, as the run takes them; ``changes`` replace some (another ``start``, fewer restarts)."""
        fakes: dict[str, Any] = {
            "build_session": lambda *a, **k: self._session(),
            "start": lambda *a, **k: self._start(self._rows()),
            "install_signal": lambda sig, handler: self.handlers.__setitem__(sig, handler),
            "restart_backoff_seconds": 0.0,
            "status_interval": 0.01,
            "warm_after_seconds": 0.0,
            "input_guard": lambda *a: None,  # no broker here: the guard has its own tests: test_stream_inputs.py
        }
        return stream.StreamDependencies(**{**fakes, **changes})

    def _start(self, rows: Any) -> stream.RunningStream:
        self.started += 1
        return stream.RunningStream(self.queries.pop(0), rows)
