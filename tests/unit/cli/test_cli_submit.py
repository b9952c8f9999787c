"""`muster submit` retries a call the gateway could not serve, with the same idempotency key."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import grpc
import pytest

from muster.cli import submit
from muster.cli.main import build_parser, main
from muster.contracts.v1 import services_pb2


class Unavailable(grpc.RpcError):  # type: ignore[misc]  # grpc has no type stubs
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "the bus is unavailable"


class FlakyGateway:
    """Fails the first `failures` calls with UNAVAILABLE, then answers; records each request."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requests: list[services_pb2.SubmitRequest] = []

    def Submit(self, request: services_pb2.SubmitRequest, **_: Any) -> Any:  # noqa: N802
        self.requests.append(request)
        if len(self.requests) <= self.failures:
            raise Unavailable
        obj = services_pb2.SubmittedObject(kind="Workload", key="ml/w", event_id="e")
        return services_pb2.SubmitResponse(
            objects=[obj], warnings=["Job/ml/j: spec.x: unknown field"]
        )


@pytest.fixture
def args(monkeypatch: pytest.MonkeyPatch) -> argparse.Namespace:
    for name in ("MUSTER_GATEWAY_TOKEN", "MUSTER_GATEWAY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    return build_parser().parse_args(["submit", "w.yaml", "--validate", "warn"])


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("muster.cli.submit.time.sleep", lambda _s: None)


def test_a_retry_sends_the_same_idempotency_key(
    args: argparse.Namespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "w.yaml"
    manifest.write_text("kind: Workload\n")
    gateway = FlakyGateway(failures=2)

    status = submit._submit_file(args, gateway, str(manifest))

    out, err = capsys.readouterr()
    assert status == 0
    keys = {r.idempotency_key for r in gateway.requests}
    assert len(gateway.requests) == 3
    assert len(keys) == 1
    assert keys != {""}
    assert {r.validation for r in gateway.requests} == {"warn"}
    assert out == "Workload ml/w submitted (event e)\n"
    assert err == f"Warning: {manifest}: Job/ml/j: spec.x: unknown field\n"


def test_each_file_is_a_new_call_with_its_own_key(args: argparse.Namespace, tmp_path: Path) -> None:
    manifest = tmp_path / "w.yaml"
    manifest.write_text("kind: Workload\n")
    gateway = FlakyGateway(failures=0)

    submit._submit_file(args, gateway, str(manifest))
    submit._submit_file(args, gateway, str(manifest))

    first, second = gateway.requests
    assert first.idempotency_key != second.idempotency_key


def test_it_gives_up_after_three_tries(
    args: argparse.Namespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "w.yaml"
    manifest.write_text("kind: Workload\n")
    gateway = FlakyGateway(failures=5)

    status = submit._submit_file(args, gateway, str(manifest))

    assert status == 1
    assert len(gateway.requests) == 3
    assert "UNAVAILABLE" in capsys.readouterr().err


def test_an_endless_input_is_refused_without_reading_it_all(
    args: argparse.Namespace, capsys: pytest.CaptureFixture[str]
) -> None:
    # `muster submit /dev/zero` (or a pipe that never ends) grew to 13 GB in 30 s.
    gateway = FlakyGateway(failures=0)

    status = submit._submit_file(args, gateway, "/dev/zero")

    assert (status, gateway.requests) == (2, [])
    assert capsys.readouterr().err == (
        "muster: /dev/zero: more than 64 MiB: not a manifest a gateway takes "
        "(4 MiB by default, the gateway's --max-request-bytes)\n"
    )


class TooLarge(grpc.RpcError):  # type: ignore[misc]  # grpc has no type stubs
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.RESOURCE_EXHAUSTED

    def details(self) -> str:
        return "Received message larger than max (5242891 vs. 4194304)"


def test_a_manifest_over_the_gateways_limit_says_what_to_do(
    args: argparse.Namespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "w.yaml"
    manifest.write_text("kind: Workload\n")

    class Refusing(FlakyGateway):
        def Submit(self, request: services_pb2.SubmitRequest, **_: Any) -> Any:  # noqa: N802
            raise TooLarge

    status = submit._submit_file(args, Refusing(failures=0), str(manifest))

    assert status == 2
    assert capsys.readouterr().err == (
        f"muster: {manifest}: RESOURCE_EXHAUSTED: Received message larger than max "
        "(5242891 vs. 4194304): the gateway's request limit (--max-request-bytes); "
        "split the manifest into several files\n"
    )


def test_kubectls_dash_f_names_a_file_as_well(monkeypatch: pytest.MonkeyPatch) -> None:
    # A Kueue user types `muster submit -f job.yaml`, as `kubectl apply -f`; it was refused.
    sent: list[str] = []

    def record(_args: argparse.Namespace, _gateway: Any, name: str) -> int:
        sent.append(name)
        return 0

    monkeypatch.setattr(submit, "_submit_file", record)

    assert main(["submit", "-f", "a.yaml", "b.yaml", "--filename", "c.yaml"]) == 0
    assert sorted(sent) == ["a.yaml", "b.yaml", "c.yaml"]


def test_no_file_at_all_says_how_to_name_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--gateway", "127.0.0.1:1"]) == 2
    assert capsys.readouterr().err == (
        "muster submit: name a manifest: FILE, -f FILE, or - for stdin\n"
    )
