"""Hostile objects written through the Kubernetes API, against every service on the API-server
stand-in: each one no Workload can be made of is refused with a Warning Event on the object
itself naming the field (where `kubectl describe` shows it: Kueue's webhooks would have refused
it when written, and muster has none), is copied to the dead-letter stream (cut when too large
to store), each once however often it changes after (a label, a kubelet's status), and
nothing else stops: a Job queued after them runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats.js.errors
import pytest
from kube_services_helpers import Kubectl, Stack, condition, eventually, running_stack
from kubernetes.client.exceptions import ApiException

from muster.bus import DLQ_STREAM
from muster.devtools.apiserver import ApiServer, default_resources

pytestmark = pytest.mark.timeout(90)

SETUP = """
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {kubernetes.io/hostname: node-1}}
status:
  capacity: {cpu: "16", memory: 64Gi, ephemeral-storage: 200Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: team-a}
spec: {clusterQueue: cq}
"""
MIB = 1024 * 1024
LONGEST = "l" * 63  # a Job's name: its pods' job-name label holds it


def job(
    name: str, *, cpu: str = "1", queue: str = "lq", resources: int = 0, **spec: Any
) -> dict[str, Any]:
    """A queued Job of one pod asking for `cpu`, and for one each of `resources` extended
    resources no flavor has."""
    requests = {"cpu": cpu, **{f"example.com/r{i}": "1" for i in range(resources)}}
    container = {"name": "c", "image": "busybox", "resources": {"requests": requests}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": queue},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"schedulerName": "muster", "restartPolicy": "Never",
                         "containers": [container]},
            },
            **spec,
        },
    }  # fmt: skip


def annotated(obj: dict[str, Any], value_bytes: int) -> dict[str, Any]:
    obj["metadata"]["annotations"] = {"example.com/notes": "x" * value_bytes}
    return obj


def podsets(name: str, count: int = 1) -> dict[str, Any]:
    """A Kueue Workload written directly, with `count` podsets (Kueue allows 8, muster 18)."""
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1m"}}}]}}
    sets = [{"name": f"ps{i}", "count": 1, "template": template} for i in range(count)]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"queueName": "lq", "podSets": sets},
    }


# object written -> (reason of its Warning Event, the start of its note)
HOSTILE: dict[str, tuple[dict[str, Any], str, str]] = {
    "huge-cpu": (
        job("huge-cpu", cpu="999999999999999999999999Ei"),
        "ErrWorkloadCompose",
        "Job/team-a/huge-cpu: spec.template.spec.containers[0].resources.requests.cpu: ",
    ),
    "bad-queue": (
        job("bad-queue", queue="Bad_Queue"),
        "ErrWorkloadCompose",
        'Job/team-a/bad-queue: metadata.labels["kueue.x-k8s.io/queue-name"]: must be a DNS-1123',
    ),
    "wide": (
        job("wide", parallelism=2**31 - 1),
        "ErrWorkloadCompose",
        "Job/team-a/wide: spec.parallelism: must be at most 100000",
    ),
    "annotated": (
        annotated(job("annotated"), MIB),  # past what NATS stores in one message, too
        "ErrWorkloadCompose",
        "Job/team-a/annotated: metadata.annotations: must have at most 262144 bytes",
    ),
    "crowded": (  # its workload, naming each resource, is past what one event may hold
        job("crowded", resources=30_000),
        "ErrWorkloadCompose",
        "team-a/job-crowded-",
    ),
    "w" * 64: (  # its pods would be labelled with a name past what a label value holds
        podsets("w" * 64),
        "Invalid",
        f"Workload/team-a/{'w' * 64}: metadata.name: must be no more than 63 characters",
    ),
    "node-huge": (  # the API server takes any quantity; no scheduler can count this one
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "node-huge"},
            "status": {"capacity": {"cpu": "999999999999999999999999Ei", "pods": "110"}},
        },
        "Invalid",
        "Node/node-huge: status.capacity.cpu: must be at most 9223372036854775807m",
    ),
}


def flavorful(count: int) -> dict[str, Any]:
    """A ClusterQueue of one resource group offering `count` flavors."""
    flavors = [{"name": f"f{i}", "resources": [{"name": "cpu", "nominalQuota": "1"}]}
               for i in range(count)]  # fmt: skip
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "flavorful"},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": flavors}]},
    }


def long_podset_name() -> dict[str, Any]:
    found = podsets("long-podset")
    found["spec"]["podSets"][0]["name"] = "p" * 64
    return found


# Past a limit of Kueue's CRDs (k8s/crds, as Kueue's own): refused by the API server when
# written, before muster sees them -> (the field, the API server's message).
SERVER_REFUSED: dict[str, tuple[dict[str, Any], str, str]] = {
    "flavorful": (
        flavorful(1000),
        "spec.resourceGroups[0].flavors",
        "Too many: 1000: must have at most 64 items",
    ),
    "many-podsets": (
        podsets("many-podsets", 20),
        "spec.podSets",
        "Too many: 20: must have at most 18 items",
    ),
    "long-podset": (
        long_podset_name(),
        "spec.podSets[0].name",
        "Too long: may not be more than 63 bytes",
    ),
}


async def create(stack: Stack, obj: dict[str, Any]) -> None:
    """Write `obj` as kubectl would, unchecked by the client's models."""
    await write(stack.kubectl, obj)


