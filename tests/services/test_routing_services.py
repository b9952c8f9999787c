"""Routing through the services (docs/routing.md): a Job declares alternatives, admission routes
it, and it runs where it was routed, with the alternative's requests.

A real nats-server and one simulated cluster (watcher, gang-permit, binder and kubelet, as
`muster run` starts them) with a GPU node and a CPU node; admission, preemption and the gateway
as in production. Everything goes in as YAML through `Gateway.Submit`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import grpc.aio
import pytest
import yaml
from admission_world import Running, start_admission, start_preemption
from bus_helpers import EventLog
from gateway_helpers import RunningGateway, running_gateway, stored_count
from multicluster_stack import SimCluster, about, sim_clusters, wait_for

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(90)
T = TypeVar("T")

GPU_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: gpu
  annotations: {muster.dev/routing-policy: fastest}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: gpu-nodes
      resources: [{name: cpu, nominalQuota: 8}, {name: nvidia.com/gpu, nominalQuota: 1}]
"""
CONFIG = f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: gpu-nodes}}
spec: {{nodeLabels: {{pool: gpu}}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: cpu-nodes}}
spec: {{nodeLabels: {{pool: cpu}}}}
---{GPU_QUEUE}---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: cpu}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: cpu-nodes
      resources: [{{name: cpu, nominalQuota: 8}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: gpu, namespace: sd}}
spec: {{clusterQueue: gpu}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: cpu, namespace: sd}}
spec: {{clusterQueue: cpu}}
"""

LIGHT_ALTERNATIVES = """\
- queueName: cpu
  requests: {nvidia.com/gpu: 0}
  runSeconds: 20
"""


def job(
    name: str,
    *,
    queue: str,
    cpu: int,
    gpu: int = 0,
    run_seconds: int,
    alternatives: str | None = None,
) -> str:
    """A Job's YAML, as a user writes it."""
    requests = {"cpu": cpu, **({"nvidia.com/gpu": gpu} if gpu else {})}
    annotations = {"muster.dev/run-seconds": str(run_seconds)}
    if alternatives is not None:
        annotations["muster.dev/alternatives"] = alternatives
    container = {"name": "c", "resources": {"requests": requests}}
    return yaml.safe_dump(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": "sd",
                "labels": {"kueue.x-k8s.io/queue-name": queue},
                "annotations": annotations,
            },
            "spec": {"template": {"spec": {"containers": [container]}}},
        }
    )


def node(name: str, *, pool: str, gpu: int = 0) -> dict[str, Any]:
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    if gpu:
        capacity["nvidia.com/gpu"] = str(gpu)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "pool": pool}},
        "status": {"capacity": capacity},
    }


class World:
    def __init__(self, cluster: SimCluster, gateway: RunningGateway, events: EventLog) -> None:
        self.cluster = cluster
        self.gateway = gateway
        self.events = events

    async def submit(self, manifest: str) -> str:
        """The key of the first object submitted: a Job's is its Workload's."""
        request = services_pb2.SubmitRequest(manifest=manifest)
        reply: services_pb2.SubmitResponse = await self.gateway.gateway.Submit(request)
        return reply.objects[0].key


@pytest.fixture
async def world(bus: Bus, bus_config: BusConfig, events: EventLog) -> AsyncIterator[World]:
    services: list[Running] = []
    async with sim_clusters(bus, "local") as clusters, running_gateway(bus) as gateway:
        try:
            services.append(await start_admission(bus_config))
            services.append(await start_preemption(bus_config))
            for svc in services:
                await svc.wait_serving()
            cluster = clusters["local"]
            await cluster.backend.apply(node("gpu-1", pool="gpu", gpu=1))
            await cluster.backend.apply(node("cpu-1", pool="cpu"))
            world = World(cluster, gateway, events)
            await world.submit(CONFIG)
            yield world
        finally:
            for svc in services:
                await svc.stop()


async def visible(
    call: Callable[[], Awaitable[T]], accepts: Callable[[T], bool], *, timeout_s: float = 10.0
) -> T:
    """Poll a Visibility call until its reply is accepted: admission writes what it reads to
    the KV bucket a little after each round."""
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                reply = await call()
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND:  # not written yet
                    raise
            else:
                if accepts(reply):
                    return reply
            await asyncio.sleep(0.05)


