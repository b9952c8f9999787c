"""What a simulation shows: the JSON/YAML document (docs/simulate-json.md) and the text tables.

Everything here is a pure function of a `SimulationResult` and returns a string or plain data,
so the same input always gives byte-identical output; only `muster.cli` prints.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import yaml

from muster.api.encode import is_byte_resource, quantities_to_strings, workload_to_kueue
from muster.api.model import Admission, ClusterQueue, Condition, Node, Toleration, Workload
from muster.api.quantity import format_quantity
from muster.api.wellknown import SCHEDULER_NAME, WORKLOAD_LABEL
from muster.core.events import Event, EventType
from muster.core.status import (
    ClusterQueueStatus,
    FlavorUsage,
    LocalQueueStatus,
    PendingWorkload,
    QueueCondition,
)
from muster.sim.groups import group_entry
from muster.sim.placement import PodState
from muster.sim.runner import SimulationResult, WorkloadTiming

CONTRACT_VERSION = "2.12"  # of the document below; bump with a note in docs/simulate-json.md
OUTCOME_MESSAGE_WIDTH = 80
# Kueue's prefix on flavor-assignment messages; the table keeps only the part after it.
FLAVOR_MESSAGE_PREFIX = re.compile(r"^couldn't assign flavors to pod set [^:]*: ")

# --- the JSON / YAML document ----------------------------------------------------------------


def to_document(result: SimulationResult) -> dict[str, Any]:
    """The one object `muster simulate -o json` prints, as plain lists, dicts and scalars."""
    by_cq: dict[str, list[dict[str, Any]]] = {}
    by_lq: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in result.pending:
        entry = pending_entry(p)
        by_cq.setdefault(p.cluster_queue, []).append(entry)
        by_lq.setdefault((entry["metadata"]["namespace"], p.local_queue), []).append(entry)
    document = {
        "workloads": [workload_entry(wl, result) for wl in result.workloads],
        "clusterQueues": [
            {**cluster_queue_entry(status), "pendingWorkloads": by_cq.get(status.name, [])}
            for status in result.cluster_queues
        ],
        "localQueues": [
            {
                **local_queue_entry(status),
                "pendingWorkloads": by_lq.get((status.namespace, status.name), []),
            }
            for status in result.local_queues
        ],
        "pods": [pod_entry(state) for state in result.pods],
        "nodes": [node_entry(node) for node in result.nodes],
        "podGroups": [group_entry(group) for group in result.groups],
        "events": [event_entry(event) for event in result.events],
    }
    builtins: dict[str, Any] = msgspec.to_builtins(document)
    return builtins


def workload_entry(wl: Workload, result: SimulationResult) -> dict[str, Any]:
    """The Kueue Workload manifest; with MultiKueue, `status.clusterName` (the worker cluster
    it runs or ran in); the messages of its checks that MultiKueue or a registered controller
    answers, as those controllers write them."""
    manifest = workload_to_kueue(wl)
    cluster = result.clusters.get(wl.key)
    messages = {
        **result.controller_messages.get(wl.key, {}),
        **result.check_messages.get(wl.key, {}),
    }
    if cluster is None and not messages:
        return manifest
    status = manifest.setdefault("status", {})
    if cluster is not None:
        status["clusterName"] = cluster
    for check in status.get("admissionChecks", []):
        if check["name"] in messages:
            check["message"] = messages[check["name"]]
    return manifest


def render_json(result: SimulationResult) -> str:
    return json.dumps(to_document(result), sort_keys=True, indent=2) + "\n"


def render_yaml(result: SimulationResult) -> str:
    text: str = yaml.safe_dump(
        to_document(result), sort_keys=True, default_flow_style=False, allow_unicode=True
    )
    return text


def event_entry(event: Event) -> dict[str, Any]:
    """Every event's six keys; a Routed event also says `from` and `to` (ClusterQueues)."""
    entry: dict[str, Any] = {
        "time": number(event.time),
        "type": str(event.type),
        "object": event.object,
        "reason": event.reason,
        "message": event.message,
        "by": event.by,
    }
    if event.type is EventType.ROUTED:
        entry.update({"from": event.from_queue, "to": event.to_queue})
    return entry


