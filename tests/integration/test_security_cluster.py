"""Everything on, on the secured cluster stack (docs/security.md): the read service over mutual TLS
against the real ring, refusing what it must; and certificates rotated under a running broker.

The Kafka and Cassandra refusals are in test_security_kafka.py and test_security_cassandra.py; the
stream and the read server surviving failures with all of it on, and the backfill with every link
secured rebuilding the reference (over the history the stream ran on: a backfill costs a minute of
Spark on the cluster, a second history would add nothing), are test_cluster.py.
"""

from __future__ import annotations

import ssl
import time
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from feed_service.api import timeline_pb2 as pb
from feed_service.api import timeline_pb2_grpc
from feed_service.ops.provision import provision
from feed_service.security.pki import LocalCA
from feed_service.server.client_channel import ClientTLS, channel_for
from feed_service.server.config import ServerConfig
from feed_service.server.testing import TEST_SECRET, ServerThread
from feed_service.settings import Settings
from feed_service.stack.config import StackConfig
from feed_service.stack.local_stack import LocalStack
from feed_service.stack.stack_secrets import StackSecrets

from tests.support.pipeline import publish


@pytest.fixture(scope="module")
def secured(secure_stack_config: StackConfig) -> Settings:
    """Own topics and keyspace on the secured stack, provisioned as the admin (ACLs and grants)."""
    unique = uuid.uuid4().hex[:8]
    settings = secure_stack_config.settings(keyspace=f"feed_sec_{unique}").with_topic_suffix(f".{unique}")
    assert settings.secured
    provision(settings)
    return settings


def _health(channel: grpc.Channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status


def _serving(channel: grpc.Channel, timeout: float = 90.0) -> bool:
    """Whether the server reports SERVING within ``timeout`` (it connects to Cassandra in the background)."""
    deadline = time.monotonic() + timeout
    while _health(channel) != health_pb2.HealthCheckResponse.SERVING:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def test_the_read_service_on_the_ring_takes_only_its_own_cas_clients(secure_stack_config: StackConfig,
                                                                     secured: Settings, tmp_path: Path) -> None:
    """Mutual TLS against the real Cassandra ring (the server logs in as its read-only role): the stack's
    client certificate reads; a plaintext client, a client without a certificate and one whose certificate
    another CA signed are all refused before any RPC runs."""
    tls = StackSecrets(secure_stack_config)
    cert, client = tls.ca.files("grpc-server"), tls.ca.files("grpc-client")
    config = ServerConfig(auth_secret=TEST_SECRET, metrics_port=None, settings=secured, tls_cert_file=str(cert.cert),
                          tls_key_file=str(cert.key), client_ca_file=str(tls.ca_file))
    good = ClientTLS(str(tls.ca_file), str(client.cert), str(client.key))
    other = LocalCA(tmp_path / "other-ca")
    other.ensure()
    stranger = other.issue("grpc-client", server=False)
    with ServerThread(config, client=good) as server:
        assert _serving(server.channel())
        reply = server.stub().GetHomeTimeline(pb.GetHomeTimelineRequest(user_id="nobody", page_size=10),
                                              metadata=server.auth("nobody"), timeout=10)
        assert list(reply.entries) == []
        refused = {
            "plaintext": channel_for(server.address, ClientTLS()),
            "no certificate": channel_for(server.address, ClientTLS(str(tls.ca_file))),
            "another CA's certificate": channel_for(server.address, ClientTLS(str(tls.ca_file), str(stranger.cert),
                                                                                 str(stranger.key))),
        }
        for what, channel in refused.items():
            with channel, pytest.raises(grpc.RpcError) as caught:
                timeline_pb2_grpc.TimelineServiceStub(channel).GetHomeTimeline(
                    pb.GetHomeTimelineRequest(user_id="nobody", page_size=10), metadata=server.auth("nobody"),
                    timeout=10)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, what
        # the server still serves its own clients after the refusals
        assert _health(server.channel()) == health_pb2.HealthCheckResponse.SERVING


def test_rotated_certificates_are_served_after_a_rolling_restart(secure_stack_config: StackConfig,
                                                                 secured: Settings) -> None:
    """What ``feedctl stack rotate-certs`` does, for one broker: its certificate issued again, the broker
    restarted; it then presents the new serial, signed by the same CA, and clients carry on."""
    stack = LocalStack(secure_stack_config)
    tls = StackSecrets(secure_stack_config)
    node = stack.kafka_nodes[-1]
    name = tls.node_name("kafka", len(stack.kafka_nodes) - 1)
    before = tls.ca.serial(name)
    assert _served_serial(node.host, secure_stack_config.kafka_port, tls.ca_file) == before
    assert tls.ca.rotate([name]) == [name]
    after = tls.ca.serial(name)
    assert after != before
    # restart just that broker (the rotation command restarts every node the same way, one at a time)
    node.process.stop()
    node.start()
    stack.wait_healthy(node)
    assert _served_serial(node.host, secure_stack_config.kafka_port, tls.ca_file) == after
    publish(secured, [
        {"type": "follow", "op": "follow", "follower_id": "r1", "followee_id": "r2", "version": 1}])


def _served_serial(host: str, port: int, ca_file: Path) -> int:
    """The serial number of the certificate a TLS listener presents (verified against ``ca_file``)."""
    import socket

    from cryptography import x509

    context = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection((host, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as conn:
        der = conn.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number
