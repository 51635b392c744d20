"""Secrets live in files: read them when a connection opens, write them private, never print them.

A password on a command line is visible to every local user (``/proc/*/cmdline``) and ends up in
shell histories and process listings; in an environment variable it is inherited by every child
process and dumped by crash reporters. So the service takes the *path* of a secret (settings, a
mounted Kubernetes Secret) and reads the value only where it is used. Errors name the file, never
its contents.
"""

from __future__ import annotations

import logging
import os
import secrets as _random
import stat
from pathlib import Path

from feed_service.errors import ConfigError
from feed_service.security.roles import cassandra_role, kafka_user, password_file

log = logging.getLogger(__name__)

_warned: set[str] = set()


def read_secret(path: str | Path) -> str:
    """The secret in ``path`` without its trailing newline; :class:`ConfigError` naming the file if it is
    missing or empty. A file others may read is used, with one warning per file."""
    path = Path(path)
    try:
        value = path.read_text(encoding="utf-8").rstrip("\r\n")
        mode = path.stat().st_mode
    except OSError as exc:
        raise ConfigError(f"secret file {path}: {exc.strerror or exc}") from None
    if not value:
        raise ConfigError(f"secret file {path} is empty")
    if mode & (stat.S_IRWXG | stat.S_IRWXO) and not _is_mounted_secret(path) and str(path) not in _warned:
        _warned.add(str(path))
        log.warning("secret file %s is readable by other users (mode %o): chmod 600 it", path, stat.S_IMODE(mode))
    return value


def _is_mounted_secret(path: Path) -> bool:
    """Kubernetes mounts Secrets through ``..data`` symlinks with mode 0644 by default unless the volume
    sets ``defaultMode``; our manifests set 0400, so this only spares the warning for the layout."""
    return "..data" in os.path.realpath(path)


def write_private(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` readable by its owner only (``0600``, the folder ``0700``), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def new_password() -> str:
    """A random password (32 URL-safe characters: 192 bits)."""
    return _random.token_urlsafe(24)


def login(credentials_dir: str, role: str, system: str) -> tuple[str, str]:
    """(user, password) of ``role`` on ``system`` (``kafka`` or ``cassandra``) from ``credentials_dir``;
    :class:`ConfigError` when no role or folder is set, since a secured link cannot be used without."""
    if not role:
        raise ConfigError(f"{system} needs a login but this process has no role (set FEED_ROLE)")
    if not credentials_dir:
        raise ConfigError(f"{system} needs a login but FEED_CREDENTIALS_DIR is not set")
    user = kafka_user(role) if system == "kafka" else cassandra_role(role)
    return user, read_secret(password_file(credentials_dir, role, system))


def ensure_credentials(credentials_dir: str | Path, roles: tuple[str, ...], systems: tuple[str, ...] = ("kafka", "cassandra")) -> bool:
    """Create a random password file for every role and system that has none; True if any was made."""
    made = False
    Path(credentials_dir).mkdir(parents=True, exist_ok=True)
    os.chmod(credentials_dir, 0o700)
    for role in roles:
        for system in systems:
            path = password_file(credentials_dir, role, system)
            if not path.exists():
                write_private(path, new_password() + "\n")
                made = True
    return made
