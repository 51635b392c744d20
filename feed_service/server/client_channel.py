"""Client channels to the read service, plaintext or TLS from the same settings (docs/api.md#tls).

``open_channel(target)`` is secure when a CA is given, or set in ``FEED_GRPC_CA_FILE``; with a client
certificate and key (``FEED_GRPC_CLIENT_CERT_FILE`` / ``FEED_GRPC_CLIENT_KEY_FILE``) it presents them,
as a server with mutual TLS requires. Without a CA it is the plaintext channel of the single-node
stack. So the same test or tool reaches a plaintext or a TLS server with no change but the environment
(``feedctl stack env`` of a secured stack prints those variables).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import grpc

from feed_service.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ClientTLS:
    """What a client trusts and presents: CA file ("" = plaintext), client certificate and key files."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ClientTLS":
        env = os.environ if env is None else env
        return cls(env.get("FEED_GRPC_CA_FILE", ""), env.get("FEED_GRPC_CLIENT_CERT_FILE", ""),
                   env.get("FEED_GRPC_CLIENT_KEY_FILE", ""))

    @property
    def secure(self) -> bool:
        return bool(self.ca_file)

    def credentials(self) -> grpc.ChannelCredentials:
        """The channel credentials (files read now); :class:`ConfigError` on a missing file or half a pair."""
        if bool(self.cert_file) != bool(self.key_file):
            raise ConfigError("a client certificate needs its key (FEED_GRPC_CLIENT_CERT_FILE and"
                              " FEED_GRPC_CLIENT_KEY_FILE), or neither")
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file, "FEED_GRPC_CA_FILE"),
            private_key=_read(self.key_file, "FEED_GRPC_CLIENT_KEY_FILE") if self.key_file else None,
            certificate_chain=_read(self.cert_file, "FEED_GRPC_CLIENT_CERT_FILE") if self.cert_file else None,
        )


def _read(path: str, name: str) -> bytes:
    try:
        with open(os.path.expanduser(path), "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read {path}: {exc.strerror}") from None


def open_channel(target: str, *, ca_file: str | None = None, cert_file: str | None = None,
                 key_file: str | None = None, aio: bool = False,
                 options: Sequence[tuple[str, Any]] = (), env: Mapping[str, str] | None = None) -> Any:
    """A channel to ``target``: TLS when a CA is given (each file argument left None falls back to its
    environment variable), plaintext otherwise; ``aio``: a ``grpc.aio`` channel."""
    from_env = ClientTLS.from_env(env)
    tls = ClientTLS(from_env.ca_file if ca_file is None else ca_file,
                    from_env.cert_file if cert_file is None else cert_file,
                    from_env.key_file if key_file is None else key_file)
    return channel_for(target, tls, aio=aio, options=options)


def channel_for(target: str, tls: ClientTLS, *, aio: bool = False, options: Sequence[tuple[str, Any]] = ()) -> Any:
    """A channel to ``target`` with ``tls`` (plaintext when it names no CA)."""
    module = grpc.aio if aio else grpc
    if not tls.secure:
        if tls.cert_file or tls.key_file:
            raise ConfigError("a client certificate needs FEED_GRPC_CA_FILE (TLS) too")
        return module.insecure_channel(target, options=list(options))
    return module.secure_channel(target, tls.credentials(), options=list(options))
