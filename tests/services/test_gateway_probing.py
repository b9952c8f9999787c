"""Kueuectl's verbs (Gateway.Stop, Resume, Delete) against a caller probing what they may not
see: an answer must not tell a workload that exists from one that does not, and a hostile name
gets a readable INVALID_ARGUMENT, never a transport error."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import grpc.aio
import pytest
from gateway_helpers import RunningGateway, running_gateway
from security_helpers import USERS, as_user, manifest, secured_gateway, tokens_yaml

from muster.bus import Bus
from muster.contracts.v1 import services_pb2
from muster.gateway.auth_config import SecurityConfig

Metadata = tuple[tuple[str, str], ...]

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def gw(bus: Bus, tmp_path: Path) -> AsyncIterator[RunningGateway]:
    async with secured_gateway(bus, tmp_path) as running:
        request = services_pb2.SubmitRequest(manifest=manifest("Workload", "team-a", "secret"))
        await running.gateway.Submit(request, metadata=as_user("root"), timeout=10)
        yield running


async def control(
    gw: RunningGateway, user: str, verb: str, namespace: str, name: str
) -> tuple[grpc.StatusCode, str]:
    ref = services_pb2.ObjectRef(kind="workload", namespace=namespace, name=name)
    kw = {"metadata": as_user(user), "timeout": 10}
    call: Callable[[], Awaitable[object]] = {
        "stop": lambda: gw.gateway.Stop(services_pb2.StopRequest(object=ref), **kw),
        "resume": lambda: gw.gateway.Resume(services_pb2.ResumeRequest(object=ref), **kw),
        "delete": lambda: gw.gateway.Delete(services_pb2.DeleteRequest(object=ref), **kw),
    }[verb]
    try:
        await call()
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


@pytest.mark.parametrize("verb", ["stop", "resume", "delete"])
async def test_a_caller_who_cannot_see_a_namespace_learns_nothing_of_its_workloads(
    gw: RunningGateway, verb: str
) -> None:
    # bob may do nothing in team-a: the workload that exists and the one that does not
    # answer alike, as Kubernetes answers 403 before it looks.
    exists = await control(gw, "bob", verb, "team-a", "secret")
    missing = await control(gw, "bob", verb, "team-a", "nothing-here")

    assert exists == (
        grpc.StatusCode.PERMISSION_DENIED,
        'Workload/team-a/secret: permission cancel denied to user "bob" in namespace team-a',
    )
    assert missing == (
        grpc.StatusCode.PERMISSION_DENIED,
        'Workload/team-a/nothing-here: permission cancel denied to user "bob" in namespace team-a',
    )


async def test_a_caller_who_may_watch_still_hears_not_found(gw: RunningGateway) -> None:
    # viewer may watch everywhere: existence is no secret to them.
    assert await control(gw, "viewer", "stop", "team-a", "nothing-here") == (
        grpc.StatusCode.NOT_FOUND,
        'workload "nothing-here" not found in namespace team-a',
    )
    code, details = await control(gw, "viewer", "stop", "team-a", "secret")
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details.startswith("Workload/team-a/job-secret") or "permission cancel" in details


async def test_a_caller_who_may_cancel_but_not_watch_hears_not_found(
    bus: Bus, tmp_path: Path
) -> None:
    # Allowed to act in the namespace, so existence is no secret: 404, as Kubernetes answers.
    tokens, policy = tmp_path / "tokens.yaml", tmp_path / "policy.yaml"
    tokens.write_text(tokens_yaml(USERS))
    policy.write_text("rules:\n- users: [bob]\n  permissions: [cancel]\n  namespaces: [team-a]\n")
    security = SecurityConfig(tokens_file=str(tokens), policy_file=str(policy))
    async with running_gateway(bus, security=security) as running:
        assert await control(running, "bob", "stop", "team-a", "nothing-here") == (
            grpc.StatusCode.NOT_FOUND,
            'workload "nothing-here" not found in namespace team-a',
        )


@pytest.mark.parametrize(
    ("namespace", "name", "problem"),
    [
        ("../x", "w", "object.namespace: must be a DNS-1123 label"),
        ("team-a", "a" * 100_000, "object.name: must be no more than"),
        ("team-a", "", "object.name: is required"),
    ],
    ids=["path-namespace", "huge-name", "no-name"],
)
async def test_a_hostile_reference_is_invalid_argument_naming_the_field(
    gw: RunningGateway, namespace: str, name: str, problem: str
) -> None:
    for user in ("bob", "root"):
        code, details = await control(gw, user, "delete", namespace, name)

        assert code is grpc.StatusCode.INVALID_ARGUMENT, (user, code, details[:200])
        assert problem in details
        assert len(details) < 400


HUGE = "q" * 100_000


async def watch_all(gw: RunningGateway, request: services_pb2.WatchRequest, md: Metadata) -> None:
    async for _ in gw.events.Watch(request, metadata=md, timeout=10):
        pass


@pytest.mark.parametrize(
    "call",
    [
        lambda gw, md: gw.visibility.QueueStatus(
            services_pb2.QueueStatusRequest(cluster_queue=HUGE), metadata=md, timeout=10
        ),
        lambda gw, md: gw.visibility.PendingWorkloads(
            services_pb2.PendingWorkloadsRequest(cluster_queue=HUGE), metadata=md, timeout=10
        ),
        lambda gw, md: gw.visibility.DescribeWorkload(
            services_pb2.DescribeWorkloadRequest(namespace="team-a", name=HUGE),
            metadata=md,
            timeout=10,
        ),
        lambda gw, md: gw.visibility.ListWorkloads(
            services_pb2.ListWorkloadsRequest(statuses=[HUGE]), metadata=md, timeout=10
        ),
        lambda gw, md: watch_all(gw, services_pb2.WatchRequest(workload=HUGE), md),
    ],
    ids=["queue-status", "pending-workloads", "describe", "list", "watch"],
)
async def test_a_huge_name_in_a_query_gets_a_readable_answer(gw: RunningGateway, call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call(gw, as_user("root"))

    # Not the client's "Stream removed (received metadata size exceeds hard limit ...)".
    assert raised.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
    details = raised.value.details() or ""
    assert "qqqq" in details
    assert len(details) <= 8 * 1024  # what a client takes
