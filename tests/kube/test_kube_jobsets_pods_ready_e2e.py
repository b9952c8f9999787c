"""waitForPodsReady for a JobSet on Kubernetes: every service with `--cluster-backend kube`
against the API-server stand-in with its Job and JobSet controllers. A JobSet whose child Jobs'
pods run but never pass their readiness probe is evicted at the timeout (PodsReadyTimeout),
suspended with its templates as written, requeued after the back-off and started again; once
its pods are ready, its Workload is PodsReady."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import Stack, condition, condition_when, eventually, running_stack
from kubernetes.client.exceptions import ApiException
from test_kube_jobsets_e2e import QUEUES, create, get_jobset, jobset, node_selectors, workload_of
from test_kube_services_e2e import pods_ready_config

pytestmark = pytest.mark.timeout(120)


async def jobset_when(stack: Stack, name: str, *, suspended: bool) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        js = await get_jobset(stack.kubectl, name)
        return js if js is not None and js["spec"]["suspend"] is suspended else None

    return await eventually(check)


async def bound_pods(stack: Stack, name: str, count: int) -> list[str]:
    """The names of JobSet `name`'s pods, once `count` of them are bound (and none other)."""

    async def found() -> list[str] | None:
        pods = [
            p
            for p in await stack.kubectl.list_pods("team-a")
            if p["metadata"]["name"].startswith(f"{name}-")
            and not p["metadata"].get("deletionTimestamp")
        ]
        done = all(p["spec"].get("nodeName") for p in pods)
        return [p["metadata"]["name"] for p in pods] if done and len(pods) == count else None

    return await eventually(found)


async def test_a_jobset_not_ready_in_time_is_evicted_requeued_and_ready_later(
    tmp_path: Path,
) -> None:
    # 4 s: the first start's pods never get ready. The test marks a later start's pods ready
    # as soon as they are bound; on a loaded machine that can still come after 4 s (it did
    # for a fixed second start): that start is evicted too, and the next one's are marked.
    config = pods_ready_config("4s", requeuing="{backoffBaseSeconds: 1, backoffLimitCount: 5}")
    async with running_stack(
        tmp_path, server={"job_controller": True}, kueue_config=config
    ) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(QUEUES)
        await create(kubectl, jobset("train", "low", {"driver": 1, "workers": 2}))
        name = await workload_of(kubectl, "train")
        await jobset_when(stack, "train", suspended=False)
        for pod in await bound_pods(stack, "train", 3):
            await kubectl.set_pod_phase("team-a", pod, "Running", ready=False)

        evicted = await condition_when(kubectl, "Workload", name, "team-a", "Evicted", "True")
        assert evicted["reason"] == "PodsReadyTimeout"
        stopped = await jobset_when(stack, "train", suspended=True)
        assert node_selectors(stopped) == [None, None]  # its templates as written

        # Requeued after the back-off and started again: this time its pods pass their probes.
        await condition_when(kubectl, "Workload", name, "team-a", "Requeued", "True")
        again = await jobset_when(stack, "train", suspended=False)
        assert node_selectors(again) == [{"pool": "a"}, {"pool": "a"}]
        marked: set[str] = set()  # the uids of the pods made ready

        async def ready() -> dict[str, Any] | None:
            for pod in await kubectl.list_pods("team-a"):
                meta = pod["metadata"]
                if (
                    meta["name"].startswith("train-")
                    and pod["spec"].get("nodeName")
                    and not meta.get("deletionTimestamp")
                    and meta["uid"] not in marked
                ):
                    try:
                        await kubectl.set_pod_phase("team-a", meta["name"], "Running")
                    except ApiException as err:
                        if err.status != 404:  # gone: evicted meanwhile, the next start's
                            raise
                    marked.add(meta["uid"])
            found = await kubectl.get("Workload", name, "team-a")
            return found if condition(found, "PodsReady").get("status") == "True" else None

        stored = await eventually(ready)
        assert condition(stored, "Admitted")["status"] == "True"
        assert condition(stored, "Evicted")["status"] == "False"
