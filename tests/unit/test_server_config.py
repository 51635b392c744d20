"""Server configuration: precedence (defaults < file < env < flags), secrets, refusal to start."""

from __future__ import annotations

from pathlib import Path

import pytest

from feed_service.server.config import ConfigError, ServerConfig, load_config

SECRET = "config-secret-0123456789"


def test_defaults() -> None:
    config = load_config(env={})
    assert (config.host, config.port, config.metrics_port) == ("0.0.0.0", 50051, 9464)
    assert config.metrics_host == "127.0.0.1"  # /metrics is unauthenticated: loopback unless configured
    assert not config.tls and config.client_ca_file == ""
    assert (config.rate_limit_per_s, config.rate_limit_burst, config.rate_limit_service_per_s) == (50.0, 100, 0.0)
    assert (config.max_watches_per_user, config.max_request_bytes, config.max_metadata_bytes) == (32, 16384, 8192)
    assert config.auth_secret is None and not config.demo
    assert config.settings.keyspace == "feed"


def test_refuses_to_start_without_a_secret_unless_demo() -> None:
    with pytest.raises(ConfigError, match="no auth secret"):
        load_config(env={}).validated()
    assert load_config(env={"FEED_DEMO_MODE": "1"}).validated().demo
    assert load_config(env={}, overrides={"demo": True}).validated().demo


def test_short_secret_is_refused() -> None:
    with pytest.raises(ConfigError, match="too short"):
        load_config(env={"FEED_AUTH_SECRET": "short"}).validated()


