"""Spark's own RPC on a standalone cluster: a shared secret authenticates every connection between
the driver, the master, the workers and the executors, and AES encrypts it (docs/security.md).

Spark standalone accepts the secret only as the configuration value ``spark.authenticate.secret``
(its ``SecurityManager`` reads a secret *file* on Kubernetes only). Pyspark hands builder settings to
``spark-submit`` as ``--conf`` arguments, which every local user can read in the process list, so the
driver gets it the way the daemons do: from a ``spark-defaults.conf`` in a private ``SPARK_CONF_DIR``,
written ``0600`` from the secret file (``FEED_SPARK_AUTH_SECRET_FILE``) just before the JVM starts.
Executors receive it from their worker in an environment variable, never on a command line.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

from feed_service.security.spark_conf import write_defaults

SECRET_FILE_ENV = "FEED_SPARK_AUTH_SECRET_FILE"
"""The file holding the standalone cluster's shared secret (the stack's ``secrets/spark/auth.secret``)."""


def prepare_driver(env: Mapping[str, str] | None = None) -> Path | None:
    """Before a driver's JVM starts on a standalone master: point ``SPARK_CONF_DIR`` at a private folder
    holding the secret, removed when this process exits. None (nothing done) without a secret file."""
    env = os.environ if env is None else env
    secret_file = env.get(SECRET_FILE_ENV)
    if not secret_file:
        return None
    folder = Path(tempfile.mkdtemp(prefix="feed-spark-conf-"))  # 0700
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    write_defaults(folder, secret_file)
    os.environ["SPARK_CONF_DIR"] = str(folder)
    return folder
