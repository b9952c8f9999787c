"""The permission matrix against the real gateway: users × verbs × namespaces × kinds, each
allowed or PERMISSION_DENIED naming the permission, the object and the namespace."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from bus_helpers import EventLog
from gateway_helpers import RunningGateway, stored_count
from security_helpers import USERS, as_user, manifest, secured_gateway

from muster.bus import Bus
from muster.bus.buckets import VISIBILITY_BUCKET
from muster.contracts.v1 import events_pb2, services_pb2

pytestmark = pytest.mark.timeout(120)

NAMESPACES = ("team-a", "team-b", "kube-system")
NAMESPACED = ("Job", "Workload:cpu", "Workload:gpu", "Pod", "LocalQueue")
CLUSTER_SCOPED = ("ClusterQueue", "ResourceFlavor", "Node")
# What each user of security_helpers.POLICY may submit: (kind, namespace), "" when cluster-scoped.
EVERYTHING = {(k, ns) for k in NAMESPACED for ns in NAMESPACES} | {(k, "") for k in CLUSTER_SCOPED}
ALLOWED: dict[str, set[tuple[str, str]]] = {
    "alice": {(k, "team-a") for k in NAMESPACED},  # submit and create_queue in team-a
    "bob": set(),  # authenticated, but no rule names team-b
    "carol": {("Workload:gpu", "team-b")},  # submit in LocalQueue team-b/gpu only
    "viewer": set(),  # watch everywhere, submit nowhere
    "root": EVERYTHING,  # admin
}
PERMISSION = {"Job": "submit", "Workload": "submit", "Pod": "submit", "LocalQueue": "create_queue"}


@pytest.fixture
async def gw(bus: Bus, tmp_path: Path) -> AsyncIterator[RunningGateway]:
    async with secured_gateway(bus, tmp_path) as running:
        yield running


async def submit(
    gw: RunningGateway, user: str, text: str, *, cluster: str = ""
) -> tuple[grpc.StatusCode, str]:
    request = services_pb2.SubmitRequest(manifest=text, cluster=cluster)
    try:
        await gw.gateway.Submit(request, metadata=as_user(user), timeout=10)
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def test_each_user_may_submit_exactly_what_the_policy_grants(gw: RunningGateway) -> None:
    wrong = []
    for user in USERS:
        for kind, namespace in sorted(EVERYTHING):
            code, details = await submit(gw, user, manifest(kind, namespace or "default"))
            allowed = (kind, namespace) in ALLOWED[user]
            base = kind.partition(":")[0]
            if namespace:
                expected = f'permission {PERMISSION[base]} denied to user "{user}" in namespace'
                expected += f" {namespace}"
            else:
                expected = f'{base}/x: permission admin denied to user "{user}"'
            if allowed and code != grpc.StatusCode.OK:
                wrong.append(f"{user} {kind} {namespace}: refused {code.name} {details}")
            elif not allowed and (
                code != grpc.StatusCode.PERMISSION_DENIED or expected not in details
            ):
                wrong.append(f"{user} {kind} {namespace}: {code.name} {details!r}")
    assert wrong == []


async def test_a_denied_object_stops_the_whole_submit_and_each_is_named(
    gw: RunningGateway, bus: Bus
) -> None:
    before = await stored_count(bus)
    text = "---\n".join(
        [
            manifest("Job", "team-a"),
            manifest("Pod", "kube-system", "evil"),
            manifest("Node", "", "n1"),
        ]
    )

    code, details = await submit(gw, "alice", text)

    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert details.splitlines() == [
        'Pod/kube-system/evil: permission submit denied to user "alice" in namespace kube-system',
        'Node/n1: permission admin denied to user "alice": cluster-scoped objects are for admins',
    ]
    assert await stored_count(bus) == before


async def test_choosing_a_cluster_id_is_for_admins(gw: RunningGateway) -> None:
    denied = await submit(gw, "alice", manifest("Job", "team-a"), cluster="east")
    allowed = await submit(gw, "root", manifest("Job", "team-a"), cluster="east")
    default = await submit(gw, "alice", manifest("Job", "team-a"), cluster="local")

    assert denied == (
        grpc.StatusCode.PERMISSION_DENIED,
        'cluster east: permission admin denied to user "alice": '
        "choosing a cluster id is for admins",
    )
    assert allowed[0] == default[0] == grpc.StatusCode.OK


async def test_published_events_carry_the_authenticated_submitter(
    gw: RunningGateway, events: EventLog
) -> None:
    text = "---\n".join([manifest("Job", "team-a", "j"), manifest("Pod", "team-a", "p"),
                         manifest("LocalQueue", "team-a", "q")])  # fmt: skip
    reply = await gw.gateway.Submit(
        services_pb2.SubmitRequest(manifest=text), metadata=as_user("alice"), timeout=10
    )

    submitted = await events.wait_for("workload.submitted", workload=reply.objects[0].key)
    config = await events.wait_for("config.applied")
    alice = events_pb2.Submitter(user="alice", groups=["team-a"])
    assert submitted.submitted.submitter == alice
    assert config.config_applied.submitter == alice


# --- Events.Watch ------------------------------------------------------------------------------


async def watched(gw: RunningGateway, user: str, **request: object) -> list[events_pb2.Envelope]:
    call = gw.events.Watch(
        services_pb2.WatchRequest(history_only=True, from_sequence=1, **request),  # type: ignore[arg-type]
        metadata=as_user(user),
        timeout=10,
    )
    return [env async for env in call]


async def fill(gw: RunningGateway) -> None:
    """As root: a Job in team-a, a Workload in team-b's gpu and cpu queues, a ClusterQueue."""
    text = "---\n".join([
        manifest("Job", "team-a", "a"),
        manifest("Workload:gpu", "team-b", "g"),
        manifest("Workload:cpu", "team-b", "c"),
        manifest("ClusterQueue", "", "shared"),
    ])  # fmt: skip
    await gw.gateway.Submit(
        services_pb2.SubmitRequest(manifest=text), metadata=as_user("root"), timeout=10
    )


