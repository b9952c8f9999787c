"""The pods the simulated cluster's client makes for an admitted workload (`start_workload`), as
stored, byte for byte: a change to how they are made must not change what a reader sees. And
what the client keeps of them for a later bind stays bounded."""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from typing import Any

import pytest
from memory_kv import MemoryKV

from muster.api.model import Toleration
from muster.bus.kv import Entry
from muster.cluster.backend import PodSetStart
from muster.cluster.batches import BATCH_SIZE
from muster.cluster.sim import ManualClock, SimBackend, SimStore
from muster.cluster.sim import backend as backend_module
from muster.cluster.sim.backend import _new_uid

GI = 2**30 * 1000  # one Gi in milli-units
NOW_S = 1_700_000_000.123456
UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


class Bucket(MemoryKV):
    """The calls `SimStore` makes of a `muster.bus.Bucket`, in memory."""

    name = "MUSTER_SIM_local"

    async def get(self, key: str) -> Entry | None:  # type: ignore[override]
        return await self.last_write(key) if key in self.data else None

    async def write(self, key: str, data: bytes, *, last: int, deleting: bool = False) -> int:
        return self._store(key, None if deleting else data, last)

    async def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.data if k.startswith(prefix))


def sim(bucket: Bucket, **extra: Any) -> SimBackend:
    uids = iter(range(1_000_000))
    return SimBackend(
        SimStore(bucket),  # type: ignore[arg-type]  # MemoryKV has the calls SimStore makes
        clock=ManualClock(NOW_S),
        new_uid=lambda: f"uid-{next(uids)}",
        **extra,
    )


ON_NODE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "annotations": {
            "muster.dev/pod-set": "main",
            "muster.dev/run-seconds": "30",
        },
        "creationTimestamp": "2023-11-14T22:13:20.123456Z",
        "labels": {"muster.dev/admission": "7", "muster.dev/workload": "train"},
        "name": "train-main-0",
        "namespace": "ml",
        "ownerReferences": [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "controller": True,
                "kind": "Workload",
                "name": "train",
            }
        ],
        "uid": "uid-0",
    },
    "spec": {
        "containers": [
            {"name": "main", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
        ],
        "nodeName": "node-a",
        "schedulerName": "muster",
    },
    "status": {
        "conditions": [
            {
                "lastTransitionTime": "2023-11-14T22:13:20.123456Z",
                "status": "True",
                "type": "PodScheduled",
            }
        ],
        "phase": "Pending",
    },
}


