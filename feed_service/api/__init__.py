"""Generated gRPC stubs of ``proto/feed/v1/timeline.proto``: ``timeline_pb2``, ``timeline_pb2_grpc``.

The stubs are generated, not committed: ``scripts/bootstrap`` runs ``python -m feed_service.api.build``,
and ``from feed_service.api import timeline_pb2`` regenerates them first when the ``.proto`` changed.
"""

from __future__ import annotations

import importlib
from types import ModuleType

_STUBS = frozenset({"timeline_pb2", "timeline_pb2_grpc"})


def __getattr__(name: str) -> ModuleType:
    if name not in _STUBS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from feed_service.api import build

    build.ensure()
    return importlib.import_module(f"{__name__}.{name}")
