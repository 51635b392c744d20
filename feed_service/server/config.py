"""Server configuration: defaults < TOML config file < environment < command-line flags.

Environment variables (the config file has the same keys, lower-case, without ``FEED_``, in a
``[server]`` table, and ``hosts``/``port``/``keyspace`` in a ``[cassandra]`` table):

===================================  =========  ========================================================
``FEED_CONFIG``                                 path of the TOML config file (or ``feedctl serve --config``)
``FEED_GRPC_HOST``                   0.0.0.0    listen address of the gRPC server
``FEED_GRPC_PORT``                   50051      listen port (0: any free port)
``FEED_METRICS_HOST``                127.0.0.1  listen address of the Prometheus endpoint (loopback unless set:
                                                a scraper elsewhere needs e.g. 0.0.0.0)
``FEED_METRICS_PORT``                9464       Prometheus ``/metrics`` port; 0 disables it
``FEED_AUTH_SECRET``                            HMAC secret of bearer and page tokens (>= 16 bytes)
``FEED_AUTH_SECRET_FILE``                       file holding the secret (used when FEED_AUTH_SECRET is unset)
``FEED_DEMO_MODE``                   0          1: without a secret, use a random per-process one (local only)
``FEED_REQUEST_TIMEOUT_S``           2.0        Cassandra time budget of a call without a gRPC deadline
``FEED_WATCH_POLL_S``                1.0        WatchHomeTimeline polling interval
``FEED_PULL_CACHE_TTL_S``            1.0        reuse of pull authors' newest entries and users' pull authors (0: off)
``FEED_PROFILE_CACHE_SIZE``          100000     cached profile versions (immutable, so never stale)
``FEED_SHUTDOWN_GRACE_S``            10.0       SIGTERM: time given to in-flight calls to finish
``FEED_MAX_CONCURRENT_RPCS``         (none)     beyond this many in-flight calls: RESOURCE_EXHAUSTED (an open watch is one)
``FEED_GRPC_MAX_PENDING_REQUESTS``   10000      calls gRPC holds before the service takes them; beyond: CANCELLED at
                                                random, beyond ``FEED_GRPC_MAX_PENDING_REQUESTS_HARD_LIMIT`` (20000)
                                                every one (docs/api.md#limits)
``FEED_GRPC_TLS_CERT_FILE``                     server certificate chain (PEM); with the key: TLS (docs/api.md#tls)
``FEED_GRPC_TLS_KEY_FILE``                      its private key (PEM); one of the two alone is an error
``FEED_GRPC_CLIENT_CA_FILE``                    mutual TLS: every client presents a certificate signed by this CA
``FEED_RATE_LIMIT_PER_S``            50         calls per second per user or unauthenticated peer (0: off)
``FEED_RATE_LIMIT_BURST``            100        calls such a principal may make at once before the rate applies
``FEED_RATE_LIMIT_SERVICE_PER_S``    0          the same per service token (0: services are not limited)
``FEED_MAX_WATCHES_PER_USER``        32         open WatchHomeTimeline streams per timeline (0: no cap)
``FEED_MAX_REQUEST_BYTES``           16384      largest request message accepted (RESOURCE_EXHAUSTED beyond)
``FEED_MAX_METADATA_BYTES``          8192       largest request metadata (headers) accepted
``FEED_ACCESS_LOG``                  0          1: one JSON log line per successful call (errors always)
``FEED_LOG_LEVEL``                   INFO       log level of the JSON logs on stderr
===================================  =========  ========================================================

Cassandra comes from :class:`feed_service.settings.Settings` (``FEED_CASSANDRA_HOSTS``,
``FEED_CASSANDRA_PORT``, ``FEED_KEYSPACE``), which the ``[cassandra]`` table of the file can set too
(the environment wins). So do the read-activity reports (``FEED_INACTIVE_AFTER_S``,
``FEED_READ_REPORT_INTERVAL_S``: docs/activity.md#read-activity) and the ``reads`` topic they go to.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from feed_service.errors import ConfigError
from feed_service.settings import Settings

DEFAULT_GRPC_PORT = 50051
DEFAULT_METRICS_PORT = 9464
MIN_SECRET_BYTES = 16


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "0.0.0.0"
    port: int = DEFAULT_GRPC_PORT
    #: loopback unless configured: /metrics is unauthenticated (docs/api.md#tls)
    metrics_host: str = "127.0.0.1"
    #: None: no metrics endpoint; 0: any free port (in-process use, tests)
    metrics_port: int | None = DEFAULT_METRICS_PORT
    auth_secret: bytes | None = field(default=None, repr=False)
    demo: bool = False
    request_timeout_s: float = 2.0
    watch_poll_s: float = 1.0
    profile_cache_size: int = 100_000
    #: seconds a pull author's newest entries and a user's pull authors are reused (0: read every time)
    pull_cache_ttl_s: float = 1.0
    #: consume the view's change topic: watches are pushed, the read cache is kept exact
    #: (docs/api.md#watch); off: watches poll every ``watch_poll_s`` and nothing but pull sources is cached
    change_feed: bool = True
    #: timelines, pull authors and pull-author lists the read cache keeps (0: no read cache)
    read_cache_keys: int = 20_000
    #: rows cached per timeline (a first page of n rows needs n + 1)
    read_cache_depth: int = 41
    shutdown_grace_s: float = 10.0
    max_concurrent_rpcs: int | None = None
    #: gRPC core's queue of calls not yet taken by the service (``grpc.server.max_pending_requests``
    #: and its ``_hard_limit``): beyond the first it refuses new calls at random, beyond the second all,
    #: with CANCELLED. grpc.aio takes calls one at a time, so a reconnect storm fills it: the defaults
    #: let 5,000 watches opened at once all start (gRPC's own: 1,000 and 3,000; docs/api.md#limits)
    max_pending_requests: int = 10_000
    max_pending_requests_hard_limit: int = 20_000
    #: TLS (docs/api.md#tls): the certificate chain and key files (PEM), both or neither; read at start
    tls_cert_file: str = ""
    tls_key_file: str = ""
    #: mutual TLS: clients must present a certificate signed by this CA (needs the two above)
    client_ca_file: str = ""
    #: abuse limits (docs/api.md#limits): calls per second and at once per user or unauthenticated
    #: peer, per service (0: off), open watches per timeline, request and metadata sizes
    rate_limit_per_s: float = 50.0
    rate_limit_burst: int = 100
    rate_limit_service_per_s: float = 0.0
    max_watches_per_user: int = 32
    max_request_bytes: int = 16 * 1024
    max_metadata_bytes: int = 8 * 1024
    access_log: bool = False
    log_level: str = "INFO"
    settings: Settings = field(default_factory=Settings)

    @property
    def tls(self) -> bool:
        """Whether the server speaks TLS (mutual when :attr:`client_ca_file` is set)."""
        return bool(self.tls_cert_file)

    def validated(self) -> "ServerConfig":
        """Self, checked; raises :class:`ConfigError` (no secret outside demo mode, bad numbers)."""
        if self.auth_secret is None and not self.demo:
            raise ConfigError(
                "no auth secret: set FEED_AUTH_SECRET or FEED_AUTH_SECRET_FILE (or auth_secret_file in the"
                " config file); for a local demo only, run with --demo or FEED_DEMO_MODE=1"
            )
        if self.auth_secret is not None and len(self.auth_secret) < MIN_SECRET_BYTES:
            raise ConfigError(f"auth secret too short: at least {MIN_SECRET_BYTES} bytes")
        for name in ("request_timeout_s", "watch_poll_s", "shutdown_grace_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        if self.pull_cache_ttl_s < 0:
            raise ConfigError("pull_cache_ttl_s must be >= 0")
        if self.read_cache_keys < 0 or self.read_cache_depth < 2:
            raise ConfigError("read_cache_keys must be >= 0 and read_cache_depth >= 2")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError("TLS needs both tls_cert_file and tls_key_file (FEED_GRPC_TLS_CERT_FILE,"
                              " FEED_GRPC_TLS_KEY_FILE), or neither")
        if self.client_ca_file and not self.tls_cert_file:
            raise ConfigError("client_ca_file (mutual TLS) needs server TLS: set FEED_GRPC_TLS_CERT_FILE and"
                              " FEED_GRPC_TLS_KEY_FILE too")
        for name in ("tls_cert_file", "tls_key_file", "client_ca_file"):
            path = getattr(self, name)
            if path and not os.access(Path(path).expanduser(), os.R_OK):
                raise ConfigError(f"{name}: cannot read {path}")
        if self.rate_limit_per_s < 0 or self.rate_limit_service_per_s < 0:
            raise ConfigError("rate limits must be >= 0 (0: off)")
        if self.rate_limit_per_s > 0 and self.rate_limit_burst < 1:
            raise ConfigError("rate_limit_burst must be >= 1")
        if self.max_watches_per_user < 0:
            raise ConfigError("max_watches_per_user must be >= 0 (0: no cap)")
        if self.max_concurrent_rpcs is not None and self.max_concurrent_rpcs < 1:
            raise ConfigError("max_concurrent_rpcs must be >= 1 (unset or 0: no cap)")
        if self.max_pending_requests < 1 or self.max_pending_requests_hard_limit < self.max_pending_requests:
            raise ConfigError("max_pending_requests must be >= 1 and max_pending_requests_hard_limit >= it"
                              " (FEED_GRPC_MAX_PENDING_REQUESTS, FEED_GRPC_MAX_PENDING_REQUESTS_HARD_LIMIT)")
        if self.max_request_bytes < 1024 or self.max_metadata_bytes < 1024:
            raise ConfigError("max_request_bytes and max_metadata_bytes must be >= 1024")
        if not 0 <= self.port <= 65535 or (self.metrics_port is not None and not 0 <= self.metrics_port <= 65535):
            raise ConfigError("ports must be within 0..65535")
        return self


_BOOL = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False,
         "": False}


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    try:
        return _BOOL[str(value).strip().lower()]
    except KeyError:
        raise ConfigError(f"{name}: not a boolean: {value!r}") from None


def _number(kind: type, value: Any, name: str) -> Any:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: not a{'n integer' if kind is int else ' number'}: {value!r}") from None


def _secret_from_file(path: str, name: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read {path}: {exc.strerror}") from None


def _apply(values: dict[str, Any], raw: Mapping[str, Any], source: str) -> None:
    """Parse ``raw`` (lower-case keys) into ``values``, naming ``source`` in errors."""
    known = {f.name for f in fields(ServerConfig)} | {"auth_secret_file"}
    for key, value in raw.items():
        name = f"{source}:{key}"
        if key not in known or key == "settings":
            raise ConfigError(f"{name}: unknown setting")
        if key in ("port",):
            values[key] = _number(int, value, name)
        elif key == "metrics_port":
            port = _number(int, value, name)
            values[key] = None if port == 0 else port
        elif key in ("profile_cache_size", "read_cache_keys", "read_cache_depth", "rate_limit_burst",
                     "max_watches_per_user", "max_request_bytes", "max_metadata_bytes", "max_pending_requests",
                     "max_pending_requests_hard_limit"):
            values[key] = _number(int, value, name)
        elif key == "max_concurrent_rpcs":
            values[key] = None if value in ("", None, 0, "0") else _number(int, value, name)
        elif key in ("request_timeout_s", "watch_poll_s", "shutdown_grace_s", "pull_cache_ttl_s",
                     "rate_limit_per_s", "rate_limit_service_per_s"):
            values[key] = _number(float, value, name)
        elif key in ("demo", "access_log", "change_feed"):
            values[key] = _bool(value, name)
        elif key == "auth_secret":
            values[key] = str(value).encode() if value not in ("", None) else None
        elif key == "auth_secret_file":
            if value:
                values["auth_secret"] = _secret_from_file(str(value), name)
        else:
            values[key] = str(value)


_ENV_KEYS = {
    "FEED_GRPC_HOST": "host", "FEED_GRPC_PORT": "port", "FEED_METRICS_HOST": "metrics_host",
    "FEED_METRICS_PORT": "metrics_port", "FEED_AUTH_SECRET_FILE": "auth_secret_file",
    "FEED_AUTH_SECRET": "auth_secret", "FEED_DEMO_MODE": "demo", "FEED_REQUEST_TIMEOUT_S": "request_timeout_s",
    "FEED_WATCH_POLL_S": "watch_poll_s", "FEED_PROFILE_CACHE_SIZE": "profile_cache_size",
    "FEED_PULL_CACHE_TTL_S": "pull_cache_ttl_s", "FEED_CHANGE_FEED": "change_feed",
    "FEED_READ_CACHE_KEYS": "read_cache_keys", "FEED_READ_CACHE_DEPTH": "read_cache_depth",
    "FEED_SHUTDOWN_GRACE_S": "shutdown_grace_s", "FEED_MAX_CONCURRENT_RPCS": "max_concurrent_rpcs",
    "FEED_ACCESS_LOG": "access_log", "FEED_LOG_LEVEL": "log_level",
    "FEED_GRPC_TLS_CERT_FILE": "tls_cert_file", "FEED_GRPC_TLS_KEY_FILE": "tls_key_file",
    "FEED_GRPC_CLIENT_CA_FILE": "client_ca_file", "FEED_RATE_LIMIT_PER_S": "rate_limit_per_s",
    "FEED_RATE_LIMIT_BURST": "rate_limit_burst", "FEED_RATE_LIMIT_SERVICE_PER_S": "rate_limit_service_per_s",
    "FEED_MAX_WATCHES_PER_USER": "max_watches_per_user", "FEED_MAX_REQUEST_BYTES": "max_request_bytes",
    "FEED_MAX_METADATA_BYTES": "max_metadata_bytes", "FEED_GRPC_MAX_PENDING_REQUESTS": "max_pending_requests",
    "FEED_GRPC_MAX_PENDING_REQUESTS_HARD_LIMIT": "max_pending_requests_hard_limit",
}


def load_config(
    *, path: str | Path | None = None, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] = {}
) -> ServerConfig:
    """Build the configuration (not yet validated: call :meth:`ServerConfig.validated`)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    settings = (Settings.from_env() if env is os.environ else _settings_from(env)).as_role("server")
    path = path or env.get("FEED_CONFIG") or None
    if path is not None:
        try:
            doc = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
        unknown = set(doc) - {"server", "cassandra"}
        if unknown:
            raise ConfigError(f"config file {path}: unknown tables {sorted(unknown)}")
        _apply(values, doc.get("server", {}), str(path))
        settings = _settings_with_file(settings, doc.get("cassandra", {}), env, str(path))
    # the environment wins over the file; FEED_AUTH_SECRET wins over FEED_AUTH_SECRET_FILE (applied after it)
    _apply(values, {key: env[var] for var, key in _ENV_KEYS.items() if var in env}, "env")
    _apply(values, {k: v for k, v in overrides.items() if v is not None}, "flag")
    return ServerConfig(settings=settings, **values)


