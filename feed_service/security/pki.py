"""A local certificate authority in a folder: the stack's CA, node and client certificates.

A secured stack (docs/security.md) needs certificates whose names match how each node is reached
(127.0.0.1-3 on loopback) and a CA every client trusts. :class:`LocalCA` makes them with the
``cryptography`` package: an EC P-256 CA valid for ten years, leaf certificates valid for
:data:`LEAF_DAYS` with the node's addresses as subject alternative names, and keeps an inventory of
what it issued so that :meth:`LocalCA.rotate` can issue all of them again (new keys, new serials,
same names) without anyone re-listing the nodes. Private keys are written ``0600`` in a ``0700``
folder; nothing here logs a key or a password.

Files per issued name ``N``: ``N.crt`` (PEM certificate), ``N.key`` (PEM PKCS#8 key, unencrypted, for
Python clients, gRPC and Cassandra's PEM SSL context) and, on request, ``N.p12`` (PKCS#12 with a
password, for Kafka's JVM keystore: Kafka's PEM keystores need an encrypted key in a format Java reads).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from feed_service.security.secrets import write_private

CA_DAYS = 3650
LEAF_DAYS = 90
"""Leaf lifetime: short enough that rotation is a routine (``feedctl stack rotate-certs``), long enough
that a developer's stack does not expire under them."""


@dataclass(frozen=True, slots=True)
class Issued:
    """What a leaf certificate was issued for: enough to issue it again on rotation."""

    name: str
    ips: tuple[str, ...] = ()
    dns: tuple[str, ...] = ()
    server: bool = True
    client: bool = True
    p12_password_file: str = ""
    """Where the PKCS#12 keystore's password is (a secret file), "" for no keystore."""


@dataclass(frozen=True, slots=True)
class CertFiles:
    """The files of one issued certificate."""

    cert: Path
    key: Path
    p12: Path | None = None


class LocalCA:
    """The CA kept in ``folder`` (``ca.crt`` public, ``ca.key`` private) and the leaves it issued."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @property
    def ca_cert(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def _ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def _inventory(self) -> Path:
        return self.folder / "issued.json"

    def files(self, name: str) -> CertFiles:
        p12 = self.folder / f"{name}.p12"
        return CertFiles(self.folder / f"{name}.crt", self.folder / f"{name}.key", p12 if p12.exists() else None)

    def ensure(self) -> bool:
        """Create the CA unless it exists; True when it was created."""
        if self.ca_cert.exists() and self._ca_key.exists():
            return False
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "feed-service"),
                          x509.NameAttribute(NameOID.COMMON_NAME, "feed-service local CA")])
        now = _now()
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=CA_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        write_private(self._ca_key, _key_pem(key))
        self.ca_cert.write_bytes(_cert_pem(cert))
        return True

    def issue(self, name: str, *, ips: Sequence[str] = (), dns: Sequence[str] = (), server: bool = True,
              client: bool = True, p12_password_file: str | Path = "") -> CertFiles:
        """Issue (or issue again) the leaf ``name``: CN ``name``, the given addresses and DNS names as
        SANs, server and/or client use; with ``p12_password_file`` also a PKCS#12 keystore locked with
        that file's password. Recorded for :meth:`rotate`."""
        request = Issued(name, tuple(ips), tuple(dns), server, client, str(p12_password_file))
        files = self._issue(request)
        inventory = {i.name: i for i in self.issued()}
        inventory[name] = request
        self._inventory.write_text(json.dumps([_as_dict(i) for i in inventory.values()], indent=2))
        return files

    def issued(self) -> list[Issued]:
        """Every leaf issued so far (the inventory)."""
        try:
            rows = json.loads(self._inventory.read_text())
        except FileNotFoundError:
            return []
        return [Issued(r["name"], tuple(r["ips"]), tuple(r["dns"]), r["server"], r["client"],
                       r.get("p12_password_file", "")) for r in rows]

    def rotate(self, names: Iterable[str] | None = None) -> list[str]:
        """Issue every leaf of the inventory (or only ``names``) again: new keys, new serials, the same
        names and uses, signed by the same CA. Returns the names rotated."""
        wanted = set(names) if names is not None else None
        done = []
        for request in self.issued():
            if wanted is None or request.name in wanted:
                self._issue(request)
                done.append(request.name)
        return done

    def serial(self, name: str) -> int:
        """The serial number of the leaf ``name`` as it is on disk (tests: a rotation changed it)."""
        from cryptography import x509

        return x509.load_pem_x509_certificate(self.files(name).cert.read_bytes()).serial_number

    def _issue(self, request: Issued) -> CertFiles:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import pkcs12
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        if not self.ca_cert.exists():
            raise FileNotFoundError(f"no CA in {self.folder}: LocalCA.ensure() first")
        ca_key = serialization.load_pem_private_key(self._ca_key.read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in request.ips]
        sans += [x509.DNSName(d) for d in request.dns]
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if request.server else []) + \
                 ([ExtendedKeyUsageOID.CLIENT_AUTH] if request.client else [])
        now = _now()
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "feed-service"),
                                            x509.NameAttribute(NameOID.COMMON_NAME, request.name)]))
                   .issuer_name(ca_cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=LEAF_DAYS))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        files = CertFiles(self.folder / f"{request.name}.crt", self.folder / f"{request.name}.key")
        write_private(files.key, _key_pem(key))
        files.cert.write_bytes(_cert_pem(cert) + self.ca_cert.read_bytes())  # leaf, then its issuer: a chain
        if request.p12_password_file:
            from feed_service.security.secrets import read_secret

            password = read_secret(request.p12_password_file).encode()
            blob = pkcs12.serialize_key_and_certificates(request.name.encode(), key, cert, [ca_cert],
                                                         serialization.BestAvailableEncryption(password))
            p12 = self.folder / f"{request.name}.p12"
            write_private(p12, blob)
            files = CertFiles(files.cert, files.key, p12)
        return files


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _key_pem(key: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,  # type: ignore[attr-defined]
                             serialization.NoEncryption())


def _cert_pem(cert: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)  # type: ignore[attr-defined]


def _as_dict(issued: Issued) -> dict[str, object]:
    return {"name": issued.name, "ips": list(issued.ips), "dns": list(issued.dns), "server": issued.server,
            "client": issued.client, "p12_password_file": issued.p12_password_file}
