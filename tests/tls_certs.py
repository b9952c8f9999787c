"""Throwaway TLS certificates made at test time (never committed): a CA, a server certificate
for 127.0.0.1/localhost, and client certificates whose CN and O name a user and groups."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import msgspec
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_LIFETIME = datetime.timedelta(hours=2)


class Pem(msgspec.Struct, frozen=True):
    key: bytes
    cert: bytes

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Write `<name>.key` and `<name>.crt` into `directory`; their paths."""
        key, cert = directory / f"{name}.key", directory / f"{name}.crt"
        key.write_bytes(self.key)
        cert.write_bytes(self.cert)
        return key, cert


class Authority:
    """A CA that signs server and client certificates."""

    def __init__(self, name: str = "muster test CA") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            _builder(self._name, self._key.public_key())
            .issuer_name(self._name)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def server(self, name: str = "gateway") -> Pem:
        """A server certificate valid for localhost and 127.0.0.1."""
        san = x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        )
        return self._issue([x509.NameAttribute(NameOID.COMMON_NAME, name)], san)

    def client(self, user: str, *groups: str) -> Pem:
        """A client certificate: CN `user`, one O per group."""
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        return self._issue(attributes, None)

    def _issue(
        self, attributes: list[x509.NameAttribute[str]], san: x509.SubjectAlternativeName | None
    ) -> Pem:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _builder(x509.Name(attributes), key.public_key()).issuer_name(self._name)
        if san is not None:
            builder = builder.add_extension(san, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Pem(
            key=key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            cert=cert.public_bytes(serialization.Encoding.PEM),
        )


def _builder(subject: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _LIFETIME)
    )