def unbound(index: int, uid: str) -> dict[str, Any]:
    """Pod `index` of podset "workers", created with no node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "annotations": {
                "muster.dev/pod-set": "workers",
                "muster.dev/run-seconds": "5",
                "team": "a",
            },
            "creationTimestamp": "2023-11-14T22:13:20.123456Z",
            "labels": {"muster.dev/workload": "sweep"},
            "name": f"sweep-workers-{index}",
            "namespace": "ml",
            "ownerReferences": [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "controller": True,
                    "kind": "Workload",
                    "name": "sweep",
                }
            ],
            "uid": uid,
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {"cpu": "2", "ephemeral-storage": "10Gi", "nvidia.com/gpu": "1"}
                    },
                }
            ],
            "nodeSelector": {"pool": "gpu"},
            "schedulerName": "muster",
            "tolerations": [{"effect": "NoSchedule", "key": "gpu", "operator": "Exists"}],
        },
        "status": {"phase": "Pending"},
    }


def stored(bucket: Bucket) -> dict[str, Any]:
    return {key: json.loads(value) for key, value in bucket.data.items()}


def test_a_pod_created_on_its_node_is_stored_as_before() -> None:
    bucket = Bucket()
    one = PodSetStart(
        name="main",
        count=1,
        requests={"memory": GI, "cpu": 500},
        annotations={"muster.dev/run-seconds": "30"},
    )
    backend = sim(bucket)
    asyncio.run(
        backend.start_workload(
            "ml/train", pod_sets=(one,), admission=7, nodes={"train-main-0": "node-a"}
        )
    )
    assert stored(bucket) == {"pod.ml.train-main-0": ON_NODE}
    # Sorted keys, no spaces: the bytes a watcher decodes.
    assert (
        bucket.data["pod.ml.train-main-0"]
        == json.dumps(ON_NODE, sort_keys=True, separators=(",", ":")).encode()
    )


def test_pods_created_unbound_are_stored_as_before() -> None:
    bucket = Bucket()
    workers = PodSetStart(
        name="workers",
        count=3,
        requests={"cpu": 2000, "nvidia.com/gpu": 1000, "ephemeral-storage": 10 * GI},
        node_selector={"pool": "gpu"},
        tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),),
        annotations={"muster.dev/run-seconds": "5", "team": "a"},
    )
    backend = sim(bucket, placed_first=False)
    asyncio.run(backend.start_workload("ml/sweep", pod_sets=(workers,)))
    pods = stored(bucket)
    assert sorted(pods) == [f"pod.ml.sweep-workers-{i}" for i in range(3)]
    uids = {pod["metadata"]["uid"] for pod in pods.values()}
    assert uids == {"uid-0", "uid-1", "uid-2"}
    for i in range(3):
        pod = pods[f"pod.ml.sweep-workers-{i}"]
        assert pod == unbound(i, pod["metadata"]["uid"])


def test_a_gang_larger_than_a_batch_is_created_on_its_nodes_every_pod_once() -> None:
    bucket = Bucket()
    count = BATCH_SIZE + 44
    big = PodSetStart(name="main", count=count, requests={"cpu": 100})
    nodes = {f"big-main-{i}": f"node-{i % 7}" for i in range(count) if i != 5}  # one not yet
    asyncio.run(sim(bucket).start_workload("ml/big", pod_sets=(big,), nodes=nodes))
    pods = stored(bucket)
    assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods.values()} == nodes
    assert len({p["metadata"]["uid"] for p in pods.values()}) == count - 1


def test_pods_created_on_their_nodes_are_not_kept_for_a_bind() -> None:
    """A pod made on its node is never bound by this client: keeping it is memory for nothing."""
    bucket = Bucket()
    backend = sim(bucket)
    one = PodSetStart(name="main", count=2, requests={"cpu": 100})
    for i in range(50):
        nodes = {f"w{i}-main-0": "node-a", f"w{i}-main-1": "node-b"}
        asyncio.run(backend.start_workload(f"ml/w{i}", pod_sets=(one,), nodes=nodes))
    assert len(bucket.data) == 100
    assert backend.kept_for_binds() == 0


def test_pods_created_unbound_are_kept_for_their_bind_up_to_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backend_module, "_CREATED_KEPT", 3)
    bucket = Bucket()
    backend = sim(bucket, placed_first=False)
    five = PodSetStart(name="main", count=5, requests={"cpu": 100})
    asyncio.run(backend.start_workload("ml/w", pod_sets=(five,)))
    assert backend.kept_for_binds() == 3

    async def bind_all() -> None:  # the two forgotten are read, the rest bound from memory
        for i in range(5):
            await backend.bind("ml", f"w-main-{i}", "node-a")

    asyncio.run(bind_all())
    assert backend.kept_for_binds() == 0
    assert {json.loads(v)["spec"]["nodeName"] for v in bucket.data.values()} == {"node-a"}


def test_the_default_uid_is_a_random_uuid_never_repeated() -> None:
    backend = SimBackend(SimStore(Bucket()))  # type: ignore[arg-type]
    one = PodSetStart(name="main", count=BATCH_SIZE, requests={"cpu": 100})
    asyncio.run(backend.start_workload("ml/w", pod_sets=(one,), nodes=None))
    pods = stored(backend.store._bucket)  # type: ignore[arg-type]
    uids = [p["metadata"]["uid"] for p in pods.values()]
    assert len(set(uids)) == BATCH_SIZE
    for uid in uids:
        assert UUID4.fullmatch(uid), uid
        assert str(uuid.UUID(uid)) == uid
        assert uuid.UUID(uid).version == 4


def test_a_forked_process_makes_other_uids_than_its_parent() -> None:
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        os.write(write, _new_uid().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read, "rb") as pipe:
        childs = pipe.read().decode()
    assert UUID4.fullmatch(childs)
    assert childs != _new_uid()
