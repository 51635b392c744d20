"""The settings that authenticate and encrypt Spark's own RPC with a shared secret, written where
Spark reads them without a command line: a private ``spark-defaults.conf`` (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

from feed_service.security.secrets import read_secret, write_private


def auth_conf(secret: str) -> dict[str, str]:
    """Authentication of every RPC connection with ``secret`` and AES encryption of its traffic.

    >>> sorted(auth_conf("s"))
    ['spark.authenticate', 'spark.authenticate.secret', 'spark.network.crypto.enabled']
    """
    return {"spark.authenticate": "true", "spark.authenticate.secret": secret,
            "spark.network.crypto.enabled": "true"}


def write_defaults(folder: str | Path, secret_file: str | Path) -> Path:
    """``folder/spark-defaults.conf`` (``0600``) with :func:`auth_conf` of the secret in ``secret_file``."""
    lines = "".join(f"{key} {value}\n" for key, value in auth_conf(read_secret(secret_file)).items())
    path = Path(folder) / "spark-defaults.conf"
    write_private(path, lines)
    return path