def _settings_from(env: Mapping[str, str]) -> Settings:
    base = Settings()
    return replace(
        base,
        cassandra_hosts=tuple(env.get("FEED_CASSANDRA_HOSTS", ",".join(base.cassandra_hosts)).split(",")),
        cassandra_port=int(env.get("FEED_CASSANDRA_PORT", base.cassandra_port)),
        keyspace=env.get("FEED_KEYSPACE", base.keyspace),
    )


def _settings_with_file(settings: Settings, table: Mapping[str, Any], env: Mapping[str, str], source: str) -> Settings:
    unknown = set(table) - {"hosts", "port", "keyspace"}
    if unknown:
        raise ConfigError(f"{source}: unknown [cassandra] keys {sorted(unknown)}")
    changes: dict[str, Any] = {}
    if "hosts" in table and "FEED_CASSANDRA_HOSTS" not in env:
        hosts = table["hosts"]
        changes["cassandra_hosts"] = tuple(hosts.split(",") if isinstance(hosts, str) else hosts)
    if "port" in table and "FEED_CASSANDRA_PORT" not in env:
        changes["cassandra_port"] = _number(int, table["port"], f"{source}:cassandra.port")
    if "keyspace" in table and "FEED_KEYSPACE" not in env:
        changes["keyspace"] = str(table["keyspace"])
    return replace(settings, **changes)
