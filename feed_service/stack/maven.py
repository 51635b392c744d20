"""Fetch a component's jars from Maven Central with ``mvn dependency:copy-dependencies``.

Jars land in ``<cache>/<component>-<versions hash>/lib`` and are reused: a complete fetch leaves a
stamp file, so a second ``stack up`` does not download again, and changing a pinned version fetches
into a new folder instead of mixing jars of two versions.

The component poms and the Maven settings are package data (``feed_service/stack/maven/``), read
through :mod:`importlib.resources` so an installed package finds them wherever it runs from.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from contextlib import ExitStack
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from feed_service.errors import StackError as FetchError
from feed_service.stack.versions import maven_properties

log = logging.getLogger(__name__)

COMPONENTS = ("kafka", "cassandra", "spark-kafka")


def _maven_file(name: str) -> Traversable:
    """A file of the package's ``maven/`` folder (a component pom or ``settings.xml``)."""
    return resources.files("feed_service.stack").joinpath("maven", name)


def _fingerprint(component: str) -> str:
    pom = _maven_file(f"{component}.pom.xml").read_bytes()
    props = repr(sorted(maven_properties().items())).encode()
    return hashlib.sha1(pom + props).hexdigest()[:12]


def lib_dir(cache_dir: Path, component: str) -> Path:
    return cache_dir / f"{component}-{_fingerprint(component)}" / "lib"


def fetch(cache_dir: Path, component: str) -> Path:
    """Return the folder with ``component``'s jars, fetching them first when not cached."""
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}; expected one of {COMPONENTS}")
    target = lib_dir(cache_dir, component)
    stamp = target.parent / ".complete"
    if stamp.exists():
        return target
    if shutil.which("mvn") is None:
        raise FetchError("mvn not found on PATH: Maven is needed to fetch the stack's jars")
    if target.exists():
        shutil.rmtree(target)  # a fetch that died half way
    target.parent.mkdir(parents=True, exist_ok=True)
    log_file = target.parent / "mvn.log"
    # mvn needs real files for -s/-f: as_file gives the installed ones, or temporary copies (zip imports)
    with ExitStack() as files:
        settings = files.enter_context(resources.as_file(_maven_file("settings.xml")))
        pom = files.enter_context(resources.as_file(_maven_file(f"{component}.pom.xml")))
        cmd = [
            "mvn", "-B", "-q",
            "-s", str(settings),
            "-f", str(pom),
            f"-Dmaven.repo.local={cache_dir / 'm2'}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={target}",
            *(f"-D{k}={v}" for k, v in maven_properties().items()),
        ]
        log.info("fetching %s jars with Maven (log: %s)", component, log_file)
        with log_file.open("wb") as out:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0 or not any(target.glob("*.jar")):
        raise FetchError(f"Maven could not fetch {component} jars (exit {proc.returncode}); see {log_file}")
    stamp.write_text(" ".join(cmd))
    return target
