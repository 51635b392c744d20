"""The project's Python code as one zip, for Spark executors that do not share the driver's installation.

A cluster's executors import ``feed_service`` and ``spark_jobs`` when they unpickle the driver's
functions (UDFs, ``mapInPandas``, ``transformWithState`` processors). On a cluster they cannot rely
on the driver's working directory or site-packages, and even where they could, the code they find
might be another version than the driver's. So the driver zips the packages it has imported (from
their ``__file__``, with their package data, e.g. ``feed_service/_data/`` that
:mod:`feed_service.resources` reads through :mod:`importlib.resources`, which reads zips too) and
passes the zip as ``spark.submit.pyFiles`` (:func:`spark_jobs.runtime.session.build_session`); Spark
puts it on the executors' Python path ahead of site-packages.

The zip's name is its content's hash, so unchanged code reuses the file and a changed one never
overwrites a zip that a running application is serving to its executors.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Iterable, Sequence

#: The project's top-level packages, shipped together.
PACKAGES = ("feed_service", "spark_jobs")

#: Folder of the archives under the cache dir.
ARCHIVE_DIR = "pyfiles"

#: Files never shipped: bytecode (the executors' Python compiles for itself), half-written build
#: outputs, and the gRPC stubs of the read service, which no Spark task imports (they are build
#: outputs tied to the build's protobuf; a task importing ``feed_service.api`` would get its
#: "lacks its generated gRPC stubs" error).
EXCLUDED_DIRS = frozenset({"__pycache__"})
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".tmp", "_pb2.py", "_pb2_grpc.py", "_pb2.pyi", "_pb2_grpc.pyi")

# A fixed timestamp and mode per entry: the same files give the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_FILE_MODE = 0o644 << 16


def shipped(relative: Path) -> bool:
    """Whether a file (relative to its package's parent folder) goes into the archive.

    >>> shipped(Path("feed_service/core/join.py")), shipped(Path("feed_service/_data/schemas/topics.json"))
    (True, True)
    >>> shipped(Path("feed_service/core/__pycache__/join.cpython-311.pyc"))
    False
    >>> shipped(Path("feed_service/api/timeline_pb2.py")), shipped(Path("feed_service/api/__init__.py"))
    (False, True)
    """
    if any(part in EXCLUDED_DIRS or part.startswith(".") for part in relative.parts):
        return False
    return not relative.name.endswith(EXCLUDED_SUFFIXES)


def package_files(packages: Sequence[str] = PACKAGES) -> list[tuple[str, Path]]:
    """``(name in the zip, file)`` of every shipped file of ``packages``, sorted by name; the packages
    are found where the running interpreter imports them from."""
    members: list[tuple[str, Path]] = []
    for name in packages:
        module = importlib.import_module(name)
        if module.__file__ is None:
            raise RuntimeError(f"{name} is a namespace package: nothing to zip")
        root = Path(module.__file__).resolve().parent
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS and not d.startswith("."))
            for filename in filenames:
                path = Path(dirpath) / filename
                relative = Path(name) / path.relative_to(root)
                if shipped(relative):
                    members.append((relative.as_posix(), path))
    return sorted(members)


def content_digest(members: Iterable[tuple[str, bytes]]) -> str:
    """SHA-256 over names and contents, in order.

    >>> content_digest([("a.py", b"x")]) == content_digest([("a.py", b"x")]) != content_digest([("b.py", b"x")])
    True
    """
    digest = hashlib.sha256()
    for name, data in members:
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def build_code_archive(cache_dir: Path, packages: Sequence[str] = PACKAGES) -> Path:
    """``<cache_dir>/pyfiles/feed-code-<hash>.zip`` with ``packages``; an existing one is reused."""
    contents = [(name, path.read_bytes()) for name, path in package_files(packages)]
    target = Path(cache_dir) / ARCHIVE_DIR / f"feed-code-{content_digest(contents)[:20]}.zip"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".feed-code-", suffix=".zip.tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in contents:
                info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
                info.external_attr = _FILE_MODE
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
        os.replace(tmp, target)  # atomic: concurrent builders of the same content write the same bytes
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
