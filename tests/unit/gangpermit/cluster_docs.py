"""Cluster objects as documents for gangpermit unit tests, and a state fed with them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from muster.api import decode_documents
from muster.bus import new_event
from muster.contracts.v1 import events_pb2
from muster.gangpermit.state import ClusterObject, GangPermitState

GANG = "ns/train/workers"


Doc = dict[str, Any]


def objects(docs: list[Doc]) -> list[ClusterObject]:
    found, errors = decode_documents(docs)
    assert errors == []
    return found  # type: ignore[return-value]  # only cluster kinds here


def node(name: str, cpu: str = "2") -> list[Doc]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu}},
        }
    ]


def gang(
    name: str = "train", *, pods: int = 2, cpu: str = "1", min_count: int | None = None
) -> list[Doc]:
    """A scheduling.k8s.io Workload with gang `workers` and its pods."""
    policy = {"gang": {"minCount": min_count or pods}}
    workload = {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"podGroups": [{"name": "workers", "policy": policy}]},
    }
    return [workload, *(pod(f"{name}-{i}", workload=name, cpu=cpu)[0] for i in range(pods))]


def preemption(victim_pods: int) -> list[Doc]:
    """Node `a` full with the pods of gang `low` (one CPU each); a gang `high` of higher
    priority whose one pod needs the whole node."""
    low = gang("low", pods=victim_pods)
    for doc in low[1:]:
        doc["spec"]["nodeName"] = "a"
    high = gang("high", pods=1, cpu=str(victim_pods))
    high[1]["spec"]["priority"] = 100
    return node("a", cpu=str(victim_pods)) + low + high


def pod(
    name: str,
    *,
    workload: str = "",
    cpu: str = "1",
    node_name: str = "",
    uid: str = "",
    labels: dict[str, str] | None = None,
) -> list[Doc]:
    spec: Doc = {
        "schedulerName": "muster",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
    }
    if workload:
        spec["workloadRef"] = {"name": workload, "podGroup": "workers"}
    if node_name:
        spec["nodeName"] = node_name
    meta = {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}", "labels": labels or {}}
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}]


def fed(
    docs: list[Doc], stream: Sequence[events_pb2.Envelope] = (), **settings: Any
) -> GangPermitState:
    """A state that replayed `stream`, then read the cluster `docs` (a restart does this)."""
    state = GangPermitState(cluster="local", **settings)
    for env in stream:
        state.apply_event(env)
    state.restored()
    for obj in objects(docs):
        state.put(obj)
    return state


def looked_up(state: GangPermitState) -> list[Any]:
    """The pods whose gang `state` looks up from now on (`GangFeed.membership`), in order."""
    looked: list[Any] = []
    membership = state.feed.membership

    def counted(pod: Any) -> Any:
        looked.append(pod)
        return membership(pod)

    state.feed.membership = counted  # type: ignore[method-assign]
    return looked


def event(field: str, payload: Any, *, workload: str, **kw: Any) -> events_pb2.Envelope:
    return new_event(field, payload, cluster="local", workload=workload, source="test", **kw)


def kueue_workload(name: str, count: int) -> list[events_pb2.Envelope]:
    manifest = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "queueName": "q",
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
                        }
                    },
                }
            ],
        },
    }
    manifest_json = json.dumps(manifest)
    submitted = events_pb2.WorkloadSubmitted(manifest_json=manifest_json)
    assignment = events_pb2.PodSetAssignment(name="main", count=count)
    admission = events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    # Under 256 KiB, an admission carries the manifest's copy (docs/events.md).
    # No admission check: admitted with its reservation, its pods placed before they exist.
    admitted = events_pb2.WorkloadAdmitted(
        admission=admission, manifest_json=manifest_json, with_reservation=True
    )
    return [
        event("submitted", submitted, workload=f"ns/{name}"),
        event("admitted", admitted, workload=f"ns/{name}"),
    ]