def namespaces_of(envs: list[events_pb2.Envelope]) -> set[str]:
    return {e.workload.split("/")[0] if e.workload else e.config_applied.name for e in envs}


async def test_a_watch_of_everything_shows_only_the_namespaces_the_caller_may_watch(
    gw: RunningGateway,
) -> None:
    await fill(gw)

    seen = {user: namespaces_of(await watched(gw, user)) for user in USERS}

    assert seen == {
        "alice": {"team-a"},
        "bob": set(),
        "carol": set(),  # one LocalQueue only: it must ask for that LocalQueue
        "viewer": {"team-a", "team-b", "shared"},  # watch in "*": cluster-scoped events too
        "root": {"team-a", "team-b", "shared"},
    }


async def test_a_watch_of_a_namespace_needs_watch_there(gw: RunningGateway) -> None:
    await fill(gw)

    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await watched(gw, "alice", namespace="team-b")
    with pytest.raises(grpc.aio.AioRpcError) as whole:
        await watched(gw, "carol", namespace="team-b")
    own = await watched(gw, "carol", namespace="team-b", local_queue="gpu")

    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert denied.value.details() == (
        'namespace team-b: permission watch denied to user "alice" in namespace team-b'
    )
    assert whole.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert {e.workload for e in own} == {"team-b/g"}


# --- Visibility ----------------------------------------------------------------------------------


async def listed(gw: RunningGateway, user: str, **request: str) -> list[str] | str:
    """The workload keys `user` is shown, or the error's code and details."""
    try:
        reply = await gw.visibility.ListWorkloads(
            services_pb2.ListWorkloadsRequest(**request), metadata=as_user(user), timeout=10
        )
    except grpc.aio.AioRpcError as exc:
        return f"{exc.code().name}: {exc.details()}"
    return [w.key for w in reply.items]


