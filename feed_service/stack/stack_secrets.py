"""The secured stack's secrets: its CA and certificates, the roles' passwords, Spark's shared secret.

All of it lives under ``<stack folder>/secrets`` (``0700``, files ``0600``), made once by
``feedctl stack up`` on a secured stack and kept across restarts; ``feedctl stack rotate-certs``
issues the certificates again from the same CA. Layout:

    secrets/tls/ca.crt                     the CA every client trusts (FEED_TLS_CA_FILE)
    secrets/tls/kafka-N.{crt,key,p12}      broker N (127.0.0.N): TLS listeners, inter-broker mTLS
    secrets/tls/cassandra-N.{crt,key}      Cassandra node N: client and internode TLS
    secrets/tls/grpc-server.{crt,key}      the read service (FEED_GRPC_TLS_CERT_FILE / _KEY_FILE)
    secrets/tls/grpc-client.{crt,key}      a service client's certificate for mutual TLS
    secrets/keystore.password              the PKCS#12 keystores' password (JVMs only)
    secrets/credentials/<role>/{kafka,cassandra}.password   one folder per role (FEED_CREDENTIALS_DIR)
    secrets/spark/auth.secret              spark.authenticate's shared secret (cluster topology)
"""

from __future__ import annotations

from pathlib import Path

from feed_service.security.pki import LocalCA
from feed_service.security.roles import ROLES
from feed_service.security.secrets import ensure_credentials, new_password, write_private
from feed_service.stack.config import StackConfig

#: DNS names every server certificate carries besides its loopback address.
LOCAL_NAMES = ("localhost",)


class StackSecrets:
    """Paths of one stack's secrets, and :meth:`prepare` to make whatever is missing."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.folder = config.data_dir / "secrets"
        self.ca = LocalCA(self.folder / "tls")

    @property
    def ca_file(self) -> Path:
        return self.ca.ca_cert

    @property
    def credentials_dir(self) -> Path:
        return self.folder / "credentials"

    @property
    def keystore_password_file(self) -> Path:
        return self.folder / "keystore.password"

    @property
    def spark_secret_file(self) -> Path:
        return self.folder / "spark" / "auth.secret"

    def node_name(self, service: str, index: int) -> str:
        """The certificate name of node ``index`` of ``service`` (``kafka-1``, ``cassandra-2``...)."""
        return f"{service}-{index + 1}"

    def prepare(self) -> bool:
        """Make the CA, every node's and client's certificate, the roles' passwords and Spark's secret,
        keeping whatever exists. True when anything was made."""
        made = self.ca.ensure()
        for path in (self.keystore_password_file, self.spark_secret_file):
            if not path.exists():
                write_private(path, new_password() + "\n")
                made = True
        made |= ensure_credentials(self.credentials_dir, ROLES)
        issued = {i.name for i in self.ca.issued()}
        hosts = self.config.hosts
        wanted = []
        for i, host in enumerate(hosts):
            wanted.append((self.node_name("kafka", i), (host,), str(self.keystore_password_file)))
            wanted.append((self.node_name("cassandra", i), (host,), ""))
        wanted.append(("grpc-server", tuple(hosts), ""))
        for name, ips, p12 in wanted:
            if name not in issued:
                self.ca.issue(name, ips=ips, dns=LOCAL_NAMES, server=True, client=True, p12_password_file=p12)
                made = True
        if "grpc-client" not in issued:
            self.ca.issue("grpc-client", server=False, client=True)
            made = True
        return made

    def environment(self) -> dict[str, str]:
        """The FEED_* variables that make clients use this stack's TLS and logins (docs/security.md)."""
        server, client = self.ca.files("grpc-server"), self.ca.files("grpc-client")
        return {
            "FEED_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "FEED_CASSANDRA_TLS": "1",
            "FEED_CASSANDRA_AUTH": "1",
            "FEED_TLS_CA_FILE": str(self.ca_file),
            "FEED_CREDENTIALS_DIR": str(self.credentials_dir),
            "FEED_GRPC_TLS_CERT_FILE": str(server.cert),
            "FEED_GRPC_TLS_KEY_FILE": str(server.key),
            "FEED_GRPC_CA_FILE": str(self.ca_file),
            "FEED_GRPC_CLIENT_CERT_FILE": str(client.cert),
            "FEED_GRPC_CLIENT_KEY_FILE": str(client.key),
            "FEED_SPARK_AUTH_SECRET_FILE": str(self.spark_secret_file),
        }
