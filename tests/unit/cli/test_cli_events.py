"""`muster events` asks Events.Watch for what its flags say: `history_only` unless --follow.

The gateway here is a stand-in servicer on a real gRPC server that records each request and its
metadata, then sends one envelope and ends the stream.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import msgspec
import pytest
from cli_grpc_server import serving

from muster.bus import new_event
from muster.cli.main import main
from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc

pytestmark = pytest.mark.timeout(30)


class Call(msgspec.Struct, frozen=True, kw_only=True):
    request: services_pb2.WatchRequest
    metadata: dict[str, str]


class RecordingEvents(services_pb2_grpc.EventsServicer):
    def __init__(self) -> None:
        self.calls: list[Call] = []

    def Watch(  # noqa: N802  # the RPC's name
        self, request: services_pb2.WatchRequest, context: grpc.ServicerContext
    ) -> Iterator[events_pb2.Envelope]:
        metadata = {k: str(v) for k, v in context.invocation_metadata()}
        self.calls.append(Call(request=request, metadata=metadata))
        payload = events_pb2.WorkloadSubmitted(queue_name="cpu")
        env = new_event("submitted", payload, cluster="local", workload="ml/a", source="test")
        env.sequence = 1
        yield env


@pytest.fixture
def gateway() -> Iterator[tuple[str, RecordingEvents]]:
    servicer = RecordingEvents()
    with serving(services_pb2_grpc.add_EventsServicer_to_server, servicer) as address:
        yield address, servicer


@pytest.mark.parametrize(
    ("flags", "history_only"),
    [pytest.param([], True, id="without --follow"), pytest.param(["-f"], False, id="--follow")],
)
def test_events_asks_for_history_only_unless_following(
    gateway: tuple[str, RecordingEvents],
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    history_only: bool,
) -> None:
    address, servicer = gateway

    status = main(["events", *flags, "--local-queue", "cpu", "--gateway", address])

    assert status == 0
    (call,) = servicer.calls
    assert (call.request.history_only, call.request.local_queue) == (history_only, "cpu")
    assert "muster-follow" not in call.metadata  # the deprecated spelling is no longer sent
    assert capsys.readouterr().out.splitlines()[1].split()[2:4] == ["workload.submitted", "ml/a"]
