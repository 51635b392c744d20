"""The package is layered: each layer imports only the layers below it that its row names, and the
third-party libraries its row names. The core is pure (stdlib and ``feed_service.errors`` only).

Every ``import`` in a module counts, wherever it is written: at module level, inside a function
(the lazy ``pyspark`` imports), under ``TYPE_CHECKING``. Imports are read with ``ast``, so nothing
is imported to check them. To add a module to a layer, or a dependency to a layer, edit ``LAYERS``.

(The docstring examples of every module run through ``--doctest-modules``, see pyproject.toml.)
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import feed_service.core

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("feed_service", "spark_jobs")
ANY = "*"
"""In ``may_import`` or ``libraries``: no restriction (the CLI wires everything together)."""


@dataclass(frozen=True)
class Layer:
    """One row of the table: the modules of the layer and what they may import.

    ``modules``: module names or package prefixes that belong to the layer (the longest match wins).
    ``may_import``: lower layers by name, or single modules (dotted names, e.g. ``feed_service.stack.spark_connector``).
    ``libraries``: top-level names of third-party distributions (the standard library is always allowed).
    """

    name: str
    modules: tuple[str, ...]
    may_import: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()


#: Bottom up: a layer may only name layers above it in this list (arrows point down).
LAYERS: tuple[Layer, ...] = (
    Layer("package", ("feed_service",)),  # the root __init__: a docstring and a version
    Layer("errors", ("feed_service.errors",)),
    Layer("distribution", ("feed_service.distribution",)),  # pure size summaries (feedctl state-stats)
    Layer("heap", ("feed_service.heap",)),  # the collector's view of an engine process's heap
    Layer("core", ("feed_service.core",), ("errors",)),
    Layer("roles", ("feed_service.security.roles",), ("errors",)),  # pure: who may do what
    Layer("settings", ("feed_service.settings", "feed_service.resources"), ("core", "errors", "roles")),
    # secret files and the local CA (the cryptography package)
    Layer("security", ("feed_service.security",), ("errors", "roles", "settings"), ("cryptography",)),
    Layer("api", ("feed_service.api",), libraries=("grpc", "google", "grpc_tools")),  # generated gRPC stubs
    Layer("kafka", ("feed_service.kafka",), ("core", "errors", "settings", "roles", "security"),
          ("confluent_kafka", "fastjsonschema")),
    Layer("store", ("feed_service.store",), ("core", "errors", "settings", "distribution", "roles", "security"),
          ("cassandra",)),
    Layer("server", ("feed_service.server",), ("core", "errors", "settings", "store", "api", "kafka", "roles",
                                               "security"),
          ("grpc", "grpc_health", "grpc_reflection", "grpc_status", "google", "prometheus_client", "cachetools")),
    # client-side helpers of the read service: over the generated stubs only
    Layer("client", ("feed_service.client",), ("api",), ("grpc", "google", "tenacity")),
    Layer("workload", ("feed_service.workload",), ("core", "errors", "kafka")),
    Layer("ops", ("feed_service.ops",), ("kafka", "store", "settings", "roles", "security")),
    # The local stack starts processes; it probes Kafka and Cassandra (through the store's TLS and login
    # options) and fetches the Kafka connector for Spark.
    Layer("stack", ("feed_service.stack",), ("settings", "errors", "kafka", "ops", "roles", "security",
                                             "feed_service.store.session"),
          ("confluent_kafka", "cassandra", "pyspark")),
    Layer("spark_jobs", ("spark_jobs",), ("core", "errors", "distribution", "settings", "kafka", "store",
                                          "roles", "security",
                                          # the Kafka connector's jars of a session not spark-submitted
                                          "feed_service.stack.spark_connector"),
          ("pyspark", "pandas", "pyarrow", "prometheus_client")),  # prometheus_client: the stream's /metrics
    Layer("cli", ("feed_service.cli", "feed_service.__main__"), (ANY,), (ANY,)),
)
BY_NAME = {layer.name: layer for layer in LAYERS}

#: Reported violations, each with the report; its test is expected to fail until the code moves.
KNOWN_VIOLATIONS: dict[str, str] = {}
"""module -> why it may break its layer's rule for now (xfail strict: it fails once mended)."""