async def write(kubectl: Kubectl, obj: dict[str, Any]) -> None:
    if obj["kind"] == "Node":
        await kubectl.apply(json.dumps(obj))  # with its status, as a kubelet writes it
    elif obj["kind"] == "Job":
        create_job: Any = kubectl.batch.create_namespaced_job  # takes a dict as well
        await asyncio.to_thread(create_job, "team-a", obj)
    elif obj["kind"] == "ClusterQueue":
        await asyncio.to_thread(
            kubectl.custom.create_cluster_custom_object,
            "kueue.x-k8s.io", "v1beta1", "clusterqueues", obj,
        )  # fmt: skip
    else:
        await asyncio.to_thread(
            kubectl.custom.create_namespaced_custom_object,
            "kueue.x-k8s.io", "v1beta1", "team-a", "workloads", obj,
        )  # fmt: skip


async def warnings(stack: Stack) -> dict[str, tuple[str, str]]:
    """Each object of team-a (or cluster-scoped) with a Warning Event: (reason, message)."""
    found: dict[str, tuple[str, str]] = {}
    for namespace in ("team-a", "default"):
        listed = await asyncio.to_thread(stack.kubectl.core.list_namespaced_event, namespace)
        found |= {
            str(e.involved_object.name): (str(e.reason), e.message or "")
            for e in listed.items
            if e.type == "Warning"
        }
    return found


async def dead_letters(stack: Stack) -> list[Any]:
    try:
        count = (await stack.bus.js.stream_info(DLQ_STREAM)).state.messages
    except nats.js.errors.NotFoundError:
        return []
    return [await stack.bus.js.get_msg(DLQ_STREAM, seq) for seq in range(1, count + 1)]


