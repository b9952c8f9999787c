"""TLS for the gateway's gRPC port: its certificate and key (reloaded when the files change),
and, with a client CA, mutual TLS where the client certificate names the caller.

As in Kubernetes, the certificate's Common Name is the user and each Organization a group.
gRPC hands the verified subject over as an RFC 2253 string ("O=team-a,CN=alice", special
characters escaped with a backslash, bytes over 0x7f as \\XX), which `subject_caller` parses.

gRPC can only require a client certificate or not ask for one, so with `--client-ca` every
connection must present a certificate the CA signed; the handshake refuses the others before
any request is read.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping, Sequence

import grpc
import msgspec

from muster.gateway.permissions import Caller
from muster.gateway.reloading import FileError, Version, read_file, version_of

log = logging.getLogger(__name__)

_ESCAPABLE = frozenset(',+"\\<>;= #')


class TlsFiles(msgspec.Struct, frozen=True, kw_only=True):
    """The gateway's TLS files; `client_ca` set: mutual TLS."""

    cert: str
    key: str
    client_ca: str = ""

    def paths(self) -> tuple[str, ...]:
        return tuple(p for p in (self.cert, self.key, self.client_ca) if p)


def split_subject(subject: str) -> list[tuple[str, str]]:
    """The (attribute, value) pairs of an RFC 2253 distinguished name, in the order written.

    Raises ValueError for a malformed name (a dangling escape, a pair without "=").
    """
    pairs: list[tuple[str, str]] = []
    text = subject
    i = 0
    while i < len(text):
        key_end = text.find("=", i)
        if key_end < 0:
            raise ValueError(f"attribute without a value at offset {i}")
        key = text[i:key_end].strip()
        value, i = _value(text, key_end + 1)
        pairs.append((key, value))
    return pairs


def _value(text: str, i: int) -> tuple[str, int]:
    """The unescaped value starting at `i`, and the offset after its separator."""
    out = bytearray()
    while i < len(text):
        c = text[i]
        if c in ",+":
            return out.decode("utf-8", errors="replace"), i + 1
        if c == "\\":
            nxt = text[i + 1 : i + 3]
            if len(nxt) == 2 and all(h in "0123456789abcdefABCDEF" for h in nxt):
                out.append(int(nxt, 16))
                i += 3
                continue
            if nxt[:1] and nxt[0] in _ESCAPABLE:
                out += nxt[0].encode()
                i += 2
                continue
            raise ValueError(f"bad escape at offset {i}")
        out += c.encode()
        i += 1
    return out.decode("utf-8", errors="replace"), i


def subject_caller(auth_context: Mapping[str, Sequence[bytes]]) -> Caller | None:
    """The caller a verified client certificate names: user from CN, groups from each O.

    None when the connection has no client certificate or its subject has no CN.
    """
    subjects = auth_context.get("x509_subject") or ()
    if not subjects:
        return None
    try:
        pairs = split_subject(subjects[0].decode("utf-8", errors="replace"))
    except ValueError as exc:
        log.warning("client certificate subject not understood: %s", exc)
        return None
    names = [v for k, v in pairs if k.upper() == "CN"]
    if not names or not names[0]:
        return None
    # RFC 2253 writes the most significant attribute last: reverse to the certificate's order.
    groups = tuple(v for k, v in reversed(pairs) if k.upper() == "O" and v)
    return Caller(user=names[0], groups=groups, via="certificate")


class ServerCertificates:
    """gRPC server credentials whose certificate, key and client CA are read again when any of
    the files changes (checked at each new connection: gRPC asks `_fetch` then)."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._versions = self._stat()
        self.reloads = 0
        initial = self._configuration()  # a bad file stops the gateway at start

        self.credentials = grpc.dynamic_ssl_server_credentials(
            initial,
            self._fetch,
            require_client_authentication=bool(files.client_ca),
        )

    def _stat(self) -> tuple[Version | None, ...]:
        return tuple(version_of(p) for p in self.files.paths())

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        key, cert = read_file(self.files.key), read_file(self.files.cert)
        if b"PRIVATE KEY" not in key:
            raise FileError(f"{self.files.key}: not a PEM private key")
        if b"CERTIFICATE" not in cert:
            raise FileError(f"{self.files.cert}: not a PEM certificate")
        ca = read_file(self.files.client_ca) if self.files.client_ca else None
        if ca is not None and b"CERTIFICATE" not in ca:
            raise FileError(f"{self.files.client_ca}: not a PEM certificate")
        try:  # a key that does not match the certificate would fail every handshake
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.files.cert, self.files.key)
        except (ssl.SSLError, OSError) as exc:
            raise FileError(f"{self.files.cert}, {self.files.key}: unusable: {exc}") from None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's certificate fetcher: a new configuration when a file changed, else None."""
        versions = self._stat()
        if versions == self._versions or None in versions:
            return None  # unchanged, or mid-rotation (a file missing): keep serving the old one
        self._versions = versions
        try:
            configuration = self._configuration()
        except FileError as exc:
            log.error("keeping the last good TLS certificate: %s", exc)
            return None
        self.reloads += 1
        log.info("reloaded the TLS certificate %s", self.files.cert)
        return configuration
