"""Spark in local mode from the pyspark wheel, with the Kafka connector fetched by Maven.

Spark's own Ivy resolver (``spark.jars.packages``) cannot be relied on to reach the registry here, so
the connector and its dependencies are fetched by :mod:`feed_service.stack.maven` and passed as
``spark.jars``, minus every artifact the wheel already ships (two copies of a class on one classpath
is the classic source of ``NoSuchMethodError``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from feed_service.stack import maven
from feed_service.errors import ConfigError
from feed_service.stack.config import default_cache_dir
from feed_service.stack.versions import SPARK_VERSION

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: State store provider required by transformWithState (see shared/design/spark-notes.md).
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

_VERSION_SUFFIX = re.compile(r"-\d[\w.\-]*\.jar$")


def _artifact(jar: Path) -> str:
    return _VERSION_SUFFIX.sub("", jar.name)


def kafka_connector_jars(cache_dir: Path | None = None) -> list[Path]:
    """The connector's jars that the pyspark wheel does not already ship (fetched when missing into
    ``cache_dir``, default :func:`~feed_service.stack.config.default_cache_dir`)."""
    import pyspark

    if pyspark.__version__ != SPARK_VERSION:
        raise RuntimeError(
            f"pyspark {pyspark.__version__} is installed but the stack pins Spark {SPARK_VERSION}; "
            "run ./scripts/bootstrap"
        )
    shipped = {_artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    lib = maven.fetch(cache_dir if cache_dir is not None else default_cache_dir(), "spark-kafka")
    return sorted(j for j in lib.glob("*.jar") if _artifact(j) not in shipped)


SPARK_CONF_ENV = "FEED_SPARK_CONF"
"""Extra Spark settings for every session of this process, ``key=value`` pairs separated by ``;``
(tuning and benchmarks: docs/streaming.md); applied last, so they override the defaults here."""


def spark_conf_from_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings of :data:`SPARK_CONF_ENV`; :class:`ConfigError` on a malformed pair.

    >>> spark_conf_from_env({"FEED_SPARK_CONF": "spark.a=1; spark.b = x=y"})
    {'spark.a': '1', 'spark.b': 'x=y'}
    """
    raw = (os.environ if env is None else env).get(SPARK_CONF_ENV, "")
    out: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in raw.split(";"))):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().startswith("spark."):
            raise ConfigError(f"{SPARK_CONF_ENV}: expected spark.<name>=<value> pairs separated by ';', got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def build_session(
    app_name: str,
    *,
    cache_dir: Path | None = None,
    master: str = "local[2]",
    shuffle_partitions: int = 4,
    extra_conf: Mapping[str, str] | None = None,
) -> "SparkSession":
    """A local SparkSession with the Kafka connector and RocksDB state store configured."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", _python())
    jars = ",".join(str(j) for j in kafka_connector_jars(cache_dir))
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.jars", jars)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        # Commit a batch's state as a changelog instead of a full RocksDB snapshot upload.
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        # The pandas operators get nullable Int64 columns: numpy float64 would round bigints above 2**53.
        .config("spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )
    for key, value in {**(extra_conf or {}), **spark_conf_from_env()}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def _python() -> str:
    import sys

    return sys.executable
