"""KubeBackend's binder side and object writes against the API-server stand-in: a Kueue Job
started and stopped as Kueue does, a bare Workload's pods, pods/binding, error mapping, and
the write rate limit."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kube_backend_helpers import backend_for, bare_workload, job, node, pod

from muster.api.model import Toleration
from muster.cluster.backend import PodSetStart
from muster.cluster.errors import (
    BindConflictError,
    ClusterError,
    InvalidObjectError,
    NotFoundError,
)
from muster.cluster.kube import KubeBackend
from muster.cluster.kube.jobs import ORIGINAL_ANNOTATION, workload_name
from muster.devtools.apiserver import ApiServer

pytestmark = pytest.mark.timeout(30)

ADMITTED = PodSetStart(
    name="main",
    count=2,  # partial admission: 2 of 3
    requests={"cpu": 1000},
    node_selector={"disk": "ssd", "cloud.google.com/gke-accelerator": "a100"},
    tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),),
    annotations={"muster.dev/run-seconds": "60"},
)


def stored(server: ApiServer, plural: str, name: str, *, group: str = "") -> dict[str, Any]:
    rt = server.registry.by_key((group, plural))
    assert rt is not None
    namespace = "" if not rt.namespaced else "default"
    obj: dict[str, Any] = server.api.get(rt, namespace, name)
    return obj


async def queued_job(server: ApiServer, backend: KubeBackend, name: str = "train") -> str:
    await backend.apply(job(name))
    return f"default/{workload_name(stored(server, 'jobs', name, group='batch'))}"


async def test_start_unsuspends_the_job_with_the_flavor_placement_injected(
    server: ApiServer, backend: KubeBackend
) -> None:
    key = await queued_job(server, backend)
    await backend.start_workload(key, pod_sets=[ADMITTED])
    started = stored(server, "jobs", "train", group="batch")
    template = started["spec"]["template"]
    assert started["spec"]["suspend"] is False
    assert started["spec"]["parallelism"] == 2
    assert template["spec"]["nodeSelector"] == {
        "disk": "ssd",
        "cloud.google.com/gke-accelerator": "a100",
    }
    assert template["spec"]["tolerations"] == [
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    labels = template["metadata"]["labels"]
    assert (labels["app"], labels["muster.dev/workload"]) == ("train", key.split("/")[1])
    assert template["metadata"]["annotations"]["muster.dev/pod-set"] == "main"
    version = started["metadata"]["resourceVersion"]
    await backend.start_workload(key, pod_sets=[ADMITTED])  # again: nothing to change
    assert stored(server, "jobs", "train", group="batch")["metadata"]["resourceVersion"] == version


async def test_stop_suspends_the_job_and_restores_its_template(
    server: ApiServer, backend: KubeBackend
) -> None:
    key = await queued_job(server, backend)
    before = stored(server, "jobs", "train", group="batch")
    await backend.start_workload(key, pod_sets=[ADMITTED])
    # The Job controller would record that it started; clearing it is the backend's part.
    jobs_rt = server.registry.by_key(("batch", "jobs"))
    assert jobs_rt is not None

    def mark_started() -> None:
        server.api.patch(
            jobs_rt,
            "v1",
            "default",
            "train",
            "application/merge-patch+json",
            {"status": {"startTime": "2026-01-01T00:00:00Z"}},
            subresource="status",
        )

    mark_started()
    await backend.stop_workload(key)
    after = stored(server, "jobs", "train", group="batch")
    assert after["spec"]["suspend"] is True
    assert after["spec"]["parallelism"] == 3
    assert after["spec"]["template"] == before["spec"]["template"]
    assert ORIGINAL_ANNOTATION not in after["metadata"].get("annotations", {})
    assert "startTime" not in after.get("status", {})
    await backend.stop_workload(key)  # idempotent
    mark_started()  # a start time left behind does not keep it from starting again
    await backend.start_workload(key, pod_sets=[ADMITTED])
    assert stored(server, "jobs", "train", group="batch")["spec"]["suspend"] is False


async def test_start_rereads_and_retries_when_the_job_changed_meanwhile(
    server: ApiServer, backend: KubeBackend
) -> None:
    key = await queued_job(server, backend)
    server.faults.fail_next(2, status=409, verb="update", path="/jobs/")
    await backend.start_workload(key, pod_sets=[ADMITTED])
    assert stored(server, "jobs", "train", group="batch")["spec"]["suspend"] is False
    assert server.requests.count(verb="update", code=409) == 2


async def test_a_bare_workload_gets_its_pods_from_its_templates_and_loses_them_on_stop(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(bare_workload("wl"))
    await backend.start_workload("default/wl", pod_sets=[ADMITTED])
    await backend.start_workload("default/wl", pod_sets=[ADMITTED])  # idempotent
    pods = {p.name: p for p in await backend.list_pods()}
    assert sorted(pods) == ["wl-main-0", "wl-main-1"]
    first = pods["wl-main-0"]
    assert (first.workload, first.pod_set, first.scheduler_name) == ("wl", "main", "muster")
    assert first.node_selector["disk"] == "ssd"
    assert first.run_seconds == 60
    await backend.stop_workload("default/wl")
    assert await backend.list_pods() == []


async def test_a_pod_group_has_nothing_to_start_and_its_pods_go_on_stop(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(pod("g-0", labels={"scheduling.x-k8s.io/pod-group": "g"}))
    await backend.apply(pod("other"))
    await backend.start_workload("default/g", pod_sets=[ADMITTED])
    assert len(await backend.list_pods()) == 2
    await backend.stop_workload("default/g")
    assert [p.name for p in await backend.list_pods()] == ["other"]


async def test_a_bare_workloads_pods_placed_first_are_created_on_their_nodes_unbound_never(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(bare_workload("wl"))
    placed = {"wl-main-1": "n2"}  # one part of a permit: the other pod is not created yet

    await backend.start_workload("default/wl", pod_sets=[ADMITTED], admission=7, nodes=placed)
    await backend.start_workload("default/wl", pod_sets=[ADMITTED], admission=7, nodes=placed)

    (created,) = await backend.list_pods()
    assert (created.name, created.node_name, created.admission) == ("wl-main-1", "n2", 7)
    assert server.requests.count(verb="create", path="/pods") == 2  # the second: AlreadyExists
    assert server.requests.count(path="/binding") == 0


async def test_pods_of_a_job_or_a_pod_group_are_never_created_on_nodes(
    server: ApiServer, backend: KubeBackend
) -> None:
    key = await queued_job(server, backend)
    await backend.apply(pod("g-0", labels={"scheduling.x-k8s.io/pod-group": "g"}))
    for workload, why in ((key, "Job controller"), ("default/g", "pod group")):
        with pytest.raises(ClusterError, match=why) as refused:
            await backend.start_workload(workload, pod_sets=[ADMITTED], nodes={"x": "n1"})
        assert not refused.value.temporary
    assert stored(server, "jobs", "train", group="batch")["spec"]["suspend"] is True
    assert [p.name for p in await backend.list_pods()] == ["g-0"]


async def test_bind_sets_the_node_once_and_maps_conflicts(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(node("n1"))
    await backend.apply(pod("p"))
    await backend.bind("default", "p", "n1")
    assert stored(server, "pods", "p")["spec"]["nodeName"] == "n1"
    await backend.bind("default", "p", "n1")  # the same node: nothing to do
    with pytest.raises(BindConflictError) as conflict:
        await backend.bind("default", "p", "n2")
    assert (conflict.value.bound_to, conflict.value.wanted) == ("n1", "n2")
    with pytest.raises(NotFoundError):
        await backend.bind("default", "absent", "n1")
    await backend.apply(pod("gated", schedulingGates=[{"name": "wait"}]))
    with pytest.raises(ClusterError) as gated:
        await backend.bind("default", "gated", "n1")
    assert (gated.value.reason, gated.value.temporary) == ("Conflict", False)


async def test_objects_are_created_replaced_and_deleted(
    server: ApiServer, backend: KubeBackend
) -> None:
    cq: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"cohort": "a"},
    }
    assert await backend.create(cq)
    assert not await backend.create(cq)
    await backend.apply({**cq, "spec": {"cohort": "b"}})
    replaced = stored(server, "clusterqueues", "cq", group="kueue.x-k8s.io")
    assert replaced["spec"] == {"cohort": "b"}
    assert await backend.delete("ClusterQueue", "cq")
    assert not await backend.delete("ClusterQueue", "cq")
    with pytest.raises(InvalidObjectError) as bad:
        await backend.apply(node("n", cpu="lots"))
    assert "status.capacity" in str(bad.value)
    with pytest.raises(ClusterError, match="not one muster writes"):
        await backend.apply(
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
        )


async def test_failures_map_to_temporary_and_permanent_cluster_errors(
    server: ApiServer, backend: KubeBackend
) -> None:
    server.faults.fail_next(20, status=503, verb="create")
    with pytest.raises(ClusterError) as unavailable:
        await backend.create(pod("p"))
    assert unavailable.value.temporary
    server.faults.clear()
    server.faults.fail_next(1, status=403, verb="create")
    with pytest.raises(ClusterError) as forbidden:
        await backend.create(pod("p"))
    assert (forbidden.value.reason, forbidden.value.temporary) == ("Forbidden", False)
    server.faults.fail_next(3, status=429, retry_after_s=0, verb="create")
    assert await backend.create(pod("p"))  # retried until it went through
    server.faults.reset_next(verb="list")
    server.faults.reset_next(verb="list")
    assert [p.name for p in await backend.list_pods()] == ["p"]
    await server.stop()
    with pytest.raises(ClusterError) as down:
        await backend.list_nodes()
    assert (down.value.reason, down.value.temporary) == ("Unavailable", True)


async def test_writes_wait_for_the_configured_rate(server: ApiServer) -> None:
    async with backend_for(server, write_qps=50.0, write_burst=1) as slow:
        started = time.monotonic()
        for i in range(11):
            await slow.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"n{i}"}}
            )
        assert time.monotonic() - started >= 10 / 50 * 0.9
