"""Spark sessions from the pyspark wheel, with the Kafka connector and the RocksDB state store.

Local mode in the job's process unless a master is named (argument, FEED_SPARK_MASTER) or spark-submit
started the process; on a cluster master the project's code is shipped to the executors as a zip
(:func:`build_session`, :mod:`spark_jobs.runtime.code_archive`).

A session this process launches gets the connector's jars as ``spark.jars``
(:mod:`feed_service.stack.spark_connector` fetches them); under spark-submit the launch supplied them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from feed_service.errors import ConfigError
from feed_service.stack.spark_connector import kafka_connector_jars, spark_cache_dir
from spark_jobs.runtime.code_archive import build_code_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: State store provider required by transformWithState (docs/design.md, "Spark's Python stateful operators").
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

#: Options of a data source whose values Spark hides in plans, the UI and logs: its default (``url``) plus
#: the Kafka login's JAAS config and anything named password (docs/security.md).
OPTIONS_REDACTION_REGEX = r"(?i)url|sasl\.jaas\.config|password"

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


MASTER_ENV = "FEED_SPARK_MASTER"
"""The Spark master of every session of this process when the caller names none, e.g.
``spark://127.0.0.1:7077`` for the cluster stack's standalone master (docs/cluster.md)."""

DEFAULT_MASTER = "local[2]"

#: Executor sizing on a standalone cluster: one core each, so every worker's core is an executor and
#: ``spark.cores.max`` stays unset (the application takes the cluster); FEED_SPARK_CONF overrides.
CLUSTER_EXECUTOR_CONF = {"spark.executor.memory": "1g", "spark.executor.cores": "1"}


def launched_by_spark_submit(env: Mapping[str, str] | None = None) -> bool:
    """Whether this Python process is the driver of an application started by ``spark-submit`` (also
    the Kubernetes Spark operator's way): its JVM is already running, with the submitted settings.
    Spark's ``PythonRunner`` starts the Python driver with the JVM gateway's port in the environment,
    which pyspark then connects to instead of launching a JVM.

    >>> launched_by_spark_submit({"PYSPARK_GATEWAY_PORT": "41231"}), launched_by_spark_submit({})
    (True, False)
    """
    return "PYSPARK_GATEWAY_PORT" in (os.environ if env is None else env)


