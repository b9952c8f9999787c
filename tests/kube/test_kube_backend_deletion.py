"""Deleting a workload's object through KubeBackend takes its pods with it, as the gateway's
Delete does on Kubernetes (`gateway/kube_control.py`): the delete asks for Background
propagation, so the garbage collector removes the dependents even of a Job, whose own default
is to orphan them. Against the API-server stand-in, with its Job controller and collector."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kube_backend_helpers import backend_for, bare_workload, job

from muster.cluster.backend import PodSetStart
from muster.cluster.kube import KubeBackend
from muster.cluster.kube.jobs import workload_name
from muster.devtools.apiserver import ApiServer

pytestmark = pytest.mark.timeout(30)

ADMITTED = PodSetStart(name="main", count=2, requests={"cpu": 1000})


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with ApiServer(job_controller=True) as running:
        yield running


@pytest.fixture
async def backend(server: ApiServer) -> AsyncIterator[KubeBackend]:
    async with backend_for(server) as made:
        yield made


async def pod_names(backend: KubeBackend) -> list[str]:
    """The pods' names, sorted. The stand-in's controllers (Job, garbage collector) run right
    after the request that caused them, before it serves the next one."""
    return sorted(p.name for p in await backend.list_pods())


async def test_deleting_a_started_job_deletes_its_pods(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(job("train", parallelism=2))
    rt = server.registry.by_key(("batch", "jobs"))
    assert rt is not None
    key = f"default/{workload_name(server.api.get(rt, 'default', 'train'))}"
    await backend.start_workload(key, pod_sets=[ADMITTED])
    assert len(await pod_names(backend)) == 2  # the Job controller made them

    assert await backend.delete("Job", "train", namespace="default")

    assert await pod_names(backend) == []


async def test_deleting_a_bare_workload_deletes_the_pods_muster_made_for_it(
    backend: KubeBackend,
) -> None:
    await backend.apply(bare_workload("wl"))
    await backend.start_workload("default/wl", pod_sets=[ADMITTED])
    assert await pod_names(backend) == ["wl-main-0", "wl-main-1"]

    assert await backend.delete("Workload", "wl", namespace="default")

    assert await pod_names(backend) == []