def test_environment(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    config = load_config(env={
        "FEED_GRPC_PORT": "6000", "FEED_METRICS_PORT": "0", "FEED_AUTH_SECRET_FILE": str(secret_file),
        "FEED_WATCH_POLL_S": "0.25", "FEED_ACCESS_LOG": "true", "FEED_MAX_CONCURRENT_RPCS": "500",
        "FEED_CASSANDRA_HOSTS": "10.0.0.1,10.0.0.2", "FEED_CASSANDRA_PORT": "9142", "FEED_KEYSPACE": "ks",
    }).validated()
    assert config.port == 6000 and config.metrics_port is None  # 0 disables metrics
    assert config.auth_secret == SECRET.encode()  # stripped of the trailing newline
    assert config.watch_poll_s == 0.25 and config.access_log and config.max_concurrent_rpcs == 500
    assert config.settings.cassandra_hosts == ("10.0.0.1", "10.0.0.2")
    assert (config.settings.cassandra_port, config.settings.keyspace) == (9142, "ks")


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "feed.toml"
    path.write_text(f"""
[server]
port = 7000
metrics_port = 7001
auth_secret = "{SECRET}"
request_timeout_s = 0.5

[cassandra]
hosts = ["cass-1", "cass-2"]
keyspace = "from_file"
""")
    config = load_config(env={"FEED_CONFIG": str(path), "FEED_GRPC_PORT": "7100", "FEED_KEYSPACE": "from_env"},
                         overrides={"host": "127.0.0.1", "metrics_port": None}).validated()
    assert (config.host, config.port, config.metrics_port) == ("127.0.0.1", 7100, 7001)
    assert config.auth_secret == SECRET.encode() and config.request_timeout_s == 0.5
    assert config.settings.cassandra_hosts == ("cass-1", "cass-2")
    assert config.settings.keyspace == "from_env"
    assert load_config(path=path, env={}, overrides={"port": 0}).port == 0


def test_env_secret_wins_over_secret_file(tmp_path: Path) -> None:
    (tmp_path / "s").write_text("file-secret-0123456789")
    config = load_config(env={"FEED_AUTH_SECRET_FILE": str(tmp_path / "s"), "FEED_AUTH_SECRET": SECRET})
    assert config.auth_secret == SECRET.encode()


@pytest.mark.parametrize("env, message", [
    ({"FEED_GRPC_PORT": "http"}, "not an integer"),
    ({"FEED_DEMO_MODE": "maybe"}, "not a boolean"),
    ({"FEED_WATCH_POLL_S": "0", "FEED_DEMO_MODE": "1"}, "watch_poll_s"),
    ({"FEED_AUTH_SECRET_FILE": "/nonexistent/secret"}, "cannot read"),
    ({"FEED_CONFIG": "/nonexistent/feed.toml"}, "config file"),
])
def test_invalid(env: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(env=env).validated()


def test_unknown_keys_in_file(tmp_path: Path) -> None:
    path = tmp_path / "feed.toml"
    path.write_text("[server]\nprot = 1\n")
    with pytest.raises(ConfigError, match="unknown setting"):
        load_config(path=path, env={})
    path.write_text("[srv]\n")
    with pytest.raises(ConfigError, match="unknown tables"):
        load_config(path=path, env={})


def test_secret_is_not_in_repr() -> None:
    assert SECRET not in repr(ServerConfig(auth_secret=SECRET.encode()))


def test_abuse_limits_from_the_environment() -> None:
    config = load_config(env={
        "FEED_AUTH_SECRET": SECRET, "FEED_RATE_LIMIT_PER_S": "0", "FEED_RATE_LIMIT_BURST": "7",
        "FEED_RATE_LIMIT_SERVICE_PER_S": "500.5", "FEED_MAX_WATCHES_PER_USER": "3",
        "FEED_MAX_REQUEST_BYTES": "4096", "FEED_MAX_METADATA_BYTES": "2048", "FEED_METRICS_HOST": "0.0.0.0",
    }).validated()
    assert (config.rate_limit_per_s, config.rate_limit_burst, config.rate_limit_service_per_s) == (0.0, 7, 500.5)
    assert (config.max_watches_per_user, config.max_request_bytes, config.max_metadata_bytes) == (3, 4096, 2048)
    assert config.metrics_host == "0.0.0.0"
    for bad in ({"FEED_RATE_LIMIT_PER_S": "-1"}, {"FEED_MAX_WATCHES_PER_USER": "-2"},
                {"FEED_MAX_REQUEST_BYTES": "10"}, {"FEED_RATE_LIMIT_BURST": "0"}):
        with pytest.raises(ConfigError):
            load_config(env={"FEED_AUTH_SECRET": SECRET, **bad}).validated()
    with pytest.raises(ConfigError, match="not a number"):
        load_config(env={"FEED_RATE_LIMIT_PER_S": "fast"})


def test_pending_call_limits_from_the_environment_and_file(tmp_path: Path) -> None:
    """gRPC's pending-call limits (a reconnect storm of watches, docs/api.md#limits): defaults that let
    5,000 watches opened at once start, settable from the environment and the file, checked."""
    assert (ServerConfig().max_pending_requests, ServerConfig().max_pending_requests_hard_limit) == (10_000, 20_000)
    config = load_config(env={"FEED_AUTH_SECRET": SECRET, "FEED_GRPC_MAX_PENDING_REQUESTS": "500",
                              "FEED_GRPC_MAX_PENDING_REQUESTS_HARD_LIMIT": "900"}).validated()
    assert (config.max_pending_requests, config.max_pending_requests_hard_limit) == (500, 900)
    path = tmp_path / "serve.toml"
    path.write_text("[server]\nmax_pending_requests = 30000\nmax_pending_requests_hard_limit = 40000\n")
    config = load_config(path=path, env={"FEED_AUTH_SECRET": SECRET}).validated()
    assert (config.max_pending_requests, config.max_pending_requests_hard_limit) == (30_000, 40_000)
    for bad in ({"FEED_GRPC_MAX_PENDING_REQUESTS": "0"},
                {"FEED_GRPC_MAX_PENDING_REQUESTS": "5000", "FEED_GRPC_MAX_PENDING_REQUESTS_HARD_LIMIT": "4000"},
                {"FEED_MAX_CONCURRENT_RPCS": "-5"}):
        with pytest.raises(ConfigError, match="max_pending_requests|max_concurrent_rpcs"):
            load_config(env={"FEED_AUTH_SECRET": SECRET, **bad}).validated()
    with pytest.raises(ConfigError, match="not an integer"):
        load_config(env={"FEED_GRPC_MAX_PENDING_REQUESTS": "many"})
