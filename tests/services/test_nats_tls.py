"""Production's NATS: TLS, and each service known by its client certificate (nats-server's
`verify_and_map`, users from `muster nats-config --auth tls`), reached with the services'
`--nats-tls-ca/--nats-tls-cert/--nats-tls-key`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from nats_process import NatsServer

from muster.bus import BusConfig, Retry, connect, new_event
from muster.bus.natsconf import authorization, cert_subject, server_config, tls_block
from muster.bus.permissions import ADMIN, Deployment, users
from muster.bus.service import parse_service
from muster.bus.setup import setup_nats
from muster.contracts.v1 import events_pb2 as pb

DEPLOYMENT = Deployment(clusters=("local",))

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the certificates"),
]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _issue(ca: Path, name: str, subject: str, *extensions: str) -> tuple[Path, Path]:
    """A key and a certificate for `subject`, signed by the CA in `ca`."""
    key, csr, cert = ca / f"{name}.key", ca / f"{name}.csr", ca / f"{name}.crt"
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
             *extensions, "-keyout", str(key), "-out", str(csr))  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca / "ca.crt"), "-CAkey",
             str(ca / "ca.key"), "-CAcreateserial", "-days", "1", "-copy_extensions", "copy",
             "-out", str(cert))  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ca = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
             "/CN=muster test CA", "-keyout", str(ca / "ca.key"),
             "-out", str(ca / "ca.crt"))  # fmt: skip
    _issue(ca, "server", "/CN=nats", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    for user in (ADMIN, "binder-local", "gateway"):
        _issue(ca, user, "/" + cert_subject(user))
    _issue(ca, "stranger", "/CN=someone-else")
    return ca


@pytest.fixture
def server(pki: Path, tmp_path: Path) -> Iterator[NatsServer]:
    tls = tls_block(
        cert_file=str(pki / "server.crt"),
        key_file=str(pki / "server.key"),
        ca_file=str(pki / "ca.crt"),
    )
    block = tls + authorization(users(DEPLOYMENT), auth="tls")
    config = server_config(port=-1, store_dir=str(tmp_path / "js"), authorization_block=block)
    nats = NatsServer(tmp_path, config=config)
    nats.start()
    yield nats
    nats.stop()


def _as(server: NatsServer, pki: Path, user: str, **changes: object) -> BusConfig:
    config = BusConfig(
        url=f"tls://127.0.0.1:{server.port}",
        tls_ca_file=str(pki / "ca.crt"),
        tls_cert_file=str(pki / f"{user}.crt"),
        tls_key_file=str(pki / f"{user}.key"),
        inbox_prefix=f"_INBOX.{user}",
        connect_timeout_s=3.0,
        publish_timeout_s=2.0,
    )
    return msgspec.structs.replace(config, **changes)


def _event(field: str, payload: msgspec.Struct | object) -> pb.Envelope:
    return new_event(field, payload, cluster="local", workload="ml/train", source="test")  # type: ignore[arg-type]


async def test_each_service_is_the_user_its_certificate_names(
    server: NatsServer, pki: Path
) -> None:
    admin = await connect(_as(server, pki, ADMIN))
    try:
        await setup_nats(admin.js, deployment=DEPLOYMENT)
    finally:
        await admin.close()
    binder = await connect(_as(server, pki, "binder-local"))
    try:
        await binder.ensure_streams()  # it may read them; nothing differs, so nothing is written
        assert await binder.publish(_event("bound", pb.PodsBound())) > 0
        with pytest.raises(Retry):  # the server drops it: no PubAck ever comes
            await binder.publish(_event("admitted", pb.WorkloadAdmitted()))
    finally:
        await binder.close()
    assert 'user:CN=muster-binder-local" - Publish Violation' in server.log_path.read_text()


async def test_a_certificate_of_no_muster_user_or_no_certificate_is_refused(
    server: NatsServer, pki: Path
) -> None:
    with pytest.raises(ConnectionError):
        await connect(_as(server, pki, "stranger", connect_timeout_s=1.0))
    with pytest.raises(ConnectionError):
        await connect(
            _as(
                server,
                pki,
                "stranger",
                tls_cert_file=None,
                tls_key_file=None,
                connect_timeout_s=1.0,
            )
        )


def test_services_take_the_client_certificate_flags(pki: Path) -> None:
    config, _ = parse_service(
        [
            "--nats", "tls://nats:4222", "--cluster", "east",
            "--nats-tls-ca", str(pki / "ca.crt"),
            "--nats-tls-cert", str(pki / "binder-local.crt"),
            "--nats-tls-key", str(pki / "binder-local.key"),
        ],
        name="binder",
        description="",
        make=lambda args, config: None,
    )  # fmt: skip
    assert config.bus.tls_cert_file == str(pki / "binder-local.crt")
    assert config.bus.tls_key_file == str(pki / "binder-local.key")
    assert config.bus.inbox_prefix == "_INBOX.binder-east"
    context = config.bus.tls_context()
    assert context is not None
    with pytest.raises(SystemExit):  # a certificate without its key is a usage error
        parse_service(
            ["--nats-tls-cert", str(pki / "binder-local.crt")],
            name="binder",
            description="",
            make=lambda args, config: None,
        )
