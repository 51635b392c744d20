"""CPU seconds of a process tree from /proc, split into Spark's Python workers and the rest.

The stream runs as one tree: the job's Python driver, the JVM it launches (driver and, in local
mode, the executors), and PySpark's worker daemon with the workers it forks. Kafka and Cassandra
run in other trees, so their CPU is not counted. A worker that ended was reaped by its parent, and
its CPU is in the parent's ``cutime``/``cstime``; both are counted, so short-lived workers are not lost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class TreeCpu:
    total: float
    """CPU seconds of every process of the tree (and its reaped children)."""
    python_workers: float
    """Of which PySpark's worker daemon and its workers (``pyspark.daemon`` / ``pyspark.worker``)."""

    def __sub__(self, other: "TreeCpu") -> "TreeCpu":
        return TreeCpu(self.total - other.total, self.python_workers - other.python_workers)


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, own CPU seconds, reaped children's CPU seconds), None if the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) "
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ppid, (utime + stime) / _TICK, (cutime + cstime) / _TICK


def _is_python_worker(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"pyspark.daemon" in cmdline or b"pyspark.worker" in cmdline


def tree_cpu(root: int) -> TreeCpu:
    """CPU seconds so far of ``root`` and all its descendants."""
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[int, float, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                stats[int(entry.name)] = stat
                children.setdefault(stat[0], []).append(int(entry.name))
    total = workers = 0.0
    todo = [(root, False)]
    while todo:
        pid, in_workers = todo.pop()
        if pid not in stats:
            continue
        in_workers = in_workers or _is_python_worker(pid)
        _, own, reaped = stats[pid]
        total += own + reaped
        if in_workers:
            workers += own + reaped
        todo += [(child, in_workers) for child in children.get(pid, [])]
    return TreeCpu(total, workers)
