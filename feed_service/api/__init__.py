"""Generated gRPC stubs of ``proto/feed/v1/timeline.proto``: ``timeline_pb2``, ``timeline_pb2_grpc``.

The stubs are build outputs, not sources: ``setup.py``'s ``build_py`` generates them into a wheel,
or in place for an editable install (git-ignored). A package without them was installed from a
tree that was never built, so the import fails here, saying how to get them, rather than later
with a bare ``No module named ...``.
"""

from __future__ import annotations

from importlib.util import find_spec

STUBS = ("timeline_pb2", "timeline_pb2_grpc")

_missing = [name for name in STUBS if find_spec(f"{__name__}.{name}") is None]
if _missing:
    raise ImportError(
        f"{__name__} lacks its generated gRPC stubs ({', '.join(_missing)}): they are made when the "
        "package is built; reinstall it (pip install . , or ./scripts/bootstrap in a checkout)",
        name=__name__,
    )
