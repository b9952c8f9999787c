"""`muster service gateway` as a process: flags, the announced address, health, SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from gateway_helpers import AUTH, JOB, TOKEN
from grpc_health.v1 import health_pb2, health_pb2_grpc

from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.gateway.__main__ import (
    build_parser,
    cluster_backend,
    main,
    security_config,
    visibility_serving,
)
from muster.gateway.auth_certs import TlsFiles
from muster.gateway.kube_visibility_server import VisibilityServing

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def process(nats_server: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """The gateway started with --listen port 0, --token and --max-request-bytes 64 KiB."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster.gateway",
        "--nats", nats_server, "--listen", "127.0.0.1:0", "--token", TOKEN,
        "--max-request-bytes", str(64 * 1024), "--health-port", "0", "--grace-seconds", "5",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        address = ""
        async with asyncio.timeout(30):
            while not address:
                line = (await proc.stdout.readline()).decode()
                assert line, "the gateway exited before announcing its address"
                if line.startswith("gateway: "):
                    address = line.split()[1]
        yield proc, address
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_process_serves_with_its_flags_and_exits_0_on_sigterm(
    process: tuple[asyncio.subprocess.Process, str],
) -> None:
    proc, address = process
    async with grpc.aio.insecure_channel(address) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="muster.v1.Gateway"), timeout=10
        )
        gateway = services_pb2_grpc.GatewayStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as no_token:
            await gateway.Submit(services_pb2.SubmitRequest(manifest=JOB), timeout=10)
        big = services_pb2.SubmitRequest(manifest="#" * (100 * 1024) + "\n" + JOB)
        with pytest.raises(grpc.aio.AioRpcError) as too_big:
            await gateway.Submit(big, metadata=AUTH, timeout=10)
        reply = await gateway.Submit(
            services_pb2.SubmitRequest(manifest=JOB), metadata=AUTH, timeout=10
        )

    proc.send_signal(signal.SIGTERM)
    status = await asyncio.wait_for(proc.wait(), timeout=20)

    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert no_token.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert too_big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert reply.objects[0].kind == "Workload"
    assert status == 0


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["--listen", "no-port"], id="listen"),
        pytest.param(["--max-request-bytes", "0"], id="max request bytes"),
        pytest.param(["--max-calls", "0"], id="max calls"),
        pytest.param(["--cluster", "a.b"], id="cluster"),
        pytest.param(["--listen", "0.0.0.0:1"], id="anonymous beyond loopback"),
        pytest.param(["--tls-cert", "c.pem"], id="cert without key"),
        pytest.param(["--client-ca", "ca.pem"], id="mutual TLS without TLS"),
        pytest.param(["--authentication", "ldap"], id="authentication"),
        pytest.param(["--authorization", "kube", "--policy-file", "p"], id="policy with kube"),
        pytest.param(["--allow-anonymous", "on", "--token", "t"], id="anonymous and a token"),
        pytest.param(["--cluster-backend", "k8s"], id="cluster backend"),
        pytest.param(["--kueue-version", "v1"], id="kueue version"),
        pytest.param(["--visibility-listen", "0.0.0.0:8443"], id="visibility without a cert"),
    ],
)
def test_bad_flags_exit_2(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(flags)

    assert caught.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_security_flags_make_the_security_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MUSTER_GATEWAY_TOKENS_FILE", "/etc/muster/tokens.yaml")
    monkeypatch.setenv("MUSTER_GATEWAY_AUTHORIZATION", "kube")
    flags = ["--tls-cert", "s.crt", "--tls-key", "s.key", "--client-ca", "ca.crt"]
    flags += ["--authentication", "kube", "--kube-in-cluster", "on"]

    security = security_config(build_parser().parse_args(flags))

    assert security.tls == TlsFiles(cert="s.crt", key="s.key", client_ca="ca.crt")
    assert security.tokens_file == "/etc/muster/tokens.yaml"
    assert (security.authentication, security.authorization) == ("kube", "kube")
    assert security.kube.in_cluster
    assert security.authenticates
    monkeypatch.delenv("MUSTER_GATEWAY_TOKENS_FILE")
    anonymous = security_config(build_parser().parse_args(["--allow-anonymous", "on"]))
    assert anonymous.allow_anonymous
    assert not anonymous.authenticates


def test_the_cluster_backend_flags_say_where_submit_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MUSTER_KUEUE_VERSION", "v1beta2")
    args = build_parser().parse_args(["--cluster-backend", "kube", "--kube-host", "http://a:1"])

    assert cluster_backend(args) == "kube"
    assert security_config(args).kube.kueue_version == "v1beta2"
    assert cluster_backend(build_parser().parse_args([])) == "sim"


def test_the_visibility_flags_serve_kueues_visibility_api() -> None:
    flags = ["--visibility-listen", "0.0.0.0:8443", "--visibility-tls-cert", "v.crt"]
    flags += ["--visibility-tls-key", "v.key", "--visibility-client-ca", "proxy.crt"]
    flags += ["--visibility-allowed-names", "front-proxy-client, aggregator"]

    serving = visibility_serving(build_parser().parse_args(flags))

    assert serving == VisibilityServing(
        listen="0.0.0.0:8443",
        tls_cert="v.crt",
        tls_key="v.key",
        client_ca="proxy.crt",
        allowed_names=("front-proxy-client", "aggregator"),
    )
    assert visibility_serving(build_parser().parse_args([])) is None


def test_flags_default_to_their_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_GATEWAY_LISTEN", "0.0.0.0:6000")
    monkeypatch.setenv("MUSTER_GATEWAY_TOKEN", "from-env")
    monkeypatch.setenv("MUSTER_GATEWAY_MAX_REQUEST_BYTES", "1000")

    args = build_parser().parse_args([])

    assert (args.listen, args.token, args.max_request_bytes) == ("0.0.0.0:6000", "from-env", 1000)
