"""Package data, read through :mod:`importlib.resources`: event schemas, CQL, topic specs, the .proto.

The files live at the repository root (``schemas/``, ``proto/``) and are copied into the package
as ``feed_service/_data/`` when it is built or installed (``setup.py``), so an installed wheel
finds them wherever it runs from. Names are relative to the data root, e.g.
``"schemas/topics.json"``.
"""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

DATA_PACKAGE = "feed_service"
DATA_DIR = "_data"

TOPICS = "schemas/topics.json"
CQL = "schemas/cql/feed.cql"
EVENT_SCHEMA = "schemas/events/event.schema.json"
TIMELINE_PROTO = "proto/feed/v1/timeline.proto"


def resource(name: str) -> Traversable:
    """The packaged file ``name`` (``FileNotFoundError`` naming it if the package lacks it)."""
    node = resources.files(DATA_PACKAGE).joinpath(DATA_DIR, *name.split("/"))
    if not node.is_file():
        raise FileNotFoundError(f"package data {name!r} is missing from {DATA_PACKAGE}/{DATA_DIR}: reinstall "
                                "the package so the build copies it (pip install . , or ./scripts/bootstrap "
                                "in a checkout)")
    return node


def read_text(name: str) -> str:
    """The text of the packaged file ``name``."""
    return resource(name).read_text(encoding="utf-8")


def read_json(name: str) -> Any:
    """The packaged JSON file ``name``, parsed."""
    return json.loads(read_text(name))
