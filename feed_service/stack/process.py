"""Background service processes tracked by pid files.

A service is started in its own session (process group) with its output in a log file, and its pid
is written next to its data. ``stop`` signals exactly that process group, and only if the pid still
belongs to the command we started (the pid file records the command line), so a recycled pid is
never killed and ``up`` twice never starts a duplicate.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

#: Seconds ``stop`` waits after SIGTERM before it sends SIGKILL.
DEFAULT_STOP_GRACE = 30.0


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@dataclass(frozen=True, slots=True)
class ServiceProcess:
    """One background service: ``name`` for messages, its pid file and its log file."""

    name: str
    pid_file: Path
    log_file: Path

    def pid(self) -> int | None:
        """The pid of our running process, or None (no pid file, exited, or pid reused)."""
        try:
            record = json.loads(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        pid = int(record["pid"])
        cmd = _cmdline(pid)
        if cmd is None or cmd != record["cmdline"] or _is_zombie(pid):
            return None
        return pid

    def is_running(self) -> bool:
        return self.pid() is not None

    def start(self, cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
        """Start ``cmd`` detached; return its pid. Refuses to start a second copy."""
        running = self.pid()
        if running is not None:
            return running
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        # Record the command line as /proc shows it, to recognise this process later.
        deadline = time.monotonic() + 5
        cmdline = _cmdline(proc.pid)
        while cmdline is not None and cmdline != list(cmd) and time.monotonic() < deadline:
            time.sleep(0.05)  # between fork and exec /proc shows the parent's command line
            cmdline = _cmdline(proc.pid)
        self.pid_file.write_text(json.dumps({"pid": proc.pid, "cmdline": cmdline or list(cmd)}))
        return proc.pid

    def stop(self, *, grace: float = DEFAULT_STOP_GRACE) -> bool:
        """Stop our process group (TERM, then KILL after ``grace`` s). True if something was stopped."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.pid() is not None:
            time.sleep(0.2)
        if self.pid() is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while self.pid() is not None and time.monotonic() < deadline + 10:
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
