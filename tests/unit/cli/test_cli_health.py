"""`muster health HOST:PORT`: the probe compose's healthchecks run inside each container."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from muster.cli.main import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def health_server() -> Iterator[tuple[str, health.HealthServicer]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


def test_serving_exits_0_and_not_serving_exits_1(
    health_server: tuple[str, health.HealthServicer], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = health_server
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert main(["health", address]) == 0
    assert f"{address}: SERVING" in capsys.readouterr().out
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert main(["health", address]) == 1
    assert "not serving" in capsys.readouterr().err


def test_nobody_listening_exits_1() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the probe: refused
    assert main(["health", f"127.0.0.1:{port}", "--timeout", "1"]) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["health", "8081"],
        ["health", "127.0.0.1:"],
        ["health", ":8081"],
        ["health", "127.0.0.1:99999"],
        ["health", "127.0.0.1:80x"],
        ["health", "127.0.0.1:8081", "--timeout", "0"],
        ["health", "127.0.0.1:8081", "--timeout", "nan"],
    ],
)
def test_malformed_input_exits_2_naming_it(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "address" in err or "--timeout" in err, err


def test_compose_waits_for_healthy_services_with_this_probe() -> None:
    """Every muster container is probed with `muster health` on its own health port, and the
    services wait for NATS's JetStream health, the gateway for its readers' health."""
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    assert "js-enabled-only" in " ".join(services["nats"]["healthcheck"]["test"])
    for name, service in services.items():
        if name == "nats":
            continue
        port = service["environment"]["MUSTER_HEALTH_PORT"]
        assert service["healthcheck"]["test"] == ["CMD", "muster", "health", f"127.0.0.1:{port}"]
        assert service["depends_on"]["nats"] == {"condition": "service_healthy"}, name
    gateway_waits = services["gateway"]["depends_on"]
    assert {c["condition"] for c in gateway_waits.values()} == {"service_healthy"}
