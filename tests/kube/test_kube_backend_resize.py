"""A routed Job on Kubernetes (docs/routing.md, "On Kubernetes"): the binder starts it with the
requests its admission covers, rewriting the suspended Job's containers (KEP-5440) in the write
that unsuspends it, puts the owner's requests back when it is stopped, and, where the API
server refuses the change, starts nothing and says so (`RequestsRefusedError`)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kube_backend_helpers import backend_for, job

from muster.cluster.backend import PodSetStart
from muster.cluster.errors import ClusterError, RequestsRefusedError
from muster.cluster.kube import KubeBackend
from muster.cluster.kube.jobs import workload_name
from muster.cluster.kube.resize import ResizeError, requests_of, resized
from muster.devtools.apiserver import ApiServer, FeatureGates

pytestmark = pytest.mark.timeout(30)

GPU = "nvidia.com/gpu"
# The light GPU job routed to the CPU queue: the GPU given up, 4 cpus instead of 1.
ON_CPU = PodSetStart(
    name="main", count=1, requests={"cpu": 4000, "memory": 6 * 2**30 * 1000}, routed=True
)


def gpu_job(name: str = "light") -> dict[str, Any]:
    made = job(name, parallelism=1)
    made["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "memory": "6Gi"},
        "limits": {"cpu": "2", "memory": "6Gi", GPU: "1"},
    }
    return made


def stored_job(server: ApiServer, name: str = "light") -> dict[str, Any]:
    rt = server.registry.by_key(("batch", "jobs"))
    assert rt is not None
    found: dict[str, Any] = server.api.get(rt, "default", name)
    return found


def container_resources(obj: dict[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    return resources


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with ApiServer() as running:
        yield running


async def queued(server: ApiServer, backend: KubeBackend) -> str:
    await backend.apply(gpu_job())
    return f"default/{workload_name(stored_job(server))}"


async def test_a_routed_job_starts_with_the_alternatives_requests_and_gets_its_own_back(
    server: ApiServer,
) -> None:
    async with backend_for(server) as backend:
        key = await queued(server, backend)
        before = container_resources(stored_job(server))

        await backend.start_workload(key, pod_sets=[ON_CPU])

        started = stored_job(server)
        assert started["spec"]["suspend"] is False
        # The GPU is gone from requests and limits; cpu 4, its limit raised to the request.
        assert container_resources(started) == {
            "requests": {"cpu": "4", "memory": "6Gi"},
            "limits": {"cpu": "4", "memory": "6Gi"},
        }
        await backend.stop_workload(key)
        stopped = stored_job(server)
        assert stopped["spec"]["suspend"] is True
        assert container_resources(stopped) == before


async def test_an_older_cluster_refuses_the_rewrite_and_the_job_stays_suspended_as_written() -> (
    None
):
    gates = FeatureGates(mutable_pod_resources_for_suspended_jobs=False)
    async with ApiServer(gates=gates) as server, backend_for(server) as backend:
        key = await queued(server, backend)
        before = stored_job(server)

        with pytest.raises(RequestsRefusedError) as caught:
            await backend.start_workload(key, pod_sets=[ON_CPU])

        assert caught.value.obj == "Job/default/light"
        assert "refused to change its pod template's resources" in caught.value.message
        assert "spec.template" in caught.value.message  # the API server's own words
        after = stored_job(server)
        assert after["spec"]["suspend"] is True
        assert after["spec"]["template"] == before["spec"]["template"]
        # Starting with the requests it was written with needs no rewrite: that still works.
        declared = PodSetStart(
            name="main", count=1, requests=requests_of(before["spec"]["template"]["spec"])
        )
        await backend.start_workload(key, pod_sets=[declared])
        assert stored_job(server)["spec"]["suspend"] is False


async def test_stop_waits_for_the_jobs_pods_before_it_puts_the_requests_back(
    server: ApiServer,
) -> None:
    async with backend_for(server) as backend:
        key = await queued(server, backend)
        await backend.start_workload(key, pod_sets=[ON_CPU])
        jobs_rt = server.registry.by_key(("batch", "jobs"))
        assert jobs_rt is not None
        # Its pods still run; the Job controller counts them.
        server.api.patch(
            jobs_rt, "v1", "default", "light", "application/merge-patch+json",
            {"status": {"active": 1}}, subresource="status",
        )  # fmt: skip

        with pytest.raises(ClusterError) as caught:
            await backend.stop_workload(key)
        assert caught.value.temporary  # the binder retries the eviction
        assert "waiting for its 1 active pods to stop" in str(caught.value)
        assert stored_job(server)["spec"]["suspend"] is True  # no new pods meanwhile

        server.api.patch(
            jobs_rt, "v1", "default", "light", "application/merge-patch+json",
            {"status": {"active": 0}}, subresource="status",
        )  # fmt: skip
        await backend.stop_workload(key)
        assert GPU in container_resources(stored_job(server))["limits"]


async def test_a_bare_workloads_pods_are_made_with_the_routed_requests(server: ApiServer) -> None:
    async with backend_for(server) as backend:
        container = {"name": "c", "image": "x", "resources": {"limits": {"cpu": "1", GPU: "1"}}}
        await backend.apply({
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": "default"},
            "spec": {"queueName": "gpu", "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
            ]},
        })  # fmt: skip
        await backend.start_workload("default/w", pod_sets=[ON_CPU])
        rt = server.registry.by_key(("", "pods"))
        assert rt is not None
        pod = server.api.get(rt, "default", "w-main-0")
        assert requests_of(pod["spec"]) == ON_CPU.requests


SIDECAR = {"name": "log", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}


@pytest.mark.parametrize(
    ("spec", "want", "first"),
    [
        # one container: it takes the new amount
        ({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]},
         {"cpu": 3000}, {"requests": {"cpu": "3"}}),
        # two containers and a sidecar: the first takes what the others leave
        ({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}},
                         {"name": "b", "resources": {"requests": {"cpu": "1"}}}],
          "initContainers": [SIDECAR]},
         {"cpu": 4000}, {"requests": {"cpu": "2500m"}}),
        # an init container asks for more than wanted: the first container alone carries it
        ({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
          "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "8"}}}]},
         {"cpu": 2000}, {"requests": {"cpu": "2"}}),
        # an extended resource's limit follows its request
        ({"containers": [{"name": "a", "resources": {"limits": {GPU: "1"}}}]},
         {GPU: 2000}, {"requests": {GPU: "2"}, "limits": {GPU: "2"}}),
    ],
)  # fmt: skip
def test_a_pod_spec_is_resized_to_exactly_the_wanted_requests(
    spec: dict[str, Any], want: dict[str, int], first: dict[str, Any]
) -> None:
    out = resized(spec, want)
    assert out is not None
    assert requests_of(out) == want
    assert out["containers"][0]["resources"] == first
    assert resized(out, want) is None  # already so


def test_overhead_that_cannot_be_written_away_is_refused() -> None:
    spec = {"containers": [{"name": "a"}], "overhead": {"cpu": "2"}}
    before = copy.deepcopy(spec)
    refused = r"would request \{cpu: 2\} \(overhead \{cpu: 2\} included\) instead of \{cpu: 1\}"
    with pytest.raises(ResizeError, match=refused):
        resized(spec, {"cpu": 1000})
    assert spec == before


def test_a_runtime_classs_overhead_is_counted_and_left_to_the_api_server() -> None:
    container = {"name": "a", "resources": {"requests": {"cpu": "1"}}}
    spec: dict[str, Any] = {"runtimeClassName": "kata", "containers": [container]}
    kata = {"kata": {"cpu": "500m", "memory": "100Mi"}}

    out = resized(spec, {"cpu": 4000, "memory": 100 * 2**20 * 1000}, runtime_classes=kata)

    assert out is not None
    assert out["containers"][0]["resources"] == {"requests": {"cpu": "3500m"}}
    assert "overhead" not in out  # the API server's RuntimeClass admission sets it on pods
    with pytest.raises(ResizeError, match=r'spec.runtimeClassName: RuntimeClass "kata" not found'):
        resized(spec, {"cpu": 4000})


POD_LEVEL = {
    "resources": {"requests": {"cpu": "2"}},
    "containers": [
        {"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {GPU: "1"}}},
    ],
}


def test_pod_level_resources_stay_and_the_containers_give_up_the_rest() -> None:
    out = resized(POD_LEVEL, {"cpu": 2000})  # the GPU given up, cpu as the pod sets it

    assert out is not None
    assert out["resources"] == POD_LEVEL["resources"]
    assert out["containers"][0]["resources"] == {"requests": {"cpu": "1"}}


def test_a_pod_level_resource_the_route_changes_is_refused_naming_the_field() -> None:
    # A suspended Job's template may change its containers' resources, not the pod's own.
    with pytest.raises(ResizeError, match=r"spec.resources sets cpu for the whole pod"):
        resized(POD_LEVEL, {"cpu": 4000})


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (403, "its overhead, for the routed requests, cannot be read: "),
        (None, 'spec.runtimeClassName: RuntimeClass "kata" not found'),
    ],
    ids=["runtime-class-read-refused", "runtime-class-missing"],
)
async def test_a_routed_job_whose_runtime_class_cannot_be_read_is_refused_and_stays_suspended(
    server: ApiServer, fault: int | None, said: str
) -> None:
    async with backend_for(server) as backend:
        made = gpu_job()
        made["spec"]["template"]["spec"]["runtimeClassName"] = "kata"
        await backend.apply(made)
        key = f"default/{workload_name(stored_job(server))}"
        if fault is not None:  # a binder's ClusterRole from before this rule
            server.faults.fail_next(1, status=fault, verb="get", path="/runtimeclasses/kata$")

        with pytest.raises(RequestsRefusedError) as caught:
            await backend.start_workload(key, pod_sets=[ON_CPU])

        assert said in caught.value.message
        assert stored_job(server)["spec"]["suspend"] is True