def _modules() -> dict[str, Path]:
    """Every module of the two packages by dotted name (a package by its ``__init__``)."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def layer_of(module: str) -> Layer:
    """The layer owning ``module``: the longest matching entry of ``Layer.modules``."""
    best: tuple[int, Layer] | None = None
    for layer in LAYERS:
        for entry in layer.modules:
            if (module == entry or module.startswith(entry + ".")) and (best is None or len(entry) > best[0]):
                best = (len(entry), layer)
    if best is None:
        raise LookupError(f"module {module} belongs to no layer of LAYERS")
    return best[1]


def imports_of(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every import in ``path``; ``from pkg import mod`` names the module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((node.lineno, candidate if candidate in MODULES else base))
    return found


def _allows(layer: Layer, target: str) -> bool:
    top = target.split(".")[0]
    if top == "__future__" or top in sys.stdlib_module_names:
        return True
    if top not in PACKAGES:
        return ANY in layer.libraries or top in layer.libraries
    target_layer = layer_of(target)
    if ANY in layer.may_import or target_layer in (layer, BY_NAME["package"]):
        return True
    return any(target_layer.name == allowed if "." not in allowed
               else target == allowed or target.startswith(allowed + ".")
               for allowed in layer.may_import)


def _param(module: str) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_VIOLATIONS[module])] if module in KNOWN_VIOLATIONS else []
    return pytest.param(module, id=str(MODULES[module].relative_to(REPO)), marks=marks)


@pytest.mark.parametrize("module", [_param(m) for m in sorted(MODULES)])
def test_module_imports_only_what_its_layer_allows(module: str) -> None:
    layer = layer_of(module)
    path = MODULES[module].relative_to(REPO)
    offending = sorted({f"{path}:{line} imports {target}" for line, target in imports_of(module, MODULES[module])
                        if not _allows(layer, target)})
    assert not offending, (
        f"layer {layer.name!r} may import layers {list(layer.may_import)} and libraries {list(layer.libraries)}:\n  "
        + "\n  ".join(offending))


def test_every_module_belongs_to_a_layer() -> None:
    # The root package layer holds the root __init__ only: a new module must be given a real layer.
    unplaced = [m for m in MODULES if layer_of(m).name == "package" and m != "feed_service"]
    assert not unplaced, f"add these modules to a layer of LAYERS: {unplaced}"


def test_layers_only_point_down() -> None:
    seen: set[str] = set()
    upward = []
    for layer in LAYERS:
        for allowed in layer.may_import:
            if allowed == ANY:
                continue
            below = allowed in seen if "." not in allowed else layer_of(allowed).name in seen
            if not below:
                upward.append(f"{layer.name} -> {allowed}")
        seen.add(layer.name)
    assert not upward, f"these rows name a layer that is not below them in LAYERS: {upward}"
    assert set(KNOWN_VIOLATIONS) <= set(MODULES)


def test_the_rules_catch_an_offending_import() -> None:
    """The checker itself: each kind of import is judged by the right rule."""
    core, spark_jobs = BY_NAME["core"], BY_NAME["spark_jobs"]
    assert _allows(core, "json") and _allows(core, "feed_service.errors") and _allows(core, "feed_service.core.join")
    assert not _allows(core, "pyspark.sql") and not _allows(core, "feed_service.settings")
    assert _allows(spark_jobs, "feed_service.stack.spark_connector")
    assert not _allows(spark_jobs, "feed_service.stack.local_stack") and not _allows(spark_jobs, "feed_service.stack.maven")
    assert not _allows(BY_NAME["kafka"], "cassandra.cluster") and not _allows(BY_NAME["settings"], "feed_service.cli")


CORE_MODULES = sorted(f"feed_service.core.{m.name}" for m in pkgutil.iter_modules(feed_service.core.__path__))
ADAPTER_LIBRARIES = ("confluent_kafka", "cassandra", "grpc", "pyspark", "pandas", "pyarrow", "fastjsonschema",
                     "prometheus_client")


def test_importing_the_core_loads_no_adapter_library() -> None:
    # At run time too, in a fresh interpreter: nothing the core imports pulls an adapter in.
    code = (
        "import importlib, json, sys\n"
        f"for name in {CORE_MODULES!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                          cwd=REPO)
    loaded = json.loads(proc.stdout)
    assert [m for m in loaded if m.split(".")[0] in ADAPTER_LIBRARIES] == []
