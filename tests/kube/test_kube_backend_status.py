"""StatusWriter against the API-server stand-in: coalesced, rate-limited, retried status
writes of Kueue objects, and the Kueue Workload created for a queued Job."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from budget import wait_s
from kube_backend_helpers import backend_for, job
from kube_helpers import cluster_queue

from muster.api.job import workload_name_for_job
from muster.cluster.errors import InvalidObjectError
from muster.cluster.kube import (
    Backoff,
    KubeBackend,
    ObjectRef,
    StatusWriter,
    StatusWriterSettings,
)
from muster.devtools.apiserver import ApiServer

pytestmark = pytest.mark.timeout(30)

CQ = ObjectRef(kind="ClusterQueue", name="cq")
FAST = Backoff(initial_s=0.01, max_s=0.05)


@pytest.fixture
async def backend(server: ApiServer) -> AsyncIterator[KubeBackend]:
    async with backend_for(server) as made:
        await made.apply(cluster_queue("cq"))
        yield made


def writer(backend: KubeBackend, **settings: Any) -> StatusWriter:
    made = StatusWriterSettings(**{"backoff": FAST, **settings})
    return StatusWriter(backend.transport, settings=made, clock=lambda: 1_767_225_600.0)


def status_of(server: ApiServer, plural: str, name: str, namespace: str = "") -> dict[str, Any]:
    rt = server.registry.by_key(("kueue.x-k8s.io", plural))
    assert rt is not None
    obj: dict[str, Any] = server.api.get(rt, namespace, name)
    return dict(obj.get("status") or {})


def queue_status(pending: int, *, active: bool = True) -> dict[str, Any]:
    return {
        "pendingWorkloads": pending,
        "reservingWorkloads": 1,
        "admittedWorkloads": 1,
        "flavorsReservation": [
            {
                "name": "default-flavor",
                "resources": [{"name": "cpu", "total": "3", "borrowed": "0"}],
            }
        ],
        "flavorsUsage": [
            {
                "name": "default-flavor",
                "resources": [{"name": "cpu", "total": "3", "borrowed": "0"}],
            }
        ],
        "conditions": [
            {
                "type": "Active",
                "status": "True" if active else "False",
                "reason": "Ready" if active else "FlavorNotFound",
                "message": "Can admit new workloads" if active else "flavor missing",
            }
        ],
    }


def status_writes(server: ApiServer) -> int:
    return server.requests.count(verb="patch", path="/status$", code=200)


async def test_desires_return_at_once_and_coalesce_into_a_few_writes(
    server: ApiServer, backend: KubeBackend
) -> None:
    statuses = writer(backend, qps=10.0, burst=1)
    started = time.monotonic()
    for pending in range(50):
        statuses.desire(CQ, queue_status(pending))
    assert time.monotonic() - started < 0.5  # 50 writes at 10 QPS would take 5 s
    await statuses.flush()
    await statuses.close()
    assert status_writes(server) <= 2
    assert status_of(server, "clusterqueues", "cq")["pendingWorkloads"] == 49
    assert statuses.stats.desired == 50


async def test_writes_keep_to_the_configured_rate(server: ApiServer, backend: KubeBackend) -> None:
    for i in range(12):
        await backend.apply(cluster_queue(f"q{i}"))
    statuses = writer(backend, qps=40.0, burst=2)
    started = time.monotonic()
    for i in range(12):
        statuses.desire(ObjectRef(kind="ClusterQueue", name=f"q{i}"), queue_status(i))
    await statuses.flush()
    elapsed_s = time.monotonic() - started
    await statuses.close()
    assert status_writes(server) == 12
    assert elapsed_s >= (12 - 2) / 40 * 0.9


async def test_conditions_keep_their_transition_time_while_their_status_holds(
    server: ApiServer, backend: KubeBackend
) -> None:
    now = [1_767_225_600.0]
    statuses = StatusWriter(
        backend.transport, settings=StatusWriterSettings(backoff=FAST), clock=lambda: now[0]
    )
    statuses.desire(CQ, queue_status(1))
    await statuses.flush()
    now[0] += 60
    statuses.desire(CQ, queue_status(2))
    await statuses.flush()
    held = status_of(server, "clusterqueues", "cq")["conditions"][0]
    assert held["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    now[0] += 60
    statuses.desire(CQ, queue_status(2, active=False))
    await statuses.flush()
    await statuses.close()
    changed = status_of(server, "clusterqueues", "cq")["conditions"][0]
    assert (changed["status"], changed["lastTransitionTime"]) == ("False", "2026-01-01T00:02:00Z")


async def test_failed_writes_are_retried_and_the_latest_status_wins(
    server: ApiServer, backend: KubeBackend
) -> None:
    statuses = writer(backend)
    server.faults.fail_next(3, status=429, retry_after_s=0, verb="patch", path="/status$")
    server.faults.fail_next(2, status=500, verb="patch", path="/status$")
    statuses.desire(CQ, queue_status(1))
    statuses.desire(CQ, queue_status(7))
    await statuses.flush()
    await statuses.close()
    assert status_of(server, "clusterqueues", "cq")["pendingWorkloads"] == 7
    assert statuses.stats.retries == 5
    assert server.faults.pending() == 0


async def test_fields_no_longer_desired_are_cleared(
    server: ApiServer, backend: KubeBackend
) -> None:
    job_key = await _job_with_workload(server, backend)
    ref = ObjectRef(kind="Workload", name=job_key, namespace="default")
    statuses = writer(backend)
    admitted = {
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": "default-flavor"}, "count": 3}
            ],
        },
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "ok"},
        ],
    }
    statuses.desire(ref, admitted)
    await statuses.flush()
    assert status_of(server, "workloads", job_key, "default")["admission"]["clusterQueue"] == "cq"
    evicted = {
        "conditions": [
            {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "evicted"},
            {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "by team-b"},
        ]
    }
    statuses.desire(ref, evicted)
    await statuses.flush()
    await statuses.close()
    status = status_of(server, "workloads", job_key, "default")
    assert "admission" not in status
    assert [c["type"] for c in status["conditions"]] == ["QuotaReserved", "Evicted"]


async def test_the_status_of_an_object_that_is_gone_is_dropped(
    server: ApiServer, backend: KubeBackend
) -> None:
    statuses = writer(backend)
    statuses.desire(ObjectRef(kind="LocalQueue", name="absent", namespace="default"), {})
    await statuses.flush()
    await statuses.close()
    assert statuses.stats.dropped == 1


async def _job_with_workload(server: ApiServer, backend: KubeBackend) -> str:
    await backend.apply(job("train"))
    rt = server.registry.by_key(("batch", "jobs"))
    assert rt is not None
    stored = server.api.get(rt, "default", "train")
    return await writer(backend).create_workload_for_job(stored)


async def test_a_queued_job_gets_a_workload_owned_by_it(
    server: ApiServer, backend: KubeBackend
) -> None:
    name = await _job_with_workload(server, backend)
    rt = server.registry.by_key(("batch", "jobs"))
    assert rt is not None
    stored_job = server.api.get(rt, "default", "train")
    uid = stored_job["metadata"]["uid"]
    assert name == workload_name_for_job("train", uid)
    workloads = server.registry.by_key(("kueue.x-k8s.io", "workloads"))
    assert workloads is not None
    created = server.api.get(workloads, "default", name)
    assert created["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert created["spec"]["queueName"] == "lq"
    pod_set = created["spec"]["podSets"][0]
    assert (pod_set["name"], pod_set["count"]) == ("main", 3)
    assert pod_set["template"]["spec"]["nodeSelector"] == {"disk": "ssd"}  # the Job's own
    again = await writer(backend).create_workload_for_job(stored_job)  # idempotent
    assert again == name
    with pytest.raises(InvalidObjectError, match="parallelism"):
        await writer(backend).create_workload_for_job(
            {**stored_job, "spec": {**stored_job["spec"], "parallelism": -1}}
        )


async def test_status_writes_are_not_held_back_by_the_binder_write_rate(
    server: ApiServer, backend: KubeBackend
) -> None:
    # One write per 100 s: five held back by it would take 400 s, far past the test's time,
    # while the flush's bound is what a loaded machine needs (no race with a few seconds).
    async with backend_for(server, write_qps=0.01, write_burst=1) as slow:
        for i in range(5):  # the fixture's backend is not throttled
            await backend.apply(cluster_queue(f"q{i}"))
        statuses = writer(slow, qps=0.0)
        for i in range(5):
            statuses.desire(ObjectRef(kind="ClusterQueue", name=f"q{i}"), queue_status(i))
        await statuses.flush(timeout_s=wait_s(None))
        await statuses.close()
    assert status_writes(server) == 5
