"""The core is pure: no adapter imports, and its doctests (step tables, examples) hold."""

from __future__ import annotations

import doctest
import importlib
import json
import pkgutil
import subprocess
import sys

import pytest

import feed_service.core

FORBIDDEN = ("confluent_kafka", "cassandra", "grpc", "pyspark", "pandas", "pyarrow")
CORE_MODULES = sorted(f"feed_service.core.{m.name}" for m in pkgutil.iter_modules(feed_service.core.__path__))


def test_core_imports_no_adapter_library() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {CORE_MODULES!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = json.loads(proc.stdout)
    assert not [m for m in loaded if m.split(".")[0] in FORBIDDEN]


@pytest.mark.parametrize("name", CORE_MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
