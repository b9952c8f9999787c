"""Admission checks on Kubernetes, end to end: a ClusterQueue with an AdmissionCheck, queued
Jobs applied as an operator applies them, and the test as the check's controller, writing
its answers into each Workload's `status.admissionChecks` as every Kueue check controller
does (its own entry, under the resourceVersion it read). Ready admits, Retry evicts and
requeues, Rejected deactivates; muster never erases what the controller wrote. Every service
runs from its own flags on a real nats-server, against a stand-in that fails some writes and
cuts every watch meanwhile."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import as_json
from kube_services_helpers import (
    KUEUE,
    Events,
    Kubectl,
    condition,
    condition_when,
    eventually,
    job_when,
    running_stack,
    workload_of_job,
)
from kubernetes.client.exceptions import ApiException
from test_kube_services_e2e import NODE

pytestmark = pytest.mark.timeout(90)


def queues(check: str | None, *, flavor: str = "default-flavor") -> str:
    """A flavor (on node pool `batch`), a ClusterQueue of 16 cpu requiring AdmissionCheck
    `check` (None: no check), and LocalQueue lq in namespace ml."""
    checks = f"[{check}]" if check else "[]"
    return f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: {flavor}}}
spec: {{nodeLabels: {{pool: batch}}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  namespaceSelector: {{}}
  admissionChecks: {checks}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: {flavor}
      resources: [{{name: cpu, nominalQuota: "16"}}]
---
apiVersion: v1
kind: Namespace
metadata: {{name: ml}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: lq, namespace: ml}}
spec: {{clusterQueue: cq}}
"""


BUDGET = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: budget}
spec: {controllerName: example.com/budget}
"""


def job_yaml(name: str, *, parallelism: int = 1, resources: str = "requests") -> str:
    """A suspended Job in LocalQueue lq: `parallelism` pods asking 1 cpu as requests, or 2
    cpu as limits (`resources="limits"`)."""
    cpu = "1" if resources == "requests" else "2"
    return queued_job(name, parallelism=parallelism, resources=f'{{{resources}: {{cpu: "{cpu}"}}}}')


def queued_job(name: str, *, parallelism: int, resources: str) -> str:
    """A suspended Job in LocalQueue lq of namespace ml: `parallelism` pods whose container
    has `resources` (a YAML flow mapping)."""
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: ml
  labels: {{kueue.x-k8s.io/queue-name: lq}}
spec:
  suspend: true
  parallelism: {parallelism}
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers:
      - {{name: main, image: busybox:1.36, resources: {resources}}}
"""


def check_of(wl: dict[str, Any] | None, name: str = "budget") -> dict[str, Any]:
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        if entry["name"] == name:
            found: dict[str, Any] = entry
            return found
    return {}


async def check_when(
    kubectl: Kubectl, name: str, *, state: str, retries: int = 0
) -> dict[str, Any]:
    """The Workload once its quota is reserved and its check is in `state`."""

    async def reached() -> dict[str, Any] | None:
        wl = await kubectl.get("Workload", name, "ml")
        entry = check_of(wl)
        reserved = condition(wl, "QuotaReserved").get("status") == "True"
        at = entry.get("state") == state and entry.get("retryCount", 0) == retries
        return wl if at and (reserved or state != "Pending") else None

    return await eventually(reached)


def answers_told(events: Events, name: str) -> list[str]:
    """The check states the watcher told admission for Workload ml/`name`, in order."""
    return [e.admission_check.state for e in events.of(f"ml/{name}", "workload.admission_check")]


