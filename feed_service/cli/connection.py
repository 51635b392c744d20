"""The Kafka connection options shared by the commands that talk to the broker (publish, topics, workload)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from feed_service.errors import ConfigError
from feed_service.settings import Settings, TopicSpec, load_topic_specs


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--bootstrap`` and ``--config`` (a topics.json) to ``parser``."""
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: FEED_KAFKA_BOOTSTRAP or the local stack)")
    parser.add_argument("--config", metavar="TOPICS.json", help="topic specs (default schemas/topics.json)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """``Settings.from_env()`` with ``--bootstrap`` and ``--config`` applied; :class:`ConfigError` if unreadable."""
    base = Settings.from_env()
    overrides: dict[str, Any] = {}
    if getattr(args, "bootstrap", None):
        overrides["kafka_bootstrap"] = args.bootstrap
    if getattr(args, "config", None):
        overrides["topics"] = _topic_specs(Path(args.config))
    return replace(base, **overrides) if overrides else base


def _topic_specs(path: Path) -> dict[str, TopicSpec]:
    try:
        return load_topic_specs(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:  # bad JSON, or not a {"topics": {role: spec}} document
        raise ConfigError(f"--config {path}: not a topics file: {exc!r}") from None
