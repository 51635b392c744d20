"""Generate the Python stubs of ``proto/`` into this package: ``python -m feed_service.api.build``.

The generated ``*_pb2*.py`` files are git-ignored; ``scripts/bootstrap`` runs this module, and
:func:`ensure` regenerates them on import when the ``.proto`` changed (a hash stamp heads each
generated file). Descriptors keep their canonical names (``feed/v1/timeline.proto``), so server
reflection and ``grpcurl`` see the same file names as ``protoc`` users.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import tempfile
from pathlib import Path

API_DIR = Path(__file__).resolve().parent
PROTO_ROOT = API_DIR.parents[1] / "proto"
#: (proto path under proto/, generated module name in feed_service.api)
PROTOS: tuple[tuple[str, str], ...] = (("feed/v1/timeline.proto", "timeline"),)
STAMP_PREFIX = "# proto-sha256: "


def _digest(proto: Path) -> str:
    return hashlib.sha256(proto.read_bytes()).hexdigest()


def _outputs(module: str) -> list[Path]:
    # (no .pyi: .gitignore covers *_pb2*.py only, and the stubs must never show up as untracked files)
    return [API_DIR / f"{module}_pb2.py", API_DIR / f"{module}_pb2_grpc.py"]


def is_current(rel: str, module: str) -> bool:
    """True when the stubs of ``rel`` exist and were generated from its present content."""
    proto = PROTO_ROOT / rel
    if not proto.exists():  # installed without the source tree: whatever was generated is it
        return all(p.exists() for p in _outputs(module))
    stamp = f"{STAMP_PREFIX}{_digest(proto)}"
    try:
        return all(p.read_text().splitlines()[0] == stamp for p in _outputs(module))
    except (OSError, IndexError):
        return False


def generate(rel: str, module: str) -> list[Path]:
    """Run protoc (grpcio-tools) on one proto; returns the files written."""
    from grpc_tools import protoc
    import grpc_tools

    proto = PROTO_ROOT / rel
    include = str(Path(grpc_tools.__file__).parent / "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        code = protoc.main([
            "grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{include}",
            f"--python_out={tmp}", f"--grpc_python_out={tmp}", str(proto),
        ])
        if code != 0:
            raise RuntimeError(f"protoc failed on {proto} (exit {code})")
        stem = Path(tmp) / Path(rel).with_suffix("")
        package_ref = rel.rsplit("/", 1)[0].replace("/", ".")  # feed.v1
        stamp = f"{STAMP_PREFIX}{_digest(proto)}\n"
        written = []
        for suffix, target in zip(("_pb2.py", "_pb2_grpc.py"), _outputs(module)):
            text = Path(f"{stem}{suffix}").read_text()
            # generated code imports siblings as `from feed.v1 import timeline_pb2`
            text = re.sub(rf"^from {re.escape(package_ref)} import ", "from feed_service.api import ", text,
                          flags=re.M)
            tmp_target = target.with_suffix(target.suffix + ".tmp")
            tmp_target.write_text(stamp + text)
            shutil.move(tmp_target, target)
            written.append(target)
        return written


def ensure(*, quiet: bool = True) -> list[Path]:
    """Generate every stale stub; returns the files written (none when up to date)."""
    written: list[Path] = []
    for rel, module in PROTOS:
        if not is_current(rel, module):
            written += generate(rel, module)
    if written and not quiet:
        for path in written:
            print(f"generated {path.relative_to(API_DIR.parents[1])}")
    return written


def main() -> int:
    ensure(quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
