"""The read service's transport credentials (docs/api.md#tls): TLS, or mutual TLS, from PEM files.

The files are read once, when the server starts (a certificate rotated on disk takes effect at the
next start: ``feedctl stack rotate-certs`` restarts what it re-issues); their paths are in the
configuration, their contents are never logged. Health and reflection share the port, and so the
same credentials: a client that cannot reach the service cannot probe it either.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from feed_service.errors import ConfigError
from feed_service.server.config import ServerConfig


def read_pem(path: str, name: str) -> bytes:
    """The bytes of a PEM file; :class:`ConfigError` naming the setting and path (never the content)."""
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read {path}: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise ConfigError(f"{name}: {path} is not PEM")
    return data


def server_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    """TLS credentials of ``config`` (None: plaintext); with ``client_ca_file``, clients must present
    a certificate that CA signed (the handshake fails otherwise: no call reaches the service)."""
    if not config.tls:
        return None
    cert = read_pem(config.tls_cert_file, "tls_cert_file")
    key = read_pem(config.tls_key_file, "tls_key_file")
    client_ca = read_pem(config.client_ca_file, "client_ca_file") if config.client_ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)
