"""How every Kafka client of the service connects: bootstrap servers and, on a secured cluster, TLS
and a SCRAM-SHA-512 login as the process's role (docs/security.md).

One function per client library, so the producers, consumers, admin clients and Spark's Kafka source
and sink cannot drift apart: :func:`client_config` for confluent-kafka (librdkafka),
:func:`spark_kafka_options` for Spark's ``kafka`` format (the Java client). The password is read from
the role's file when the config is built (never from a command line or the environment), and the
returned mappings print it masked, so a config that ends up in a log or an exception does not leak
it. A PLAINTEXT cluster gets exactly ``bootstrap.servers``, as before security existed.
"""

from __future__ import annotations

from typing import Any, Mapping

from feed_service.security.secrets import login
from feed_service.settings import Settings

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

#: Keys whose values are credentials (librdkafka's and the Java client's, with Spark's ``kafka.`` prefix).
SECRET_KEYS = frozenset({"sasl.password", "sasl.jaas.config", "kafka.sasl.jaas.config", "ssl.key.password",
                         "kafka.ssl.key.password", "ssl.keystore.password", "kafka.ssl.keystore.password"})
MASK = "[hidden]"


class ClientConfig(dict):
    """A client config that prints its secrets masked (``repr``, ``str``, f-strings, logging); the
    client libraries read the real values. ``|`` with another mapping keeps the masking."""

    def __repr__(self) -> str:
        return repr({k: (MASK if k in SECRET_KEYS else v) for k, v in self.items()})

    __str__ = __repr__

    def __or__(self, other: Mapping[str, Any]) -> "ClientConfig":  # type: ignore[override]
        return ClientConfig({**self, **other})

    def __ror__(self, other: Mapping[str, Any]) -> "ClientConfig":  # type: ignore[override]
        return ClientConfig({**other, **self})

    def copy(self) -> "ClientConfig":
        return ClientConfig(self)


def _role(settings: Settings, default_role: str) -> str:
    """The role a client logs in as: the settings' own, else ``default_role`` (the component's)."""
    return settings.as_role(default_role).role


def client_config(settings: Settings, default_role: str) -> ClientConfig:
    """The librdkafka (confluent-kafka) config that connects to ``settings``' cluster as
    ``settings.role``, else ``default_role``: add the client's own settings with ``|``."""
    config = ClientConfig({"bootstrap.servers": settings.kafka_bootstrap})
    if settings.kafka_security_protocol == "PLAINTEXT":
        return config
    user, password = login(settings.credentials_dir, _role(settings, default_role), "kafka")
    config.update({
        "security.protocol": settings.kafka_security_protocol,
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
    })
    if settings.tls_ca_file:
        config["ssl.ca.location"] = settings.tls_ca_file
    return config


def spark_kafka_options(settings: Settings, default_role: str) -> ClientConfig:
    """The options of Spark's ``kafka`` source or sink that connect as ``settings.role``, else
    ``default_role``. The JAAS option holds the password: Spark's ``spark.sql.redaction.options.regex``
    (set in :mod:`spark_jobs.runtime.session`) hides it in plans, the UI and logs."""
    options = ClientConfig({"kafka.bootstrap.servers": settings.kafka_bootstrap})
    if settings.kafka_security_protocol == "PLAINTEXT":
        return options
    user, password = login(settings.credentials_dir, _role(settings, default_role), "kafka")
    options.update({
        "kafka.security.protocol": settings.kafka_security_protocol,
        "kafka.sasl.mechanism": SCRAM_MECHANISM,
        "kafka.sasl.jaas.config": scram_jaas_config(user, password),
    })
    if settings.tls_ca_file:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = settings.tls_ca_file
    return options


def scram_jaas_config(user: str, password: str) -> str:
    """A ``sasl.jaas.config`` value for the SCRAM login module (JAAS quotes: backslash and quote escaped)."""
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return f"{SCRAM_LOGIN_MODULE} required username={quoted(user)} password={quoted(password)};"
