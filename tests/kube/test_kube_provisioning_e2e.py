"""The ProvisioningRequest admission check on Kubernetes, end to end: a ClusterQueue whose
AdmissionCheck names `kueue.x-k8s.io/provisioning-request` and a ProvisioningRequestConfig,
queued Jobs applied as an operator applies them, muster's controller (in the watcher, from
its own flags) asking for capacity, and the test as the cluster-autoscaler answering each
ProvisioningRequest. Provisioned admits; Failed retries after the back-off, then rejects;
an evicted workload's requests are deleted. Faults stay on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kube_access_helpers import ACCOUNTS, own_credentials, role_grants, token
from kube_helpers import as_json, present
from kube_services_helpers import (
    Kubectl,
    condition_when,
    eventually,
    job_when,
    running_stack,
    workload_of_job,
)
from test_kube_checks_e2e import check_of, job_yaml, queues
from test_kube_services_e2e import NODE

from muster.devtools.apiserver.access import Access, Grant

pytestmark = pytest.mark.timeout(90)

AUTOSCALING = ("autoscaling.x-k8s.io", "v1")
CAPACITY = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ProvisioningRequestConfig
metadata: {name: capacity}
spec:
  provisioningClassName: check-capacity.autoscaling.x-k8s.io
  managedResources: [cpu]
  retryStrategy: {backoffLimitCount: 1, backoffBaseSeconds: 1, backoffMaxSeconds: 1}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: capacity}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: capacity}
"""


def two_pod_job(name: str) -> str:
    """Pods asking 2 cpu by their limits (the template states them as requests)."""
    return job_yaml(name, parallelism=2, resources="limits")


async def request(kubectl: Kubectl, name: str, *, namespace: str = "ml") -> dict[str, Any]:
    """The ProvisioningRequest `name` in `namespace`, once it exists."""

    async def found() -> dict[str, Any] | None:
        listed = await asyncio.to_thread(
            kubectl.custom.list_namespaced_custom_object,
            *AUTOSCALING,
            namespace,
            "provisioningrequests",
        )
        return next((r for r in as_json(listed)["items"] if r["metadata"]["name"] == name), None)

    return await eventually(found)


async def adopted(kubectl: Kubectl, template: str, request: str) -> Any:
    """The PodTemplate `template` in ml, once `request` owns it: the controller creates the
    templates (owned by the Workload) before the request, and adopts them once it exists."""

    async def owned() -> Any:
        found = await asyncio.to_thread(kubectl.core.read_namespaced_pod_template, template, "ml")
        owners = (found.metadata.owner_references if found.metadata else None) or []
        return found if owners and owners[0].name == request else None

    return await eventually(owned)


async def requests_of(kubectl: Kubectl) -> list[str]:
    listed = await asyncio.to_thread(
        kubectl.custom.list_namespaced_custom_object, *AUTOSCALING, "ml", "provisioningrequests"
    )
    return sorted(r["metadata"]["name"] for r in as_json(listed)["items"])