async def test_a_listing_shows_the_workloads_of_the_local_queues_the_caller_may_read(
    gw: RunningGateway,
) -> None:
    """`muster workloads` for carol, who may watch LocalQueue team-b/gpu only: its workloads,
    whether she names the namespace, the queue or neither; another queue or namespace is
    denied by name. She may describe them too, and nothing else in team-b, there or not."""
    await fill(gw)
    assert sorted(await listed(gw, "viewer", namespace="team-b")) == ["team-b/c", "team-b/g"]

    assert await listed(gw, "carol") == ["team-b/g"]
    assert await listed(gw, "carol", namespace="team-b") == ["team-b/g"]
    assert await listed(gw, "carol", namespace="team-b", local_queue="gpu") == ["team-b/g"]
    assert await listed(gw, "carol", namespace="team-b", local_queue="cpu") == (
        "PERMISSION_DENIED: LocalQueue/team-b/cpu: permission watch denied to user"
        ' "carol" in namespace team-b (LocalQueue cpu)'
    )
    assert await listed(gw, "carol", namespace="team-a") == (
        "PERMISSION_DENIED: namespace team-a: permission watch denied to user"
        ' "carol" in namespace team-a'
    )
    assert await listed(gw, "bob") == []

    own = await gw.visibility.DescribeWorkload(
        services_pb2.DescribeWorkloadRequest(namespace="team-b", name="g"),
        metadata=as_user("carol"),
        timeout=10,
    )
    assert own.summary.key == "team-b/g"
    denials = set()
    for name in ("c", "missing"):  # another queue's, and none: the same answer
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await gw.visibility.DescribeWorkload(
                services_pb2.DescribeWorkloadRequest(namespace="team-b", name=name),
                metadata=as_user("carol"),
                timeout=10,
            )
        denials.add((denied.value.code(), denied.value.details()))
    assert denials == {
        (
            grpc.StatusCode.PERMISSION_DENIED,
            'namespace team-b: permission watch denied to user "carol" in namespace team-b',
        )
    }


async def test_visibility_lists_only_the_queues_the_caller_may_read(
    gw: RunningGateway, bus: Bus
) -> None:
    kv = await bus.kv(VISIBILITY_BUCKET)
    await kv.put("cq.shared", events_pb2.ClusterQueueStatus(name="shared").SerializeToString())
    for namespace, name in (("team-a", "cpu"), ("team-b", "gpu"), ("team-b", "cpu")):
        lq = events_pb2.LocalQueueStatus(namespace=namespace, name=name, cluster_queue="shared")
        await kv.put(f"lq.{namespace}.{name}", lq.SerializeToString())
    request = services_pb2.QueueStatusRequest()

    def listed(reply: services_pb2.QueueStatusResponse) -> tuple[list[str], list[str]]:
        cqs = [cq.name for cq in reply.cluster_queues]
        return cqs, [f"{lq.namespace}/{lq.name}" for lq in reply.local_queues]

    replies = {
        user: listed(await gw.visibility.QueueStatus(request, metadata=as_user(user)))
        for user in ("alice", "carol", "viewer")
    }
    with pytest.raises(grpc.aio.AioRpcError) as one_cq:
        await gw.visibility.QueueStatus(
            services_pb2.QueueStatusRequest(cluster_queue="shared"), metadata=as_user("alice")
        )
    with pytest.raises(grpc.aio.AioRpcError) as pending_cq:
        await gw.visibility.PendingWorkloads(
            services_pb2.PendingWorkloadsRequest(cluster_queue="shared"), metadata=as_user("alice")
        )
    own = await gw.visibility.PendingWorkloads(
        services_pb2.PendingWorkloadsRequest(namespace="team-b", local_queue="gpu"),
        metadata=as_user("carol"),
    )

    assert replies == {
        "alice": ([], ["team-a/cpu"]),
        "carol": ([], ["team-b/gpu"]),
        "viewer": (["shared"], ["team-a/cpu", "team-b/cpu", "team-b/gpu"]),
    }
    assert one_cq.value.code() == pending_cq.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert pending_cq.value.details() == (
        'ClusterQueue/shared: permission watch denied to user "alice" in every namespace'
    )
    assert own.total == 0
