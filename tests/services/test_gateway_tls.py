"""TLS and mutual TLS on the gateway's gRPC port, certificate reload, and the client commands'
TLS and token options. Certificates are made at test time (tls_certs)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc
import grpc.aio
import pytest
from bus_helpers import EventLog
from gateway_helpers import running_gateway
from security_helpers import as_user, manifest, token_of, write_security_files
from tls_certs import Authority

from muster.bus import Bus
from muster.cli.main import main
from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.gateway.auth_certs import TlsFiles
from muster.gateway.auth_config import SecurityConfig

pytestmark = pytest.mark.timeout(60)


def server_files(ca: Authority, directory: Path, *, client_ca: Authority | None = None) -> TlsFiles:
    key, cert = ca.server().write(directory, "server")
    ca_file = ""
    if client_ca is not None:
        ca_file = str(directory / "client-ca.crt")
        Path(ca_file).write_bytes(client_ca.pem)
    return TlsFiles(cert=str(cert), key=str(key), client_ca=ca_file)


def trusting(ca: Authority, client: tuple[bytes, bytes] | None = None) -> grpc.ChannelCredentials:
    key, cert = client if client is not None else (None, None)
    return grpc.ssl_channel_credentials(ca.pem, private_key=key, certificate_chain=cert)


async def status_of(address: str, credentials: grpc.ChannelCredentials | None, **kw: object) -> str:
    """The code of one QueueStatus call over a new channel ("OK" when it answered)."""
    channel = (
        grpc.aio.secure_channel(address, credentials)
        if credentials is not None
        else grpc.aio.insecure_channel(address)
    )
    async with channel:
        stub = services_pb2_grpc_visibility(channel)
        try:
            await stub.QueueStatus(services_pb2.QueueStatusRequest(), timeout=5, **kw)
        except grpc.aio.AioRpcError as exc:
            code: str = exc.code().name
            return code
    return "OK"


def services_pb2_grpc_visibility(
    channel: grpc.aio.Channel,
) -> services_pb2_grpc.VisibilityStub:
    return services_pb2_grpc.VisibilityStub(channel)


async def test_tls_with_bearer_tokens_serves_only_tls_clients(bus: Bus, tmp_path: Path) -> None:
    ca = Authority()
    tokens, policy = write_security_files(tmp_path)
    security = SecurityConfig(
        tls=server_files(ca, tmp_path), tokens_file=str(tokens), policy_file=str(policy)
    )
    async with running_gateway(bus, security=security, credentials=trusting(ca)) as gw:
        ok = await status_of(gw.address, trusting(ca), metadata=as_user("alice"))
        no_token = await status_of(gw.address, trusting(ca))
        plaintext = await status_of(gw.address, None, metadata=as_user("alice"))
        other_ca = await status_of(gw.address, trusting(Authority()), metadata=as_user("alice"))

    assert (ok, no_token, plaintext, other_ca) == (
        "OK", "UNAUTHENTICATED", "UNAVAILABLE", "UNAVAILABLE"
    )  # fmt: skip


async def test_mutual_tls_names_the_caller_by_the_certificates_cn_and_o(
    bus: Bus, tmp_path: Path, events: EventLog
) -> None:
    ca = Authority()
    _, policy = write_security_files(tmp_path)
    security = SecurityConfig(tls=server_files(ca, tmp_path, client_ca=ca), policy_file=str(policy))
    alice = ca.client("alice", "team-a")
    async with running_gateway(
        bus, security=security, credentials=trusting(ca, (alice.key, alice.cert))
    ) as gw:
        reply = await gw.gateway.Submit(
            services_pb2.SubmitRequest(manifest=manifest("Job", "team-a")), timeout=10
        )
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await gw.gateway.Submit(
                services_pb2.SubmitRequest(manifest=manifest("Job", "team-b")), timeout=10
            )
        without_cert = await status_of(gw.address, trusting(ca))
        stranger = Authority().client("alice", "team-a")
        foreign_cert = await status_of(gw.address, trusting(ca, (stranger.key, stranger.cert)))

    env = await events.wait_for("workload.submitted", workload=reply.objects[0].key)
    assert env.submitted.submitter == events_pb2.Submitter(user="alice", groups=["team-a"])
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert 'denied to user "alice" in namespace team-b' in (denied.value.details() or "")
    assert without_cert == foreign_cert == "UNAVAILABLE"  # refused in the handshake


async def test_a_renewed_certificate_is_served_to_new_connections(bus: Bus, tmp_path: Path) -> None:
    old, new = Authority("old CA"), Authority("new CA")
    files = server_files(old, tmp_path)
    async with running_gateway(bus, security=SecurityConfig(tls=files)) as gw:
        before = await status_of(gw.address, trusting(old))
        renewed = new.server()
        # As a Secret volume is updated: new files renamed into place.
        for data, path in ((renewed.key, files.key), (renewed.cert, files.cert)):
            replace_file(Path(path), data)
        after_new = await status_of(gw.address, trusting(new))
        after_old = await status_of(gw.address, trusting(old))
        reloads = gw.server.security.certificates.reloads  # type: ignore[union-attr]

    assert (before, after_new, after_old) == ("OK", "OK", "UNAVAILABLE")
    assert reloads == 1


def replace_file(path: Path, data: bytes) -> None:
    new = path.with_suffix(".new")
    new.write_bytes(data)
    os.replace(new, path)


# --- the client commands ---------------------------------------------------------------------


async def test_client_commands_speak_mutual_tls_and_read_the_token_from_a_file(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = Authority()
    tokens, policy = write_security_files(tmp_path)
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    key, cert = ca.client("root", "platform").write(tmp_path, "root")
    (tmp_path / "token").write_text(token_of("alice") + "\n")
    mtls = SecurityConfig(tls=server_files(ca, tmp_path, client_ca=ca), policy_file=str(policy))
    tls_tokens = SecurityConfig(
        tls=server_files(ca, tmp_path), tokens_file=str(tokens), policy_file=str(policy)
    )
    job = tmp_path / "job.yaml"
    job.write_text(manifest("Job", "team-a"))

    async with running_gateway(bus, security=mtls) as gw:
        flags = ["--gateway", gw.address, "--tls-ca", str(tmp_path / "ca.crt")]
        with_cert = await asyncio.to_thread(
            main, ["queues", *flags, "--tls-cert", str(cert), "--tls-key", str(key)]
        )
    async with running_gateway(bus, security=tls_tokens) as gw:
        monkeypatch.setenv("MUSTER_CLIENT_TLS_CA", str(tmp_path / "ca.crt"))
        monkeypatch.setenv("MUSTER_CLIENT_TOKEN_FILE", str(tmp_path / "token"))
        from_env = await asyncio.to_thread(main, ["submit", str(job), "--gateway", gw.address])
        monkeypatch.delenv("MUSTER_CLIENT_TOKEN_FILE")
        no_token = await asyncio.to_thread(main, ["queues", "--gateway", gw.address])

    err = capsys.readouterr().err
    assert (with_cert, from_env, no_token) == (0, 0, 1)
    assert "UNAUTHENTICATED" in err
    assert token_of("alice") not in err


def test_a_missing_client_file_exits_2_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["queues", "--gateway", "127.0.0.1:1", "--token-file", str(tmp_path / "nope")])

    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(
        f"muster: --token-file {tmp_path / 'nope'}: cannot read"
    )


def test_an_unreachable_gateway_is_reported_without_its_credentials(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["queues", "--gateway", "user:hunter2@127.0.0.1:1", "--timeout", "2"])

    err = capsys.readouterr().err
    assert status == 1
    assert "hunter2" not in err
    assert "cannot reach the gateway at 127.0.0.1:1" in err