def pending_entry(p: PendingWorkload) -> dict[str, Any]:
    """One item of Kueue's visibility API (PendingWorkloadsSummary), positions from 0."""
    namespace, name = p.key.split("/", 1)
    return {
        "metadata": {"namespace": namespace, "name": name},
        "localQueueName": p.local_queue,
        "priority": p.priority,
        "positionInClusterQueue": p.position_in_cluster_queue,
        "positionInLocalQueue": p.position_in_local_queue,
    }


def cluster_queue_entry(status: ClusterQueueStatus) -> dict[str, Any]:
    return {
        "name": status.name,
        "status": {
            "pendingWorkloads": status.pending_workloads,
            "reservingWorkloads": status.reserving_workloads,
            "admittedWorkloads": status.admitted_workloads,
            "flavorsReservation": flavor_entries(status.flavors_reservation, borrowed=True),
            "flavorsUsage": flavor_entries(status.flavors_usage, borrowed=True),
            "conditions": condition_entries(status.conditions),
        },
    }


def local_queue_entry(status: LocalQueueStatus) -> dict[str, Any]:
    """Kueue's LocalQueue shape (v1beta2 names); its resources carry no `borrowed`."""
    return {
        "namespace": status.namespace,
        "name": status.name,
        "spec": {"clusterQueue": status.cluster_queue},
        "status": {
            "pendingWorkloads": status.pending_workloads,
            "reservingWorkloads": status.reserving_workloads,
            "admittedWorkloads": status.admitted_workloads,
            "flavorsReservation": flavor_entries(status.flavors_reservation, borrowed=False),
            "flavorsUsage": flavor_entries(status.flavors_usage, borrowed=False),
            "conditions": condition_entries(status.conditions),
        },
    }


def flavor_entries(flavors: tuple[FlavorUsage, ...], *, borrowed: bool) -> list[dict[str, Any]]:
    """Usage per flavor and resource, quantities as Kubernetes strings, in the engine's order."""
    entries = []
    for flavor in flavors:
        resources = []
        for usage in flavor.resources:
            resource = {"name": usage.name, "total": quantity(usage.name, usage.total)}
            if borrowed:
                resource["borrowed"] = quantity(usage.name, usage.borrowed)
            resources.append(resource)
        entries.append({"name": flavor.name, "resources": resources})
    return entries


def pod_entry(state: PodState) -> dict[str, Any]:
    """A v1 Pod as the run left it: `spec.nodeName` once bound, the PodScheduled condition."""
    pod = state.pod
    meta = pod.meta
    metadata: dict[str, Any] = {"namespace": meta.namespace, "name": meta.name}
    if meta.labels:
        metadata["labels"] = dict(meta.labels)
    if meta.annotations:
        metadata["annotations"] = dict(meta.annotations)
    if meta.owner_references:
        metadata["ownerReferences"] = [
            {"apiVersion": o.api_version, "kind": o.kind, "name": o.name}
            for o in meta.owner_references
        ]
    container: dict[str, Any] = {"name": "main"}
    if pod.requests:
        container["resources"] = {"requests": quantities_to_strings(pod.requests)}
    spec: dict[str, Any] = {"schedulerName": pod.scheduler_name, "containers": [container]}
    if state.node:
        spec["nodeName"] = state.node
    if pod.priority is not None:
        spec["priority"] = pod.priority
    if pod.priority_class_name:
        spec["priorityClassName"] = pod.priority_class_name
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        spec["tolerations"] = [toleration_entry(t) for t in pod.tolerations]
    if pod.scheduling_group:
        spec["schedulingGroup"] = {"podGroupName": pod.scheduling_group}
    if pod.workload_ref is not None:
        ref = pod.workload_ref
        spec["workloadRef"] = {"name": ref.name, "podGroup": ref.pod_group}
        if ref.pod_group_replica_key:
            spec["workloadRef"]["podGroupReplicaKey"] = ref.pod_group_replica_key
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": pod_status(state),
    }