async def test_an_object_no_workload_can_be_made_of_says_why_on_itself_and_the_rest_runs(
    tmp_path: Path,
) -> None:
    options = {"resources": default_resources("1.37"), "job_controller": True}
    async with running_stack(tmp_path, server=options) as stack:
        await stack.kubectl.apply(SETUP)
        for obj, _, _ in HOSTILE.values():
            await create(stack, obj)
        await create(stack, job("after"))
        await create(stack, job(LONGEST))  # its Workload's name labels each of its pods
        await create(stack, job("wanting", resources=10_000))

        async def told() -> dict[str, tuple[str, str]] | None:
            found = await warnings(stack)
            return found if set(HOSTILE) <= set(found) else None

        said = await eventually(told)
        for name, (_, reason, note) in HOSTILE.items():
            assert said[name][0] == reason, (name, said[name])
            assert said[name][1].startswith(note), (name, said[name])
            assert len(said[name][1]) <= 1024  # an Event's note, never the hostile value whole

        async def others_bound() -> list[str] | None:
            pods = await stack.kubectl.list_pods("team-a")
            bound = sorted(p["metadata"]["name"][:5] for p in pods if p["spec"].get("nodeName"))
            return bound if len(bound) == 2 else None

        assert await eventually(others_bound) == ["after", LONGEST[:5]]

        # A Job asking for 10 000 resources no flavor has is told why, within what a condition
        # holds (the API server refuses a status write whose message is past 32 KiB).
        async def waiting() -> dict[str, Any] | None:
            for wl in await stack.kubectl.workloads("team-a"):
                found = condition(wl, "QuotaReserved")
                if wl["metadata"]["name"].startswith("job-wanting-") and found:
                    return found
            return None

        reserved = await eventually(waiting)
        assert reserved["reason"] == "NoMatchingFlavor"
        assert reserved["message"].startswith("couldn't assign flavors to pod set main: ")
        assert len(reserved["message"].encode()) <= 32 * 1024
        assert reserved["message"].endswith(" ...")

        # Every one is kept for the operator too; the one too large to store, without its body.
        letters = {m.headers["Muster-Dlq-Subject"]: m for m in await dead_letters(stack)}
        cut = letters["obj.Job.team-a.annotated"]
        assert not cut.data
        assert int(cut.headers["Muster-Dlq-Cut"]) == pytest.approx(MIB, rel=0.01)
        assert cut.headers["Muster-Dlq-Reason"].startswith(HOSTILE["annotated"][2])
        assert letters["obj.Job.team-a.huge-cpu"].data  # the others whole

        # Told once per generation and problem: a label written on a refused Job (its spec and
        # generation unchanged), as the Job controller's status is, tells nothing again.
        patch_job = stack.kubectl.batch.patch_namespaced_job
        relabel = {"metadata": {"labels": {"example.com/seen": "yes"}}}
        await asyncio.to_thread(patch_job, "huge-cpu", "team-a", relabel)
        beat = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}  # a kubelet's
        patch_node = stack.kubectl.core.patch_node_status
        await asyncio.to_thread(patch_node, "node-huge", beat)
        await create(stack, job("sentinel"))  # watched after the label: once it runs, seen

        async def sentinel_bound() -> bool:
            pods = await stack.kubectl.list_pods("team-a")
            return any(p["metadata"]["name"].startswith("sentinel") and p["spec"].get("nodeName")
                       for p in pods)  # fmt: skip

        await eventually(sentinel_bound)
        subjects = [m.headers["Muster-Dlq-Subject"] for m in await dead_letters(stack)]
        assert sorted(subjects) == sorted(set(subjects)), "an object dead-lettered twice"
        assert subjects.count("obj.Job.team-a.huge-cpu") == 1
        assert subjects.count("node.node-huge") == 1
        stack.check_alive()


async def test_what_kueues_crds_bound_the_api_server_refuses_naming_the_field() -> None:
    # The stand-in holds custom resources to their CRD's maxItems and maxLength, as a real
    # API server does: muster's own (larger) limits are never what a user meets first.
    async with ApiServer() as standin:
        kubectl = Kubectl(standin.url)
        try:
            await kubectl.install_crds()
            await kubectl.apply(SETUP.split("---")[0])  # the namespace
            for name, (obj, field, message) in SERVER_REFUSED.items():
                with pytest.raises(ApiException) as refused:
                    await write(kubectl, obj)
                status = json.loads(refused.value.body or "{}")
                assert status["code"] == 422, name
                assert status["details"]["causes"] == [
                    {"reason": refused_reason(message), "field": field, "message": message}
                ], name
            await write(kubectl, flavorful(16))  # at the limit: taken
        finally:
            kubectl.close()


def refused_reason(message: str) -> str:
    return "FieldValueTooMany" if message.startswith("Too many") else "FieldValueTooLong"
