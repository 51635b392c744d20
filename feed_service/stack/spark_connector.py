"""The Kafka connector's jars for a Spark session that this process launches itself (not spark-submit):
fetched by :mod:`feed_service.stack.maven` into the stack's cache, minus every artifact the pyspark
wheel already ships (two copies of a class on one classpath is the classic source of ``NoSuchMethodError``).

Spark's own Ivy resolver (``spark.jars.packages``) cannot be relied on to reach the registry here.
The session builder (spark_jobs/runtime/session.py) asks for them; the image build (Dockerfile) puts
them into the wheel's ``jars/`` once, so a spark-submitted driver fetches nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from feed_service.stack import maven
from feed_service.stack.config import default_cache_dir
from feed_service.stack.versions import SPARK_VERSION

_VERSION_SUFFIX = re.compile(r"-\d[\w.\-]*\.jar$")


def _artifact(jar: Path) -> str:
    return _VERSION_SUFFIX.sub("", jar.name)


def spark_cache_dir(cache_dir: Path | None = None) -> Path:
    """``cache_dir``, else the stack's download cache (:func:`~feed_service.stack.config.default_cache_dir`):
    the connector's jars and the code archives of the sessions live there."""
    return cache_dir if cache_dir is not None else default_cache_dir()


def kafka_connector_jars(cache_dir: Path | None = None) -> list[Path]:
    """The connector's jars that the pyspark wheel does not already ship (fetched when missing into
    :func:`spark_cache_dir`)."""
    import pyspark

    if pyspark.__version__ != SPARK_VERSION:
        raise RuntimeError(
            f"pyspark {pyspark.__version__} is installed but the stack pins Spark {SPARK_VERSION}; "
            "run ./scripts/bootstrap"
        )
    shipped = {_artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    lib = maven.fetch(spark_cache_dir(cache_dir), "spark-kafka")
    return sorted(j for j in lib.glob("*.jar") if _artifact(j) not in shipped)