def pod_status(state: PodState) -> dict[str, Any]:
    """phase; reason and message once Failed; PodScheduled True once bound, False with the
    reason while muster waits to place it."""
    status: dict[str, Any] = {"phase": state.phase}
    if state.phase == "Failed" and state.reason:
        status.update(reason=state.reason, message=state.message)
    scheduled: dict[str, str] | None = None
    if state.node:
        scheduled = {"type": "PodScheduled", "status": "True"}
    elif state.phase == "Pending" and state.reason:
        scheduled = {
            "type": "PodScheduled",
            "status": "False",
            "reason": state.reason,
            "message": state.message,
        }
    if scheduled is not None:
        status["conditions"] = [scheduled]
    return status


def toleration_entry(t: Toleration) -> dict[str, str]:
    entry = {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
    return {k: v for k, v in entry.items() if v}


def node_entry(node: Node) -> dict[str, Any]:
    """A v1 Node as the scenario wrote it (the fields placement reads)."""
    metadata: dict[str, Any] = {"name": node.meta.name}
    if node.meta.labels:
        metadata["labels"] = dict(node.meta.labels)
    spec: dict[str, Any] = {}
    if node.taints:
        spec["taints"] = [
            {"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
            for t in node.taints
        ]
    if node.unschedulable:
        spec["unschedulable"] = True
    ready = "True" if node.ready else "False"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "allocatable": quantities_to_strings(node.allocatable),
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def quantity(resource: str, milli: int) -> str:
    """A Kubernetes quantity string: "500m", "4", and binary suffixes for bytes ("32Gi")."""
    return format_quantity(milli, binary=is_byte_resource(resource))


def condition_entries(conditions: tuple[QueueCondition, ...]) -> list[dict[str, str]]:
    return [
        {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
        for c in conditions
    ]


def number(value: float) -> int | float:
    """Seconds as a JSON number: integral values without a fraction ("30", not "30.0")."""
    return int(value) if value.is_integer() else value


# --- text tables ------------------------------------------------------------------------------


def render_table(result: SimulationResult) -> str:
    """One row per workload, then one row per ClusterQueue flavor; with nodes, one row per pod
    and one per node. Plain aligned columns. A scenario of pods and nodes alone (no Kueue
    workloads or queues) shows only the pod and node tables."""
    tables = []
    if result.workloads or result.cluster_queues or not result.nodes:
        tables += [workload_table(result), cluster_queue_table(result)]
    routed = [e for e in result.events if e.type is EventType.ROUTED]
    if routed:
        tables.append(routing_table(routed))
    if result.nodes:
        tables += [pod_table(result.pods), node_table(result.nodes, result.pods)]
    return "\n\n".join(tables) + "\n"


def workload_table(result: SimulationResult) -> str:
    cluster_queue_of = {(lq.namespace, lq.name): lq.cluster_queue for lq in result.local_queues}
    # With nodes, an admitted workload runs only once its pods are bound.
    running = {
        f"{p.pod.meta.namespace}/{p.pod.meta.labels[WORKLOAD_LABEL]}"
        for p in result.pods
        if p.phase == "Running" and WORKLOAD_LABEL in p.pod.meta.labels
    }
    # With MultiKueue, a CLUSTER column: where each workload runs or ran.
    clusters = bool(result.check_messages)
    header = ("WORKLOAD", "QUEUE", "FLAVORS", *(("CLUSTER",) if clusters else ()))
    rows: list[tuple[str, ...]] = [(*header, "WAITED", "RAN", "OUTCOME")]
    for wl in result.workloads:
        timing = result.timings.get(wl.key)
        local_queue = wl.queue_name or "default"
        admission = wl.admission or (timing.last_admission if timing is not None else None)
        if admission is not None:
            cluster_queue = admission.cluster_queue
        else:
            cluster_queue = cluster_queue_of.get((wl.meta.namespace, local_queue), "?")
        what = outcome(wl)
        if what == "Running" and result.nodes and wl.key not in running:
            what = "Admitted: waiting for nodes"
        rows.append(
            (
                wl.key,
                f"{local_queue} → {cluster_queue}",
                flavors_of(admission),
                *((result.clusters.get(wl.key, "-"),) if clusters else ()),
                waited(timing),
                "-" if timing is None else seconds(timing.ran_s),
                what + evictions(timing),
            )
        )
    return aligned(rows)


def cluster_queue_table(result: SimulationResult) -> str:
    specs = {cq.name: cq for cq in result.cluster_queue_specs}
    rows = [("CLUSTERQUEUE", "PENDING", "RESERVING", "ADMITTED", "FLAVOR", "RESERVED/NOMINAL")]
    for status in result.cluster_queues:
        counts = (
            str(status.pending_workloads),
            str(status.reserving_workloads),
            str(status.admitted_workloads),
        )
        spec = specs.get(status.name)
        flavor_rows = quota_rows(status, spec) if spec is not None else [("-", "-")]
        for i, (flavor, quota) in enumerate(flavor_rows):
            name_and_counts = (status.name, *counts) if i == 0 else ("", "", "", "")
            rows.append((*name_and_counts, flavor, quota))
    # Its workloads only say "ClusterQueue x is inactive": say why under the table.
    notes = [
        f"ClusterQueue {status.name} is inactive ({c.reason}): {c.message}"
        for status in result.cluster_queues
        for c in status.conditions
        if c.type == "Active" and c.status == "False"
    ]
    return "\n".join([aligned(rows), *notes])


def routing_table(events: Sequence[Event]) -> str:
    """Each routing decision: when, which workload, from which ClusterQueue to which, why."""
    rows = [("AT", "ROUTED", "FROM", "TO", "POLICY", "WHY")]
    for e in events:
        why = e.message.split(": ", 1)[-1]
        rows.append(
            (seconds(e.time), e.object, e.from_queue, e.to_queue, e.reason, shorten(why, 120))
        )
    return aligned(rows)


def pod_table(pods: Sequence[PodState]) -> str:
    header = ("POD", "GANG", "NODE", "PHASE", "BOUND", "ENDED", "WHY")
    rows = [header] + [
        (
            state.key,
            state.gang or "-",
            state.node or "-",
            state.phase,
            "-" if state.bound_s is None else seconds(state.bound_s),
            "-" if state.ended_s is None else seconds(state.ended_s),
            pod_why(state),
        )
        for state in pods
    ]
    return aligned(rows)


def pod_why(state: PodState) -> str:
    if state.reason:
        return shorten(f"{state.reason}: {state.message}" if state.message else state.reason)
    if state.phase == "Pending" and state.pod.scheduler_name != SCHEDULER_NAME:
        return f"left to scheduler {state.pod.scheduler_name}"
    return ""


def node_table(nodes: Sequence[Node], pods: Sequence[PodState]) -> str:
    """Each node's pods (all that were bound there, and those running at the end) and what the
    running ones request, against its allocatable."""
    requested: dict[str, dict[str, int]] = {}
    running: dict[str, int] = {}
    bound: dict[str, int] = {}
    for pod in pods:
        if not pod.node:
            continue
        bound[pod.node] = bound.get(pod.node, 0) + 1
        if pod.phase == "Running":
            running[pod.node] = running.get(pod.node, 0) + 1
            used = requested.setdefault(pod.node, {})
            for resource, milli in pod.pod.requests.items():
                used[resource] = used.get(resource, 0) + milli
    rows = [("NODE", "PODS", "RUNNING", "REQUESTED/ALLOCATABLE")]
    for node in nodes:
        name = node.meta.name
        used = requested.get(name, {})
        usage = "  ".join(
            f"{resource} {quantity(resource, used.get(resource, 0))}/{quantity(resource, total)}"
            for resource, total in sorted(node.allocatable.items())
            if resource != "pods"
        )
        rows.append((name, str(bound.get(name, 0)), str(running.get(name, 0)), usage or "-"))
    return aligned(rows)


def quota_rows(status: ClusterQueueStatus, spec: ClusterQueue) -> list[tuple[str, str]]:
    """(flavor, "cpu 4/6  memory 8Gi/24Gi") for each flavor of the spec, in spec order."""
    reserved = {
        (flavor.name, usage.name): usage.total
        for flavor in status.flavors_reservation
        for usage in flavor.resources
    }
    rows = []
    for group in spec.resource_groups:
        for flavor in group.flavors:
            quotas = "  ".join(
                f"{q.name} {quantity(q.name, reserved.get((flavor.name, q.name), 0))}"
                f"/{quantity(q.name, q.nominal_quota)}"
                for q in flavor.resources
            )
            rows.append((flavor.name, quotas))
    return rows or [("-", "-")]


def flavors_of(admission: Admission | None) -> str:
    """The flavors an admission uses: "gpu" when one flavor serves every resource, else
    "default-flavor[cpu,memory] gpu[nvidia.com/gpu]"; "-" without an admission."""
    if admission is None:
        return "-"
    by_flavor: dict[str, set[str]] = {}
    for assignment in admission.pod_set_assignments:
        for resource, flavor in assignment.flavors.items():
            by_flavor.setdefault(flavor, set()).add(resource)
    if len(by_flavor) == 1:
        return next(iter(by_flavor))
    return " ".join(f"{f}[{','.join(sorted(rs))}]" for f, rs in sorted(by_flavor.items())) or "-"


def evictions(timing: WorkloadTiming | None) -> str:
    if timing is None or timing.evictions == 0:
        return ""
    return f" (evicted {timing.evictions}x)"


def waited(timing: WorkloadTiming | None) -> str:
    """Seconds queued over every wait, not only the first: one evicted and requeued waited
    again (to the end of the run for one still queued)."""
    return "-" if timing is None else seconds(timing.waited_s)


def outcome(wl: Workload) -> str:
    """Finished, Rejected, Inactive, Running, Evicted or "Pending: <why>", from the conditions."""
    conditions = {c.type: c for c in wl.conditions}
    if is_true(conditions, "Finished"):
        return "Finished"
    if any(check.state == "Rejected" for check in wl.admission_checks):
        return "Rejected"
    if not wl.active:
        evicted = conditions.get("Evicted")
        # Kueue's reasons: "AdmissionCheck" (muster), "DeactivatedDueToAdmissionCheck" (1.x).
        by_check = evicted is not None and "AdmissionCheck" in evicted.reason
        return "Rejected" if by_check else "Inactive"
    if is_true(conditions, "Admitted"):
        return "Running"
    if is_true(conditions, "Evicted"):
        return "Evicted"
    if is_true(conditions, "QuotaReserved"):
        return "Pending: waiting for admission checks"
    reserved = conditions.get("QuotaReserved")
    why = (reserved.message or reserved.reason) if reserved is not None else ""
    why = FLAVOR_MESSAGE_PREFIX.sub("", why)
    return f"Pending: {shorten(why)}" if why else "Pending"


def is_true(conditions: Mapping[str, Condition], type_: str) -> bool:
    condition = conditions.get(type_)
    return condition is not None and condition.status == "True"


def shorten(text: str, width: int = OUTCOME_MESSAGE_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def seconds(value: float) -> str:
    """Seconds for people: "30", "2.5", "0.125"."""
    if value.is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def aligned(rows: Sequence[tuple[str, ...]]) -> str:
    """Left-aligned columns, two spaces apart, no trailing blanks."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = (
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
    return "\n".join(lines)