def resolve_master(master: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The master a session should ask for: ``master`` if given, else :data:`MASTER_ENV`, else None
    under spark-submit (keep the submitted master), else :data:`DEFAULT_MASTER`.

    >>> resolve_master("local[1]", {MASTER_ENV: "spark://h:7077"})
    'local[1]'
    >>> resolve_master(None, {MASTER_ENV: "spark://h:7077", "PYSPARK_GATEWAY_PORT": "1"})
    'spark://h:7077'
    >>> resolve_master(None, {"PYSPARK_GATEWAY_PORT": "1"}) is None, resolve_master(None, {})
    (True, 'local[2]')
    """
    if master:
        return master
    env = os.environ if env is None else env
    if env.get(MASTER_ENV, "").strip():
        return env[MASTER_ENV].strip()
    if launched_by_spark_submit(env):
        return None
    return DEFAULT_MASTER


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs the executors' tasks in the driver's JVM and on its Python installation
    (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``); ``local-cluster`` has executor JVMs of its own.

    >>> [is_local_master(m) for m in ("local", "local[2]", "local[*,3]", "local-cluster[2,1,1024]", "spark://h:1")]
    [True, True, True, False, False]
    """
    return master == "local" or master.startswith("local[")


def build_session(
    app_name: str,
    *,
    cache_dir: Path | None = None,
    master: str | None = None,
    shuffle_partitions: int = 4,
    extra_conf: Mapping[str, str] | None = None,
) -> "SparkSession":
    """A SparkSession with the Kafka connector and the RocksDB state store configured.

    The master is :func:`resolve_master`'s: by default Spark in local mode in this process, as every
    job ran so far. On any other master the executors get the project's code from a zip that this
    driver builds from the packages it imports (:mod:`spark_jobs.runtime.code_archive`), never from
    their working directory or from an installation of their own; third-party dependencies (pandas,
    pyarrow, cassandra-driver, confluent-kafka...) are the executors' environment's to supply: here
    ``PYSPARK_PYTHON`` (the driver's interpreter, a venv that has them, as workers share this
    machine), on a real cluster the executors' image. Under spark-submit the submitted JVM keeps
    what only its launch can set (driver address and memory, jars on the driver's classpath: pass the
    Kafka connector with ``--packages``/``--jars`` or in the image) and the submitted executor sizing.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", _python())
    submitted = launched_by_spark_submit()
    master = resolve_master(master)
    effective_master = master if master is not None else _submitted_master()
    cache = spark_cache_dir(cache_dir)
    code_zip = None if is_local_master(effective_master) else build_code_archive(cache)

    if code_zip is not None and not submitted:
        from spark_jobs.runtime.spark_auth import prepare_driver

        prepare_driver()  # a standalone cluster's shared secret, if it has one (docs/security.md)
    jars = [] if submitted else kafka_connector_jars(cache)
    conf = session_conf(jars=jars, code_zip=code_zip, submitted=submitted, shuffle_partitions=shuffle_partitions,
                        extra_conf=extra_conf)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    _quiet_loggers(session)
    if code_zip is not None:
        _ensure_py_file(session, code_zip)
    return session


#: JVM loggers held at ERROR: the state server warns at every ``ValueState.get`` of a grouping key
#: without state ("Value state ... doesn't contain a value"), which is how every new key or bucket
#: is first read (docs/state-buckets.md), hundreds of lines a run with one state per key.
QUIET_LOGGERS = ("org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer",)


def _quiet_loggers(session: "SparkSession") -> None:
    """Raise :data:`QUIET_LOGGERS` to ERROR in this driver's JVM, where local mode runs the state
    server (on a cluster the executors' log4j2 configuration decides; buckets keep it to one line
    per bucket there)."""
    jvm = session.sparkContext._jvm
    if jvm is None:
        return
    level = jvm.org.apache.logging.log4j.Level.ERROR
    for name in QUIET_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)


def session_conf(
    *,
    jars: Sequence[Path],
    code_zip: Path | None,
    submitted: bool,
    shuffle_partitions: int = 4,
    extra_conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The settings :func:`build_session` gives the builder: ``code_zip`` (None in local mode) is the
    code to ship; ``submitted``: spark-submit launched the JVM, whose launch-time settings stay.
    ``extra_conf`` and then :data:`SPARK_CONF_ENV` (from ``env``) override the rest."""
    conf: dict[str, str] = {
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        # Commit a batch's state as a changelog instead of a full RocksDB snapshot upload.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.redaction.options.regex": OPTIONS_REDACTION_REGEX,
        # Pandas UDFs (the backfill's) get nullable Int64 columns: numpy float64 would round bigints above 2**53.
        "spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype": "true",
    }
    user_conf = {**(extra_conf or {}), **spark_conf_from_env(env)}
    if not submitted:
        conf.update({
            "spark.jars": ",".join(str(j) for j in jars),
            "spark.driver.memory": "1g",
            # Loopback: the standalone workers of the cluster stack reach the driver here too.
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
        })
        if code_zip is not None:
            conf.update(CLUSTER_EXECUTOR_CONF)
            # Read by spark-submit when pyspark launches the JVM: it serves the zip to the executors,
            # and the Python SparkContext puts it on their sys.path, ahead of site-packages.
            conf["spark.submit.pyFiles"] = ",".join(
                filter(None, (user_conf.pop("spark.submit.pyFiles", ""), str(code_zip))))
    return {**conf, **user_conf}


def _submitted_master() -> str:
    """The master spark-submit gave the already running JVM (connecting to it launches nothing)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return SparkConf().get("spark.master", DEFAULT_MASTER)


def _ensure_py_file(session: "SparkSession", code_zip: Path) -> None:
    """Ship ``code_zip`` if the context did not take it from ``spark.submit.pyFiles``: it existed
    before this call, or spark-submit fixed that setting at launch."""
    sc = session.sparkContext
    if code_zip.name not in (sc._python_includes or []):
        sc.addPyFile(str(code_zip))


def _python() -> str:
    import sys

    return sys.executable
