"""The contract between the backfill and the stream it bootstraps: the output folder's layout.

A completed backfill leaves in its folder ``state/`` (one ``key, state`` parquet row per author key,
:func:`~feed_service.core.state.encode_state` blobs, each with its per-reader side), ``per_reader/``
(one ``identity, value`` parquet row per input of the per-reader stage), ``lists/`` (the same rows
for the list stage's inputs) and ``manifest.json``, written last and atomically, so its presence means the backfill completed.
``feedctl stream --bootstrap-from DIR`` reads the manifest through :func:`load_bootstrap`. Both jobs
import this module and nothing of each other (docs/backfill.md, "Bootstrapping the stream").
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from feed_service.errors import BootstrapError
from feed_service.kafka.offsets import SOURCE_ROLES, Offsets
from feed_service.settings import Settings

MANIFEST_NAME = "manifest.json"
STATE_DIR = "state"
PER_READER_DIR = "per_reader"
LIST_INPUTS_DIR = "lists"
MANIFEST_FORMAT = 4
"""Bump when the manifest or the state layout changes; the stream refuses other formats. 2: the
author states carry their per-reader side; 3: ``per_reader/`` holds the per-reader stage's inputs;
4: ``lists/`` holds the list stage's inputs, and the members' states the list stage's edges."""
PER_READER_SCHEMA = "identity string, value binary"
"""The rows of ``per_reader/`` and ``lists/``: an input of the per-reader stage or of the list stage
(its identity as :func:`~feed_service.store.stage_inputs.identity_key` writes it) and its pickled value."""
BOOTSTRAP_BATCH_ID = -1
"""The batch id the stream saves the per-reader inputs of a bootstrap under: below every batch id
of a checkpoint (they start at 0), so its batch 0, and a replay of it, start from them (the batch
rule of feed_service/store/stage_inputs.py)."""

Manifest = dict[str, Any]


def source_topics(settings: Settings) -> dict[str, str]:
    """Topic name by role of the changelogs ``settings`` points at."""
    return {role: settings.topic(role) for role in SOURCE_ROLES}


def build_manifest(
    settings: Settings,
    *,
    backfill_ts: int,
    start_offsets: Offsets,
    end_offsets: Offsets,
    summary: dict[str, Any],
    completed_at: float | None = None,
) -> Manifest:
    """The manifest of a backfill of ``settings``' topics that read ``[start_offsets, end_offsets)``.

    The stream continues at ``end_offsets`` with its clock at ``backfill_ts``, above every backfill write.
    """
    return {
        "format": MANIFEST_FORMAT,
        "completed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(completed_at)),
        "backfill_ts": backfill_ts,
        "stream_clock_start": backfill_ts,
        "inbox_cap": settings.inbox_cap,
        "topics": source_topics(settings),
        "keyspace": settings.keyspace,
        "start_offsets": start_offsets,
        "end_offsets": end_offsets,
        "state": STATE_DIR,
        "per_reader_inputs": PER_READER_DIR,
        "list_inputs": LIST_INPUTS_DIR,
        "summary": summary,
    }


def write_manifest(folder: Path, manifest: Manifest) -> Manifest:
    """Write ``manifest`` to ``folder`` atomically (its presence marks a completed backfill).

    Returns the manifest as read back from the file's text, so what the caller keeps can neither
    differ from the file nor change with later edits of the dictionaries it was built from.
    """
    text = json.dumps(manifest, indent=2, sort_keys=True)
    tmp = folder / f".{MANIFEST_NAME}.tmp"
    tmp.write_text(text)
    tmp.replace(folder / MANIFEST_NAME)
    return json.loads(text)


def holds_completed_backfill(folder: Path) -> bool:
    return (folder / MANIFEST_NAME).exists()


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """What a stream needs to continue after a backfill: offsets, clock and the state folder."""

    folder: Path
    starting_offsets: str
    """Spark JSON offsets: the backfill's snapshot end offsets."""
    clock_start: int
    inbox_cap: int
    state_path: Path
    per_reader_path: Path
    """The per-reader stage's inputs (``identity, value``)."""
    list_inputs_path: Path
    """The list stage's inputs (``identity, value``)."""


def load_bootstrap(folder: Path, settings: Settings) -> Bootstrap:
    """Read and check a completed backfill's manifest; raises :class:`BootstrapError` if unusable."""
    folder = folder.resolve()
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
    except FileNotFoundError:
        raise BootstrapError(f"{folder} holds no completed backfill (no {MANIFEST_NAME})") from None
    except ValueError as exc:
        raise BootstrapError(f"{folder / MANIFEST_NAME}: not JSON: {exc}") from None
    if manifest.get("format") != MANIFEST_FORMAT:
        raise BootstrapError(f"{folder}: manifest format {manifest.get('format')!r}, expected {MANIFEST_FORMAT}")
    topics = source_topics(settings)
    if manifest["topics"] != topics:
        raise BootstrapError(f"{folder}: backfill of topics {manifest['topics']}, but the stream reads {topics}")
    state_path, per_reader_path = folder / manifest["state"], folder / manifest["per_reader_inputs"]
    list_inputs_path = folder / manifest["list_inputs"]
    for path in (state_path, per_reader_path, list_inputs_path):
        if not path.is_dir():
            raise BootstrapError(f"{folder}: state folder {path} missing")
    return Bootstrap(folder, json.dumps(manifest["end_offsets"]), int(manifest["stream_clock_start"]),
                     int(manifest["inbox_cap"]), state_path, per_reader_path, list_inputs_path)
