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

from muster.api.encode import is_byte_resource, workload_to_kueue
from muster.api.model import Admission, ClusterQueue, Condition, Workload
from muster.api.quantity import format_quantity
from muster.core.events import Event
from muster.core.status import (
    ClusterQueueStatus,
    FlavorUsage,
    LocalQueueStatus,
    PendingWorkload,
    QueueCondition,
)
from muster.sim.runner import SimulationResult, WorkloadTiming

CONTRACT_VERSION = 1  # of the document below; bump with a note in docs/simulate-json.md
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
        "workloads": [workload_to_kueue(wl) for wl in result.workloads],
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
        "pods": [],
        "events": [event_entry(event) for event in result.events],
    }
    builtins: dict[str, Any] = msgspec.to_builtins(document)
    return builtins


def render_json(result: SimulationResult) -> str:
    return json.dumps(to_document(result), sort_keys=True, indent=2) + "\n"


def render_yaml(result: SimulationResult) -> str:
    text: str = yaml.safe_dump(
        to_document(result), sort_keys=True, default_flow_style=False, allow_unicode=True
    )
    return text


def event_entry(event: Event) -> dict[str, Any]:
    return {
        "time": number(event.time),
        "type": str(event.type),
        "object": event.object,
        "reason": event.reason,
        "message": event.message,
        "by": event.by,
    }


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
    """One row per workload, then one row per ClusterQueue flavor; plain aligned columns."""
    return f"{workload_table(result)}\n\n{cluster_queue_table(result)}\n"


def workload_table(result: SimulationResult) -> str:
    cluster_queue_of = {(lq.namespace, lq.name): lq.cluster_queue for lq in result.local_queues}
    rows = [("WORKLOAD", "QUEUE", "FLAVORS", "WAITED", "RAN", "OUTCOME")]
    for wl in result.workloads:
        timing = result.timings.get(wl.key)
        local_queue = wl.queue_name or "default"
        admission = wl.admission or (timing.last_admission if timing is not None else None)
        if admission is not None:
            cluster_queue = admission.cluster_queue
        else:
            cluster_queue = cluster_queue_of.get((wl.meta.namespace, local_queue), "?")
        rows.append(
            (
                wl.key,
                f"{local_queue} → {cluster_queue}",
                flavors_of(admission),
                waited(timing),
                "-" if timing is None else seconds(timing.ran_s),
                outcome(wl) + evictions(timing),
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
    if timing is None or timing.first_admitted_s is None:
        return "-"
    return seconds(timing.first_admitted_s - timing.arrived_s)


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