async def autoscaler_says(
    kubectl: Kubectl, name: str, type_: str, message: str, *, namespace: str = "ml"
) -> None:
    """What the cluster-autoscaler writes into a request's status."""
    condition = {
        "type": type_,
        "status": "True",
        "reason": type_,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    await asyncio.to_thread(
        kubectl.custom.patch_namespaced_custom_object_status,
        *AUTOSCALING,
        namespace,
        "provisioningrequests",
        name,
        {"status": {"conditions": [condition]}},
    )


def watcher_by_its_role() -> Access:
    """The admin may do anything, gang-permit and the binder too; the watcher exactly what
    its ClusterRole in k8s/rbac grants (so this test proves the role suffices)."""
    anything = frozenset({"*"})
    others = frozenset({ACCOUNTS[a][1].name for a in ("gangpermit", "binder")})
    return Access(
        tokens={t: user for t, user in ACCOUNTS.values()},
        grants=[
            Grant(groups=frozenset({"system:masters"}), verbs=anything, resources=anything),
            Grant(users=others, verbs=anything, resources=anything),
            *role_grants("watcher"),
        ],
    )


async def test_provisioned_capacity_admits_and_failures_retry_then_reject(tmp_path: Path) -> None:
    async with running_stack(
        tmp_path,
        access=watcher_by_its_role(),
        admin_token=token("admin"),
        service_flags=own_credentials(tmp_path),
    ) as stack:
        server, kubectl, events = stack.server, stack.kubectl, stack.events
        server.faults.fail_next(2, status=500, verb="create", path="/provisioningrequests$")
        server.faults.fail_next(2, status=429, verb="patch", path=r"/workloads/.*/status$")
        await kubectl.apply(CAPACITY + "---" + queues("capacity", flavor="batch") + "---" + NODE)
        await kubectl.apply(two_pod_job("train") + "---" + two_pod_job("doomed"))
        train = (await workload_of_job(kubectl, "ml", "train"))["metadata"]["name"]
        doomed = (await workload_of_job(kubectl, "ml", "doomed"))["metadata"]["name"]

        # A request per reserved workload, its podset's template as its pods will be.
        made = await request(kubectl, f"{train}-capacity-1")
        assert made["spec"]["provisioningClassName"] == "check-capacity.autoscaling.x-k8s.io"
        assert made["metadata"]["ownerReferences"][0]["name"] == train
        (pod_set,) = made["spec"]["podSets"]
        assert pod_set["count"] == 2
        template = await adopted(kubectl, pod_set["podTemplateRef"]["name"], f"{train}-capacity-1")
        assert template.template.spec.node_selector == {"pool": "batch"}
        assert template.template.spec.containers[0].resources.requests == {"cpu": "2"}
        assert (await kubectl.get("Job", "train", "ml") or {})["spec"]["suspend"] is True
        assert server.drop_watches() > 0  # cut, and resumed through 410 Gone
        server.compact()

        # Provisioned: the check is Ready, with what the pods need to consume the capacity.
        await autoscaler_says(kubectl, f"{train}-capacity-1", "Provisioned", "nodes are up")
        await job_when(kubectl, "ml", "train", suspended=False)
        wl = await condition_when(kubectl, "Workload", train, "ml", "Admitted", "True")
        assert wl["reason"] == "Admitted"
        ready = check_of(await kubectl.get("Workload", train, "ml"), "capacity")
        assert (ready["state"], ready["message"]) == ("Ready", "nodes are up")
        annotations = ready["podSetUpdates"][0]["annotations"]
        assert annotations["autoscaling.x-k8s.io/consume-provisioning-request"] == (
            f"{train}-capacity-1"
        )
        # ... which the Job's pods carry, as Kueue applies a Ready check's podSetUpdates.
        started = await kubectl.get("Job", "train", "ml") or {}
        on_pods = started["spec"]["template"]["metadata"]["annotations"]
        assert {k: on_pods.get(k) for k in annotations} == annotations

        # Failed: Retry evicts it, its request is cleaned up, and after the back-off (1 s)
        # a second attempt is made; that failing too, the check rejects it.
        await request(kubectl, f"{doomed}-capacity-1")
        await autoscaler_says(kubectl, f"{doomed}-capacity-1", "Failed", "no quota in zone")
        await events.wait_for(f"ml/{doomed}", "workload.requeued")
        await request(kubectl, f"{doomed}-capacity-2")
        assert f"{doomed}-capacity-1" not in await requests_of(kubectl)
        await autoscaler_says(kubectl, f"{doomed}-capacity-2", "Failed", "still no quota")
        evicted = await condition_when(kubectl, "Workload", doomed, "ml", "Evicted", "True")

        async def deactivated() -> dict[str, Any] | None:
            wl = present(await kubectl.get("Workload", doomed, "ml"))
            evicted = next(c for c in wl["status"]["conditions"] if c["type"] == "Evicted")
            return evicted if evicted["reason"] == "DeactivatedDueToAdmissionCheck" else None

        evicted = await eventually(deactivated)
        assert "still no quota" in evicted["message"]
        assert (await kubectl.get("Job", "doomed", "ml") or {})["spec"]["suspend"] is True

        async def cleaned() -> bool:
            return f"{doomed}-capacity-2" not in await requests_of(kubectl)

        await eventually(cleaned)
        assert await requests_of(kubectl) == [f"{train}-capacity-1"]  # the admitted one stays
