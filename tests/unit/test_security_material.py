"""The stack's security material: the local CA's certificates, their rotation, secret files and the
settings that carry the security configuration (no service needed)."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

import pytest

from feed_service.errors import CheckpointError, ConfigError
from feed_service.security.pki import LocalCA
from feed_service.security.roles import ROLES, password_file
from feed_service.security.secrets import ensure_credentials, login, read_secret, write_private
from feed_service.settings import Settings
from feed_service.stack.config import StackConfig
from feed_service.stack.stack_secrets import StackSecrets
from spark_jobs.checkpoint import guard_permissions


def _private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_leaf_chains_to_the_ca_and_names_its_addresses(tmp_path: Path) -> None:
    from cryptography import x509

    ca = LocalCA(tmp_path / "tls")
    assert ca.ensure() and not ca.ensure()
    files = ca.issue("kafka-2", ips=("127.0.0.2",), dns=("localhost",))
    leaf, issuer = x509.load_pem_x509_certificates(files.cert.read_bytes())
    root = x509.load_pem_x509_certificate(ca.ca_cert.read_bytes())
    assert issuer == root
    leaf.verify_directly_issued_by(root)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.2"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert _private(files.key) and _private(tmp_path / "tls" / "ca.key")


def test_a_tls_handshake_verifies_against_the_ca(tmp_path: Path) -> None:
    """What every client does: Python's ssl module accepts the server chain for its IP address."""
    ca = LocalCA(tmp_path)
    ca.ensure()
    files = ca.issue("grpc-server", ips=("127.0.0.1",))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files.cert, files.key)
    client = ssl.create_default_context(cafile=str(ca.ca_cert))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    s = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (c, s):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(outgoing.read())
        incoming.write(s_out.read())
    assert c.version() is not None and s.version() is not None


def test_rotation_gives_new_keys_and_serials_under_the_same_names(tmp_path: Path) -> None:
    ca = LocalCA(tmp_path)
    ca.ensure()
    write_private(tmp_path / "p12.password", "secret\n")
    ca.issue("kafka-1", ips=("127.0.0.1",), p12_password_file=tmp_path / "p12.password")
    ca.issue("grpc-client", server=False)
    before = {name: (ca.serial(name), ca.files(name).key.read_bytes()) for name in ("kafka-1", "grpc-client")}
    assert sorted(ca.rotate()) == ["grpc-client", "kafka-1"]
    for name, (serial, key) in before.items():
        assert ca.serial(name) != serial and ca.files(name).key.read_bytes() != key
    from cryptography.hazmat.primitives.serialization import pkcs12

    bundle = pkcs12.load_pkcs12(ca.files("kafka-1").p12.read_bytes(), b"secret")
    assert bundle.cert.certificate.serial_number == ca.serial("kafka-1")


def test_the_stack_prepares_everything_once(tmp_path: Path) -> None:
    config = StackConfig.with_free_ports(tmp_path, topology="cluster")
    secrets = StackSecrets(config)
    assert config.secure and secrets.prepare() and not secrets.prepare()
    names = {i.name for i in secrets.ca.issued()}
    assert {"kafka-1", "kafka-3", "cassandra-2", "grpc-server", "grpc-client"} <= names
    for role in ROLES:
        assert _private(password_file(secrets.credentials_dir, role, "kafka"))
    env = config.environment()
    assert env["FEED_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL" and env["FEED_CASSANDRA_TLS"] == "1"
    settings = Settings.from_env(env)
    assert settings.secured and settings.credentials_dir == str(secrets.credentials_dir)
    assert not any(read_secret(password_file(secrets.credentials_dir, r, "kafka")) in v
                   for r in ROLES for v in env.values()), "a password in the environment"


def test_the_single_node_stack_stays_plaintext(tmp_path: Path) -> None:
    config = StackConfig.with_free_ports(tmp_path)
    assert not config.secure and not config.settings().secured
    assert "FEED_KAFKA_SECURITY_PROTOCOL" not in config.environment() or \
        config.environment()["FEED_KAFKA_SECURITY_PROTOCOL"] == "PLAINTEXT"


def test_a_login_needs_a_role_and_names_the_file_never_the_secret(tmp_path: Path) -> None:
    ensure_credentials(tmp_path, ("stream",))
    user, password = login(str(tmp_path), "stream", "cassandra")
    assert user == "feed_stream" and len(password) >= 32
    with pytest.raises(ConfigError, match="no role"):
        login(str(tmp_path), "", "kafka")
    with pytest.raises(ConfigError, match="server/kafka.password"):
        login(str(tmp_path), "server", "kafka")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        read_secret(empty)


def test_settings_carry_the_security_configuration_to_child_processes() -> None:
    settings = Settings(kafka_security_protocol="SASL_SSL", cassandra_tls=True, cassandra_auth=True,
                        tls_ca_file="/x/ca.crt", credentials_dir="/x/credentials", role="server")
    assert Settings.from_env(settings.to_env()) == settings
    assert settings.as_role("stream").role == "server", "an explicit role is kept"
    assert Settings().as_role("stream").role == "stream"
    with pytest.raises(ConfigError, match="kafka security protocol"):
        Settings(kafka_security_protocol="SSL_MAYBE")
    with pytest.raises(ConfigError, match="unknown role"):
        Settings(role="root")


def test_a_checkpoint_is_created_private_and_a_world_writable_one_refused(tmp_path: Path) -> None:
    fresh = tmp_path / "ckpt"
    guard_permissions(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(CheckpointError, match="writable by every user"):
        guard_permissions(open_dir)


def test_a_plaintext_stacks_data_is_not_secured_in_place(tmp_path: Path) -> None:
    """Brokers get their logins at format time and Cassandra its roles at first start: turning an existing
    plaintext stack secure would leave them without; `stack up` says so before touching anything."""
    from dataclasses import replace

    from feed_service.errors import StackError
    from feed_service.stack.local_stack import LocalStack

    plain = StackConfig.with_free_ports(tmp_path)
    plain.save()
    (tmp_path / "kafka" / "data").mkdir(parents=True)
    with pytest.raises(StackError, match="was made plaintext"):
        LocalStack(replace(plain, secure=True)).up()
    assert StackConfig.load(tmp_path) == plain
