"""What a client command makes of where the gateway is and of what it answers: the address
`muster up` recorded when no --gateway is given (as `muster status` reads it), exit 1 with the
gateway's words when it is busy (try again), exit 2 when the request itself is at fault, and a
bad --status told with the flag's name and the valid values before any call.

The gateway here is a stand-in Visibility servicer on a real gRPC server: it answers
ListWorkloads with nothing, or fails it with the status the test sets."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cli_grpc_server import serving

from muster.cli.main import main
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.gateway.loop_server import refused_message
from muster.gateway.workloads import STATUS_FILTERS
from muster.launcher.upstate import StackState, process, write_state

pytestmark = pytest.mark.timeout(30)


class StandIn(services_pb2_grpc.VisibilityServicer):
    def __init__(self) -> None:
        self.calls = 0
        self.failure: tuple[grpc.StatusCode, str] | None = None

    def ListWorkloads(  # noqa: N802  # the RPC's name
        self, request: services_pb2.ListWorkloadsRequest, context: grpc.ServicerContext
    ) -> services_pb2.ListWorkloadsResponse:
        self.calls += 1
        if self.failure is not None:
            context.abort(*self.failure)
        return services_pb2.ListWorkloadsResponse()


@pytest.fixture
def gateway() -> Iterator[tuple[str, StandIn]]:
    servicer = StandIn()  # type: ignore[abstract]  # only ListWorkloads is ever called
    with serving(services_pb2_grpc.add_VisibilityServicer_to_server, servicer) as address:
        yield address, servicer


@pytest.fixture
def no_gateway_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No --gateway, no MUSTER_GATEWAY: the state directory (returned) says where it is."""
    monkeypatch.delenv("MUSTER_GATEWAY", raising=False)
    monkeypatch.setenv("MUSTER_STATE_DIR", str(tmp_path))
    return tmp_path


def test_without_gateway_flag_commands_call_the_gateway_muster_up_recorded(
    gateway: tuple[str, StandIn], no_gateway_flag: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway
    # What `muster up --gateway-port 0` leaves: a gateway on whatever port was free.
    stack = StackState(supervisor=process("supervisor", os.getpid()), ready=True, gateway=address)
    write_state(no_gateway_flag, stack)

    assert main(["workloads", "--timeout", "5"]) == 0

    assert servicer.calls == 1
    assert capsys.readouterr().out == "No workloads found.\n"


def test_a_state_file_whose_supervisor_is_gone_is_ignored_with_a_note(
    gateway: tuple[str, StandIn], no_gateway_flag: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway
    crashed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    supervisor = process("supervisor", crashed.pid)
    crashed.kill()
    crashed.wait()
    # Left by a stack that crashed: its gateway's port may be anyone's now.
    write_state(no_gateway_flag, StackState(supervisor=supervisor, ready=True, gateway=address))

    main(["workloads", "--timeout", "5"])

    assert servicer.calls == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        f"muster: ignoring {no_gateway_flag / 'stack.json'}: its supervisor (pid {crashed.pid}) is "
        "not running; `muster down` clears it"
    )


@pytest.mark.parametrize(
    ("code", "details", "status"),
    [
        pytest.param(
            grpc.StatusCode.RESOURCE_EXHAUSTED, refused_message(64), 1, id="call limit: again"
        ),
        pytest.param(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "Events.Watch: the gateway serves 32 watches, its most at once; try again later",
            1,
            id="watch limit: again",
        ),
        pytest.param(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "Received message larger than max (5000000 vs. 4194304)",
            2,
            id="request too large: bad input",
        ),
        pytest.param(grpc.StatusCode.INVALID_ARGUMENT, "namespace: bad", 2, id="bad input"),
    ],
)
def test_a_refused_call_exits_by_whether_trying_again_can_help(
    gateway: tuple[str, StandIn],
    capsys: pytest.CaptureFixture[str],
    code: grpc.StatusCode,
    details: str,
    status: int,
) -> None:
    address, servicer = gateway
    servicer.failure = (code, details)

    assert main(["workloads", "--gateway", address, "--timeout", "5"]) == status

    assert capsys.readouterr().err.startswith(f"muster: {code.name}: {details}")


def test_an_unknown_status_names_the_flag_and_the_valid_ones_before_any_call(
    gateway: tuple[str, StandIn], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway

    with pytest.raises(SystemExit) as exit_:
        main(["workloads", "--gateway", address, "--status", "Pending", "--status", "bogus"])

    assert exit_.value.code == 2
    assert servicer.calls == 0
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.endswith(
        'argument --status: unknown status "bogus": one of all, pending, quotareserved, '
        "admitted, finished, inactive"
    )


def test_the_statuses_checked_are_the_ones_the_gateway_takes() -> None:
    from muster.cli.workloads import STATUSES

    assert set(STATUSES) == set(STATUS_FILTERS)
