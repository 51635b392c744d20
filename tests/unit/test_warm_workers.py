"""The idle stream's worker warmer (spark_jobs/stream/warm_workers.py) with a fake clock and session."""

from __future__ import annotations

from typing import Any

from feed_service.settings import Settings
from spark_jobs.stream.warm_workers import WorkerWarmer


class FakeContext:
    """Records the warming jobs: parallelize(range(n), n).mapPartitions(f).collect() runs f per task."""

    def __init__(self, fail: bool = False) -> None:
        self.jobs: list[int] = []
        self.fail = fail
        self.cancelled: list[str] = []

    def setJobGroup(self, *_: Any, **__: Any) -> None:
        pass

    def cancelJobGroup(self, group: str) -> None:
        self.cancelled.append(group)

    def parallelize(self, data: range, slices: int) -> "FakeContext":
        self._tasks = slices
        return self

    def mapPartitions(self, f: Any) -> "FakeContext":
        self._f = f
        return self

    def collect(self) -> list[int]:
        if self.fail:
            raise RuntimeError("executor lost")
        self.jobs.append(self._tasks)
        return []


class FakeSpark:
    def __init__(self, context: FakeContext) -> None:
        self.sparkContext = context


def warmer(context: FakeContext, now: list[float]) -> WorkerWarmer:
    w = WorkerWarmer(FakeSpark(context), Settings(), tasks=2, after=25.0, clock=lambda: now[0])
    return w


def _settle(w: WorkerWarmer) -> None:
    if w._thread is not None:
        w._thread.join(5)


def test_no_job_while_batches_run_then_one_per_interval_while_idle() -> None:
    context, now = FakeContext(), [0.0]
    w = warmer(context, now)
    for t in (10.0, 20.0, 30.0, 40.0):  # a batch every 10 s: never idle for 25 s
        now[0] = t
        w.batch_ran()
        w.tick()
    assert context.jobs == []
    now[0] = 66.0  # 26 s after the last batch
    w.tick()
    _settle(w)
    now[0] = 80.0
    w.tick()  # 14 s after the job: not yet
    _settle(w)
    now[0] = 92.0
    w.tick()
    _settle(w)
    assert context.jobs == [2, 2] and w.jobs == 2


def test_a_failed_job_is_counted_and_the_stream_goes_on() -> None:
    context, now = FakeContext(fail=True), [0.0]
    w = warmer(context, now)
    now[0] = 30.0
    w.tick()
    _settle(w)
    assert (w.jobs, w.failures) == (0, 1)
    w.stop()
    assert context.cancelled == []  # nothing running: nothing to cancel
