"""What a stream checkpoint says about itself, read without Spark: its batches, the state partitions
it pinned, and whether a process is using it.

Spark records the session's ``spark.sql.shuffle.partitions`` in the metadata of every offset-log
entry (``<checkpoint>/join/offsets/<n>``) and, on a restart, takes the value of the latest entry
instead of the session's: the number of state partitions is fixed when the checkpoint is created and
only an offline repartition changes it (docs/streaming.md, "State partitions"). The stream reads the
pinned value back here to say so; ``feedctl reshard`` reads it, with the commit log, to refuse a
checkpoint it cannot safely repartition.

A process that uses a checkpoint (the stream, a reshard) holds :class:`CheckpointLock`, an exclusive
``flock`` on a file in the checkpoint folder: the kernel drops it when the process ends, however it
ends, so a killed stream never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from feed_service.errors import CheckpointError

log = logging.getLogger(__name__)

#: The Spark query's own checkpoint inside the stream's ``--checkpoint`` folder.
QUERY_DIR = "join"
SHUFFLE_PARTITIONS_KEY = "spark.sql.shuffle.partitions"
LOCK_NAME = ".in-use.lock"
#: The stream's default progress file (rewritten every second while it runs).
PROGRESS_NAME = "progress.json"
#: A progress file younger than this says a stream may still be running (on a host whose lock this
#: one cannot see, or of a release that did not take the lock).
RECENT_PROGRESS_SECONDS = 10.0


def guard_permissions(checkpoint: Path) -> None:
    """Create ``checkpoint`` readable by its owner only, and refuse one that anybody may write.

    The checkpoint holds the join's whole state (every follow edge, block, mute and retained tweet)
    and decides what the stream writes next: whoever can write it can rewrite every timeline, whoever
    can read it reads the social graph (docs/security.md). A group-writable folder (a shared volume
    whose group is the job's, as a Kubernetes ``fsGroup`` makes it) is allowed with a warning.
    """
    if not checkpoint.exists():
        checkpoint.mkdir(parents=True, mode=0o700)
        return
    mode = checkpoint.stat().st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise CheckpointError(f"checkpoint {checkpoint} is writable by every user (mode {stat.S_IMODE(mode):o}): "
                              f"anyone could rewrite the join's state; chmod o-w it (700 is best)")
    if mode & (stat.S_IWGRP | stat.S_IROTH):
        log.warning("checkpoint %s is readable or writable beyond its owner (mode %o): it holds the social "
                    "graph; chmod 700 it unless a shared volume needs the group", checkpoint, stat.S_IMODE(mode))


def query_dir(checkpoint: Path) -> Path:
    """The Spark checkpoint location of the stream's query (``checkpointLocation``)."""
    return checkpoint / QUERY_DIR


def _batch_ids(folder: Path) -> list[int]:
    """Batch ids of a Spark metadata log folder (``offsets``, ``commits``), ascending; Spark's
    ``.crc`` and temporary files are not batches."""
    try:
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return []


def _conf_of(entry: Any) -> dict[str, Any] | None:
    """The ``conf`` map of an offset-log metadata object, wherever the log version nests it."""
    if not isinstance(entry, dict):
        return None
    if isinstance(entry.get("conf"), dict):
        return entry["conf"]
    return _conf_of(entry.get("metadata"))


def pinned_partitions(offsets_file: Path) -> int:
    """The ``spark.sql.shuffle.partitions`` an offset-log entry records.

    The entry is a version line (``v1``) followed by one JSON document per line, the metadata with
    the SQL conf first; :class:`CheckpointError` if the file has no such value.
    """
    try:
        lines = offsets_file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CheckpointError(f"cannot read {offsets_file}: {exc}") from None
    for line in lines[1:]:
        try:
            conf = _conf_of(json.loads(line))
        except ValueError:
            continue
        if conf is not None and SHUFFLE_PARTITIONS_KEY in conf:
            try:
                return int(conf[SHUFFLE_PARTITIONS_KEY])
            except (TypeError, ValueError):
                break
    raise CheckpointError(f"{offsets_file} records no {SHUFFLE_PARTITIONS_KEY}: not an offset log entry of"
                          " Spark 4 (or a damaged one)")


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """The state of a stream checkpoint as its logs tell it."""

    checkpoint: Path
    last_batch: int | None
    """Newest batch of the offset log (planned, maybe not done); None: the query never planned one."""
    last_commit: int | None
    """Newest batch of the commit log (done)."""
    state_partitions: int | None
    """Pinned by the newest offset-log entry; None for a new checkpoint."""

    @property
    def is_new(self) -> bool:
        """No batch planned yet: the next start pins the session's shuffle partitions."""
        return self.last_batch is None

    @property
    def cleanly_committed(self) -> bool:
        """The newest planned batch also committed: the query stopped between two batches."""
        return self.last_batch is not None and self.last_commit == self.last_batch


def inspect_checkpoint(checkpoint: Path) -> CheckpointInfo:
    """Read the offset and commit logs of the stream checkpoint ``checkpoint`` (no Spark)."""
    query = query_dir(checkpoint)
    offsets, commits = _batch_ids(query / "offsets"), _batch_ids(query / "commits")
    last_batch = offsets[-1] if offsets else None
    partitions = pinned_partitions(query / "offsets" / str(last_batch)) if last_batch is not None else None
    return CheckpointInfo(checkpoint, last_batch, commits[-1] if commits else None, partitions)


def recent_progress(checkpoint: Path, *, now: float | None = None) -> float | None:
    """Seconds since the default progress file was rewritten, if less than
    :data:`RECENT_PROGRESS_SECONDS` (a stream may be running); otherwise None."""
    try:
        age = (time.time() if now is None else now) - (checkpoint / PROGRESS_NAME).stat().st_mtime
    except FileNotFoundError:
        return None
    return age if age < RECENT_PROGRESS_SECONDS else None


class CheckpointLock:
    """An exclusive, non-blocking ``flock`` on ``<checkpoint>/.in-use.lock``, naming its holder.

    :meth:`acquire` raises :class:`CheckpointError` when another process holds it. Closing the file
    (:meth:`release`, the end of a ``with`` block, or the process's end) releases it.
    """

    def __init__(self, checkpoint: Path, fd: int) -> None:
        self.checkpoint = checkpoint
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, checkpoint: Path, holder: str) -> "CheckpointLock":
        guard_permissions(checkpoint)
        path = checkpoint / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                who = path.read_text(encoding="utf-8").strip() or "another process"
            except OSError:
                who = "another process"
            raise CheckpointError(f"checkpoint {checkpoint} is in use by {who}; stop it first") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{holder} (pid {os.getpid()})".encode())
        return cls(checkpoint, fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "CheckpointLock":
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