async def test_a_light_job_is_routed_to_the_cpu_queue_and_runs_there_without_a_gpu(
    world: World,
) -> None:
    events = world.events
    visibility = world.gateway.visibility
    # The GPU: one job runs, five wait, 30 s each. The CPU queue: a job of its own for 100 s.
    gpu_jobs = [
        await world.submit(job(f"gpu-{i}", queue="gpu", cpu=1, gpu=1, run_seconds=30))
        for i in range(6)
    ]
    native = await world.submit(job("native", queue="cpu", cpu=8, run_seconds=100))
    await wait_for(events, "admitted", native)
    # On the GPU, light would finish after about 180 + 26 s; on the CPU after 100 + 20 s.
    light = await world.submit(
        job(
            "light",
            queue="gpu",
            cpu=4,
            gpu=1,
            run_seconds=26,
            alternatives=LIGHT_ALTERNATIVES,
        )
    )

    routed = await wait_for(events, "routed", light)
    assert (
        routed.routed.from_cluster_queue,
        routed.routed.to_cluster_queue,
        routed.routed.queue_name,
        routed.routed.policy,
    ) == ("gpu", "cpu", "cpu", "fastest")
    assert routed.routed.message.startswith("routed from ClusterQueue gpu to cpu (LocalQueue cpu)")
    watched = [
        env
        async for env in world.gateway.events.Watch(
            services_pb2.WatchRequest(
                workload=light, types=["workload.routed"], from_sequence=1, history_only=True
            )
        )
    ]
    assert [env.event_id for env in watched] == [routed.event_id]

    # It waits on the CPU queue, behind that queue's own job, and the queues say so.
    pending = services_pb2.PendingWorkloadsRequest(cluster_queue="cpu")
    waiting = await visible(
        lambda: visibility.PendingWorkloads(pending),
        lambda r: [i.name for i in r.items] == [light.split("/")[1]],
    )
    assert (waiting.items[0].cluster_queue, waiting.items[0].local_queue) == ("cpu", "cpu")
    await visible(  # pending: light; reserving: the CPU queue's own job
        lambda: visibility.QueueStatus(services_pb2.QueueStatusRequest(cluster_queue="cpu")),
        lambda r: (
            [(cq.pending_workloads, cq.reserving_workloads) for cq in r.cluster_queues] == [(1, 1)]
            and [(lq.name, lq.pending_workloads) for lq in r.local_queues] == [("cpu", 1)]
        ),
    )

    # The CPU's own job ends: light is admitted there, with the alternative's requests.
    admitted = await wait_for(events, "admitted", light, timeout_s=20)
    assert admitted.admitted.admission.cluster_queue == "cpu"
    (assignment,) = admitted.admitted.admission.pod_set_assignments
    assert (dict(assignment.resource_usage), dict(assignment.flavors)) == (
        {"cpu": "4"},
        {"cpu": "cpu-nodes"},
    )
    await wait_for(events, "bound", light)
    finished = await wait_for(events, "finished", light)
    assert finished.finished.succeeded
    (pod,) = await world.cluster.pods_of(light)
    assert (pod.node_name, dict(pod.requests)) == ("cpu-1", {"cpu": 4000})
    assert pod.run_seconds == 20

    # Announced once; no GPU job was moved (they have no alternatives).
    assert len(about(events, "routed", light)) == 1
    assert all(about(events, "routed", key) == [] for key in gpu_jobs)


BAD_ALTERNATIVES = job(
    "bad",
    queue="gpu",
    cpu=4,
    gpu=1,
    run_seconds=26,
    alternatives="- queueName: cpu\n  runSeconds: -3\n",
)
BAD_POLICY = GPU_QUEUE.replace("fastest", "quickest")


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        (
            BAD_ALTERNATIVES,
            'Job/sd/bad: metadata.annotations["muster.dev/alternatives"][0].runSeconds: must be '
            "a finite number of seconds >= 0, got -3",
        ),
        (
            BAD_POLICY,
            'ClusterQueue/gpu: metadata.annotations["muster.dev/routing-policy"]: must be one '
            "of static, threshold, fastest, got 'quickest'",
        ),
    ],
    ids=["alternatives", "routing-policy"],
)
async def test_bad_routing_annotations_are_refused_with_the_object_and_field(
    bus: Bus, manifest: str, problem: str
) -> None:
    async with running_gateway(bus) as gateway:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gateway.gateway.Submit(services_pb2.SubmitRequest(manifest=manifest))

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == problem
    assert await stored_count(bus) == 0  # nothing published