async def answer(kubectl: Kubectl, name: str, state: str, message: str, **fields: object) -> None:
    """What the check's controller writes: its entry (with `fields`, such as
    requeueAfterSeconds), under the resourceVersion it read (a conflict means someone wrote
    meanwhile: read again)."""

    def write() -> None:
        while True:
            wl = as_json(
                kubectl.custom.get_namespaced_custom_object(*KUEUE, "ml", "workloads", name)
            )
            entries = [dict(e) for e in wl["status"]["admissionChecks"]]
            for entry in entries:
                if entry["name"] == "budget":
                    entry.update(state=state, message=message, **fields)
                    entry["lastTransitionTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            body = {
                "metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]},
                "status": {"admissionChecks": entries},
            }
            try:
                kubectl.custom.patch_namespaced_custom_object_status(
                    *KUEUE, "ml", "workloads", name, body
                )
                return
            except ApiException as err:
                if err.status not in (409, 429, 500):
                    raise

    await asyncio.to_thread(write)


async def test_a_check_controllers_answers_admit_requeue_and_deactivate(tmp_path: Path) -> None:
    async with running_stack(tmp_path) as stack:
        server, kubectl, events = stack.server, stack.kubectl, stack.events
        server.faults.fail_next(3, status=429, verb="patch", path=r"kueue\.x-k8s\.io/.*/status$")
        server.faults.fail_next(2, status=500, verb="get", path=r"/workloads/.*/status$")
        await kubectl.apply(BUDGET + "---" + queues("budget") + "---" + NODE)
        await kubectl.apply("---".join(job_yaml(n) for n in ("ready", "retry", "rejected")))
        names = {
            job: (await workload_of_job(kubectl, "ml", job))["metadata"]["name"]
            for job in ("ready", "retry", "rejected")
        }
        for name in names.values():  # reserved, each with the check Pending, none started
            await check_when(kubectl, name, state="Pending")
        for job in names:
            assert (await kubectl.get("Job", job, "ml") or {})["spec"]["suspend"] is True
        # Every watch is cut and the history compacted: resumes get 410 and list again.
        assert server.drop_watches() > 0
        server.compact()

        # Ready: admitted and started; the controller's entry is kept as it wrote it.
        await answer(kubectl, names["ready"], "Ready", "within budget")
        await job_when(kubectl, "ml", "ready", suspended=False)
        admitted = await condition_when(
            kubectl, "Workload", names["ready"], "ml", "Admitted", "True"
        )
        assert admitted["reason"] == "Admitted"
        kept = check_of(await kubectl.get("Workload", names["ready"], "ml"))
        assert (kept["state"], kept["message"]) == ("Ready", "within budget")

        # Retry: evicted, requeued, reserved again with the check reset to Pending (one retry
        # counted); Ready then admits it.
        await answer(kubectl, names["retry"], "Retry", "over budget for now")
        await events.wait_for(f"ml/{names['retry']}", "workload.requeued")
        evicted = [e.evicted for e in events.of(f"ml/{names['retry']}", "workload.evicted")]
        assert [e.reason for e in evicted] == ["AdmissionCheck"]
        reset = check_of(await check_when(kubectl, names["retry"], state="Pending", retries=1))
        assert reset["message"] == "Reset to Pending after eviction. Previously: Retry"
        # Kueue: Requeued False (AdmissionCheck) until requeueAt, then True, BackoffFinished.
        requeued = await condition_when(
            kubectl, "Workload", names["retry"], "ml", "Requeued", "True"
        )
        assert (requeued["reason"], requeued["message"]) == (
            "BackoffFinished",
            "The workload backoff was finished",
        )
        await answer(kubectl, names["retry"], "Ready", "within budget now")
        await job_when(kubectl, "ml", "retry", suspended=False)

        # Rejected: deactivated, its quota given back, the Job never started.
        await answer(kubectl, names["rejected"], "Rejected", "never within budget")
        gone = await condition_when(kubectl, "Workload", names["rejected"], "ml", "Evicted", "True")
        assert gone["reason"] == "DeactivatedDueToAdmissionCheck"  # Kueue's, with the cause
        wl = await kubectl.get("Workload", names["rejected"], "ml")
        assert condition(wl, "QuotaReserved")["reason"] == "Deactivated"
        not_requeued = condition(wl, "Requeued")
        assert (not_requeued["status"], not_requeued["reason"]) == (
            "False",
            "DeactivatedDueToAdmissionCheck",
        )
        assert "admission" not in (wl or {})["status"]
        # As Kueue, a deactivation is an eviction: the answer is reset, and says what it was.
        rejected = check_of(wl)
        assert rejected["message"] == "Reset to Pending after eviction. Previously: Rejected"
        assert (await kubectl.get("Job", "rejected", "ml") or {})["spec"]["suspend"] is True
        assert not events.of(f"ml/{names['rejected']}", "workload.admitted")

        # The watcher tells the reset once its watch shows it the write that evicted (the one
        # whose Evicted condition was awaited above): a moment later, so wait for the telling.
        async def reset_told() -> bool:
            return len(answers_told(events, names["rejected"])) >= 2

        await eventually(reset_told)
        told = {  # each answer told admission once, whatever the faults
            job: answers_told(events, n) for job, n in names.items()
        }
        assert told == {
            "ready": ["Ready"],
            "retry": ["Retry", "Pending", "Ready"],  # the Pending: muster's reset
            "rejected": ["Rejected", "Pending"],
        }


