"""Build hook: package data and gRPC stubs made from the repository's ``schemas/`` and ``proto/``.

Metadata lives in ``pyproject.toml``; this file only swaps in a ``build_py`` that also

- copies ``schemas/`` and ``proto/`` (canonical at the repository root) into ``feed_service/_data/``,
  which :mod:`feed_service.resources` reads through :mod:`importlib.resources`;
- generates ``feed_service/api/timeline_pb2.py`` and ``timeline_pb2_grpc.py`` with grpcio-tools (a
  build requirement, pinned in ``[build-system]``: the stubs only load on a protobuf/grpcio runtime at
  least as new as the generator, so the runtime floors in ``[project]`` follow that pin).

A wheel gets these files in its build directory. An editable install (``pip install -e .``) runs
``build_py`` with ``editable_mode = True``: the files are then written in place into the source tree
(git-ignored), and ``scripts/bootstrap`` reinstalls whenever ``schemas/`` or ``proto/`` change.
This module imports nothing of the package itself: its runtime dependencies are not build requirements.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py

#: Top-level folders copied, whole, to feed_service/_data/<folder>.
DATA_TREES = ("schemas", "proto")
DATA_DIR = Path("feed_service", "_data")
API_PACKAGE = "feed_service.api"
API_DIR = Path(*API_PACKAGE.split("."))
#: (proto path under proto/, stub module name in feed_service.api)
PROTOS: tuple[tuple[str, str], ...] = (("feed/v1/timeline.proto", "timeline"),)
STUB_SUFFIXES = ("_pb2.py", "_pb2_grpc.py")


def _data_sources() -> list[Path]:
    """Every file of the data trees, relative to the project root (the build's working directory)."""
    return sorted(p for tree in DATA_TREES for p in Path(tree).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def _stub_paths() -> list[Path]:
    """The generated modules, relative to the root they are written under."""
    return [API_DIR / f"{module}{suffix}" for _, module in PROTOS for suffix in STUB_SUFFIXES]


def generate_stubs(proto_root: Path, out_dir: Path) -> list[Path]:
    """Run protoc (grpcio-tools) on every proto; write the stubs into ``out_dir``, return them.

    The proto is compiled relative to ``proto_root``, so descriptors keep their canonical file names
    (``feed/v1/timeline.proto``) for server reflection and grpcurl; sibling imports the generated
    code writes as ``from feed.v1 import ...`` are rewritten to ``from feed_service.api import ...``.
    """
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError as exc:  # only without build isolation: pyproject.toml lists it
        raise RuntimeError("grpcio-tools is needed to build feed-service (a [build-system] requirement)") from exc

    include = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*.proto
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        for rel, module in PROTOS:
            code = protoc.main(["grpc_tools.protoc", f"-I{proto_root}", f"-I{include}",
                                f"--python_out={tmp}", f"--grpc_python_out={tmp}", str(proto_root / rel)])
            if code != 0:
                raise RuntimeError(f"protoc failed on {proto_root / rel} (exit {code})")
            stem = Path(tmp, rel).with_suffix("")
            package_ref = re.escape(rel.rsplit("/", 1)[0].replace("/", "."))  # feed.v1
            for suffix in STUB_SUFFIXES:
                text = Path(f"{stem}{suffix}").read_text(encoding="utf-8")
                text = re.sub(rf"^from {package_ref} import ", f"from {API_PACKAGE} import ", text, flags=re.M)
                target = out_dir / f"{module}{suffix}"
                partial = target.with_name(f".{target.name}.tmp")
                partial.write_text(text, encoding="utf-8")
                os.replace(partial, target)  # an interrupted build never leaves half a module
                written.append(target)
    return written


class build_py(_build_py):
    """``build_py`` plus the copied data trees and the generated gRPC stubs (see the module doc)."""

    def _target_root(self) -> Path:
        # editable: in place, so the source tree imports them; otherwise the build directory
        return Path() if self.editable_mode else Path(self.build_lib)

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        # stubs left in the source tree by an editable install are outputs, never sources
        generated = {str(p) for p in _stub_paths()}
        return [m for m in super().find_package_modules(package, package_dir)
                if str(Path(m[2])) not in generated]

    def run(self) -> None:
        super().run()
        root = self._target_root()
        data_dir = root / DATA_DIR
        if data_dir.is_symlink() or data_dir.is_file():
            data_dir.unlink()
        elif data_dir.exists():
            shutil.rmtree(data_dir)  # files deleted from schemas/ must not linger
        for source in _data_sources():
            self.mkpath(str((data_dir / source).parent))
            self.copy_file(str(source), str(data_dir / source))
        stubs = generate_stubs(Path("proto").resolve(), root / API_DIR)
        if not self.editable_mode:
            self.byte_compile([str(p) for p in stubs])

    def get_source_files(self) -> list[str]:
        # what an sdist must carry for a wheel to be built from it
        return super().get_source_files() + [str(p) for p in _data_sources()]

    def get_output_mapping(self) -> dict[str, str]:
        mapping = super().get_output_mapping()
        build = Path(self.build_lib)
        for source in _data_sources():
            # editable: the in-place copy is what the build would hold
            mapping[str(build / DATA_DIR / source)] = str(DATA_DIR / source if self.editable_mode else source)
        if self.editable_mode:
            for stub in _stub_paths():
                mapping[str(build / stub)] = str(stub)
        return dict(sorted(mapping.items()))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = set(super().get_outputs(include_bytecode))
        build = Path(self.build_lib)
        outputs.update(str(build / DATA_DIR / source) for source in _data_sources())
        outputs.update(str(build / stub) for stub in _stub_paths())
        return sorted(outputs)


setup(cmdclass={"build_py": build_py})
