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
from muster.gateway.workloads import not_found

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
        not_found("team-a", "nothing-here"),
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
            not_found("team-a", "nothing-here"),
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


async def watch_all(gw: RunningGateway, request: services_pb2.WatchRequest, md: Metadata) -> None:
    async for _ in gw.events.Watch(request, metadata=md, timeout=10):
        pass


def _clusters(cluster: str) -> Call:
    return lambda gw, md: gw.visibility.Clusters(
        services_pb2.ClustersRequest(cluster=cluster), metadata=md, timeout=10
    )


def _queue_status(cluster_queue: str) -> Call:
    return lambda gw, md: gw.visibility.QueueStatus(
        services_pb2.QueueStatusRequest(cluster_queue=cluster_queue), metadata=md, timeout=10
    )


def _pending(request: services_pb2.PendingWorkloadsRequest) -> Call:
    return lambda gw, md: gw.visibility.PendingWorkloads(request, metadata=md, timeout=10)


def _describe(namespace: str, name: str) -> Call:
    return lambda gw, md: gw.visibility.DescribeWorkload(
        services_pb2.DescribeWorkloadRequest(namespace=namespace, name=name),
        metadata=md,
        timeout=10,
    )


def _kind(kind: str) -> Call:
    ref = services_pb2.ObjectRef(kind=kind, namespace="team-a", name="w")
    return lambda gw, md: gw.gateway.Stop(
        services_pb2.StopRequest(object=ref), metadata=md, timeout=10
    )


def _list(request: services_pb2.ListWorkloadsRequest) -> Call:
    return lambda gw, md: gw.visibility.ListWorkloads(request, metadata=md, timeout=10)


Call = Callable[[RunningGateway, Metadata], Awaitable[object]]
Pending, Listing = services_pb2.PendingWorkloadsRequest, services_pb2.ListWorkloadsRequest
HUGE = "q" * 100_000
LONG_NAMESPACE = "n" * 64  # one past a DNS-1123 label's 63


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (_queue_status(HUGE), "cluster_queue: must be no more than 253 characters"),
        (_queue_status("Team_A"), "cluster_queue: must be a DNS-1123 subdomain"),
        (
            _pending(Pending(cluster_queue=HUGE)),
            "cluster_queue: must be no more than 253 characters",
        ),
        (_pending(Pending(cluster_queue="a..b")), "cluster_queue: must be a DNS-1123 subdomain"),
        (
            _pending(Pending(local_queue="lq", namespace=LONG_NAMESPACE)),
            "namespace: must be no more",
        ),
        (_pending(Pending(local_queue="lq/x")), "local_queue: must be a DNS-1123 subdomain"),
        (_describe("team-a", HUGE), "name: must be no more than 253 characters"),
        (_describe(LONG_NAMESPACE, "w"), "namespace: must be no more than 63 characters"),
        (_describe("team-a", "a/b/c/d"), "name: at most 3 parts separated by '/', got 4"),
        (_list(Listing(statuses=[HUGE])), "statuses[0]: unknown status"),
        (_list(Listing(namespace="Team-A")), "namespace: must be a DNS-1123 label"),
        (_list(Listing(cluster_queue="cq*")), "cluster_queue: must be a DNS-1123 subdomain"),
        (_clusters(HUGE), "cluster: must be no more than 253 characters"),
        (_clusters("north.east"), "cluster: must be a muster cluster id"),
        (_clusters("dlq"), "cluster: 'dlq' is reserved"),
        (lambda gw, md: watch_all(gw, services_pb2.WatchRequest(workload=HUGE), md), "workload:"),
        (
            lambda gw, md: watch_all(gw, services_pb2.WatchRequest(types=[HUGE]), md),
            "types: unknown event type",
        ),
        (_kind(HUGE), "object.kind: must be workload, localqueue or clusterqueue"),
    ],
    ids=[
        "queue-status-huge",
        "queue-status-not-dns",
        "pending-cq-huge",
        "pending-cq-not-dns",
        "pending-namespace-64",
        "pending-lq-slash",
        "describe-huge",
        "describe-namespace-64",
        "describe-parts",
        "list-status-huge",
        "list-namespace-upper",
        "list-cq-star",
        "clusters-huge",
        "clusters-dot",
        "clusters-reserved",
        "watch-huge",
        "watch-type-huge",
        "control-kind-huge",
    ],
)
async def test_a_name_no_object_can_have_is_invalid_argument_naming_the_field(
    gw: RunningGateway, call: Call, problem: str
) -> None:
    # Kubernetes validates a name before it authorizes or looks: bob (who may read nothing)
    # hears the same, and nobody hears NOT_FOUND for what cannot exist.
    for user in ("root", "bob"):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(gw, as_user(user))

        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT, (user, problem)
        details = raised.value.details() or ""
        assert details.startswith(problem), (user, details[:200])
        # Not the client's "Stream removed (received metadata size exceeds hard limit ...)",
        # nor the hostile value echoed back whole: a problem names the field and shows a bit.
        assert len(details) <= 512, (user, details[:200])


async def test_a_valid_name_of_nothing_is_still_not_found(gw: RunningGateway) -> None:
    for call, details in [
        (_queue_status("nothing"), 'ClusterQueue "nothing" not found'),
        (_describe("team-a", "nothing"), not_found("team-a", "nothing")),
        (_clusters("north"), "cluster: 'north' has no heartbeat (none reported)"),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(gw, as_user("root"))
        assert (raised.value.code(), raised.value.details()) == (
            grpc.StatusCode.NOT_FOUND,
            details,
        )