async def test_answers_after_admission_stop_the_running_job(tmp_path: Path) -> None:
    """As Kueue's workload controller: Retry or Rejected still count once the workload runs
    (a ProvisioningRequest's capacity revoked, say). Retry stops the Job and requeues it after
    the check's requeueAfterSeconds; Rejected stops it and deactivates it."""
    async with running_stack(tmp_path) as stack:
        kubectl, events = stack.kubectl, stack.events
        await kubectl.apply(BUDGET + "---" + queues("budget") + "---" + NODE)
        await kubectl.apply("---".join(job_yaml(n) for n in ("retry", "rejected")))
        names = {
            job: (await workload_of_job(kubectl, "ml", job))["metadata"]["name"]
            for job in ("retry", "rejected")
        }
        for job, name in names.items():
            await check_when(kubectl, name, state="Pending")
            await answer(kubectl, name, "Ready", "provisioned")
            await job_when(kubectl, "ml", job, suspended=False)

        await answer(kubectl, names["retry"], "Retry", "capacity revoked", requeueAfterSeconds=1)
        key = f"ml/{names['retry']}"
        await events.wait_for(key, "workload.requeued")
        (evicted,) = [e.evicted for e in events.of(key, "workload.evicted")]
        assert (evicted.reason, evicted.message) == (
            "AdmissionCheck",
            'Evicted due to AdmissionCheck in Retry state: "budget" (capacity revoked)',
        )
        assert events.of(key, "workload.eviction_completed")  # its pods went first
        (requeued,) = [e.requeued for e in events.of(key, "workload.requeued")]
        assert requeued.reason == "BackoffFinished"  # it waited out requeueAfterSeconds

        await answer(kubectl, names["rejected"], "Rejected", "capacity revoked")
        await job_when(kubectl, "ml", "rejected", suspended=True)
        gone = await condition_when(
            kubectl, "Workload", names["rejected"], "ml", "QuotaReserved", "False"
        )
        # Kueue's workload controller keeps an inactive workload's QuotaReserved so.
        assert (gone["reason"], gone["message"]) == ("Deactivated", "The workload is deactivated")
        why = (
            'The workload is deactivated due to AdmissionCheck in Rejected state: "budget" '
            "(capacity revoked)"
        )
        wl = await kubectl.get("Workload", names["rejected"], "ml")
        evicted_wl = condition(wl, "Evicted")
        assert (evicted_wl["reason"], evicted_wl["message"]) == (
            "DeactivatedDueToAdmissionCheck",
            why,
        )
        not_requeued = condition(wl, "Requeued")  # Kueue's job reconciler, once it stopped
        assert (not_requeued["status"], not_requeued["reason"], not_requeued["message"]) == (
            "False",
            "DeactivatedDueToAdmissionCheck",
            why,
        )
        assert not events.of(f"ml/{names['rejected']}", "workload.requeued")
