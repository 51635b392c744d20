"""The stream runner's reading of the job's progress file (no Spark needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from feed_service.settings import Settings
from feed_service.stack.stream_process import StreamProcess, batch_reached


def progress(batch_id: int | None) -> dict:
    return {"timeline-join": {"batch_id": batch_id, "end_offsets": {}}}


def test_batch_zero_counts_as_reached() -> None:
    assert batch_reached(progress(0), 0)
    assert not batch_reached(progress(None), 0)
    assert not batch_reached(progress(0), 1)
    assert batch_reached(progress(3), 1)


def test_wait_for_batch_zero_returns_once_batch_zero_is_done(tmp_path: Path) -> None:
    stream = StreamProcess(Settings(), tmp_path / "ckpt", log_file=tmp_path / "stream.log")
    stream.status_file.write_text(json.dumps(progress(0)))
    stream.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # a live process
    try:
        assert stream.wait_for_batch(0, timeout=2)["timeline-join"]["batch_id"] == 0
    finally:
        stream.proc.kill()
        stream.proc.wait()
