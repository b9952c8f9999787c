"""Partitions through every service as its own process: what the binder's pods report comes
back in their workload's partition, so a replica whose trees hold no workload receives none
of those workloads' events (docs/events.md, "Partitions")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from admission_world import drained, durable_info
from bus_helpers import EventLog

from muster.bus import EVENTS_STREAM, Bus
from muster.bus.partitions import partition_of, queue_tree
from muster.bus.subjects import workload_subject
from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.launcher.stack import Stack

pytestmark = pytest.mark.timeout(120)

SHARDS = 2
WORKLOADS = 6
KUEUE = "kueue.x-k8s.io/v1beta2"
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-0"},
    "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
}


def queue_names() -> list[str]:
    """Two queues whose trees (`cq/<name>`) shard 0 decides, and so do their stand-ins: a
    `submitted` the gateway sends before it learnt the queue's partition stays with shard 0."""
    fits = [
        f"q{i}"
        for i in range(200)
        if partition_of(f"cq/q{i}") % SHARDS == 0
        and partition_of(queue_tree("team", f"q{i}")) % SHARDS == 0
    ]
    return fits[:2]


_QUEUE = """apiVersion: {KUEUE}
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: 8}}]}}]
---
apiVersion: {KUEUE}
kind: LocalQueue
metadata: {{namespace: team, name: {name}}}
spec: {{clusterQueue: {name}}}"""


def config(names: list[str]) -> str:
    flavor = f"apiVersion: {KUEUE}\nkind: ResourceFlavor\nmetadata: {{name: default}}"
    return "\n---\n".join([flavor, *(_QUEUE.format(KUEUE=KUEUE, name=n) for n in names)])


def workload(name: str, queue: str) -> str:
    return f"""apiVersion: {KUEUE}
kind: Workload
metadata:
  namespace: team
  name: {name}
  annotations: {{muster.dev/run-seconds: "3600"}}
spec:
  queueName: {queue}
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]
"""


@pytest.fixture
async def stack(nats_server: str, tmp_path: Path) -> AsyncIterator[Stack]:
    running = Stack(nats_url=nats_server, cluster="local", shards=SHARDS, speed=1, log_dir=tmp_path)
    try:
        await running.start()
        yield running
    finally:
        await running.stop()


async def delivered(bus: Bus, durable: str) -> int:
    info = await durable_info(bus, durable)
    assert info.delivered is not None
    return int(info.delivered.consumer_seq)


async def unpartitioned(bus: Bus) -> dict[str, int]:
    """Workload subjects stored without a partition token, with their counts."""
    info = await bus.js.stream_info(EVENTS_STREAM, subjects_filter=workload_subject("*", "*"))
    return dict(info.state.subjects or {})


async def test_pod_reports_reach_only_the_replica_deciding_their_workloads(
    nats_server: str, stack: Stack, bus: Bus, events: EventLog
) -> None:
    names = queue_names()
    backend = await SimBackend.connect(nats_server, cluster="local")
    await backend.apply(NODE)
    await backend.close()
    async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
        gateway = services_pb2_grpc.GatewayStub(channel)
        await gateway.Submit(services_pb2.SubmitRequest(manifest=config(names)))
        for durable in ("admission-0", "admission-1"):
            await drained(bus, durable)
        before = await delivered(bus, "admission-1")
        for i in range(WORKLOADS):
            manifest = workload(f"w{i}", names[i % 2])
            await gateway.Submit(services_pb2.SubmitRequest(manifest=manifest))
        for i in range(WORKLOADS):
            await events.wait_for("running", workload=f"team/w{i}", timeout_s=30)
    for durable in ("admission-0", "admission-1"):
        await drained(bus, durable)
    sources = {e.source for e in events.seen if e.type == "workload.admitted"}
    assert sources == {"admission/0"}
    assert await unpartitioned(bus) == {}  # the pods' running too
    assert await delivered(bus, "admission-1") == before  # not one event of theirs
