"""How Kafka clients connect (feed_service/kafka/client_config.py) and what a secured broker is told
(feed_service/stack/kafka_node.py): plaintext stays exactly as before, a secured cluster gets TLS and
the role's SCRAM login, and the password never shows in what may be printed or logged."""

from __future__ import annotations

import logging
import re
import stat
from pathlib import Path

import pytest

from feed_service.errors import ConfigError
from feed_service.kafka.client_config import ClientConfig, client_config, spark_kafka_options
from feed_service.security.roles import ROLES, password_file
from feed_service.security.secrets import ensure_credentials, read_secret
from feed_service.settings import Settings
from spark_jobs.runtime.session import OPTIONS_REDACTION_REGEX, session_conf

PLAIN = Settings(kafka_bootstrap="127.0.0.1:9092,127.0.0.2:9092")


@pytest.fixture()
def secured(tmp_path: Path) -> Settings:
    ensure_credentials(tmp_path / "credentials", ROLES, ("kafka",))
    return PLAIN.replace(kafka_security_protocol="SASL_SSL", tls_ca_file="/ca.crt",
                         credentials_dir=str(tmp_path / "credentials"))


def _password(settings: Settings, role: str) -> str:
    return read_secret(password_file(settings.credentials_dir, role, "kafka"))


def test_plaintext_gives_exactly_the_bootstrap_servers() -> None:
    assert client_config(PLAIN, "producer") == {"bootstrap.servers": "127.0.0.1:9092,127.0.0.2:9092"}
    assert spark_kafka_options(PLAIN, "stream") == {"kafka.bootstrap.servers": "127.0.0.1:9092,127.0.0.2:9092"}
    # no role or credentials are needed on a plaintext cluster
    assert client_config(PLAIN.replace(credentials_dir="/nowhere"), "admin") == {"bootstrap.servers": PLAIN.kafka_bootstrap}


def test_sasl_ssl_logs_in_as_the_default_role_unless_the_settings_name_one(secured: Settings) -> None:
    config = client_config(secured, "producer")
    assert config == {"bootstrap.servers": secured.kafka_bootstrap, "security.protocol": "SASL_SSL",
                      "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "feed-producer",
                      "sasl.password": _password(secured, "producer"), "ssl.ca.location": "/ca.crt"}
    explicit = client_config(secured.as_role("server"), "producer")
    assert (explicit["sasl.username"], explicit["sasl.password"]) == ("feed-server", _password(secured, "server"))
    assert "ssl.ca.location" not in client_config(secured.replace(tls_ca_file=""), "producer")  # the system's CAs


def test_spark_options_carry_a_scram_jaas_login_and_a_pem_truststore(secured: Settings) -> None:
    options = spark_kafka_options(secured, "backfill")
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="feed-backfill" password="{_password(secured, "backfill")}";')
    assert (options["kafka.ssl.truststore.type"], options["kafka.ssl.truststore.location"]) == ("PEM", "/ca.crt")


def test_no_password_in_repr_str_or_logs(secured: Settings, caplog: pytest.LogCaptureFixture) -> None:
    for role in ROLES:
        password = _password(secured, role)
        for config in (client_config(secured, role), spark_kafka_options(secured, role),
                       client_config(secured, role) | {"group.id": "g"}, {"acks": "all"} | client_config(secured, role),
                       client_config(secured, role).copy()):
            assert isinstance(config, ClientConfig)
            with caplog.at_level(logging.INFO):
                logging.getLogger("test").info("config %s %r", config, config)
            shown = [repr(config), str(config), f"{config}", caplog.text]
            assert all(password not in text for text in shown), role
            assert "[hidden]" in repr(config)
            caplog.clear()


def test_a_missing_role_or_password_is_a_clear_error(secured: Settings, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="FEED_CREDENTIALS_DIR"):
        client_config(secured.replace(credentials_dir=""), "producer")
    with pytest.raises(ConfigError, match="secret file .*kafka.password"):
        client_config(secured.replace(credentials_dir=str(tmp_path / "empty")), "producer")


def test_spark_redacts_the_jaas_option_and_keeps_its_url_default() -> None:
    conf = session_conf(jars=[], code_zip=None, submitted=False, env={})
    regex = re.compile(conf["spark.sql.redaction.options.regex"].replace("(?i)", ""), re.IGNORECASE)
    assert conf["spark.sql.redaction.options.regex"] == OPTIONS_REDACTION_REGEX
    assert regex.search("kafka.sasl.jaas.config") and regex.search("url") and regex.search("JDBC_URL")
    assert not regex.search("kafka.bootstrap.servers") and not regex.search("subscribe")


def test_a_secured_broker_config_is_private_and_names_its_listeners(tmp_path: Path) -> None:
    from feed_service.stack.config import StackConfig
    from feed_service.stack.kafka_node import KafkaNode
    from feed_service.stack.stack_secrets import StackSecrets

    config = StackConfig.with_free_ports(tmp_path / "stack", secure=True)
    secrets = StackSecrets(config)
    secrets.prepare()
    node = KafkaNode(config, tmp_path / "lib")
    node._render()
    assert stat.S_IMODE(node.properties_file.stat().st_mode) == 0o600
    props = dict(line.split("=", 1) for line in node.properties_file.read_text().splitlines())
    assert props["listeners"] == f"SASL_SSL://{node.bootstrap},CONTROLLER://127.0.0.1:{config.kafka_controller_port}"
    assert props["listener.security.protocol.map"] == "CONTROLLER:SSL,SASL_SSL:SASL_SSL"
    assert props["inter.broker.listener.name"] == "SASL_SSL"
    assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert 'username="feed-admin"' in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert props["super.users"] == "User:kafka-1;User:feed-admin"
    assert props["ssl.keystore.location"].endswith("tls/kafka-1.p12")
    assert (props["ssl.truststore.type"], props["ssl.truststore.location"]) == ("PEM", str(secrets.ca_file))
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
