"""A ClusterQueue's Kueue status, from admission's `queue.status`."""

from __future__ import annotations

from typing import Any

from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.kueue_status.fields import kueue_condition, milli_of, quantity_of


def cluster_queue_status(status: pb.ClusterQueueStatus) -> dict[str, Any]:
    """A ClusterQueue's Kueue status from admission's `queue.status`."""
    reserved: dict[str, list[dict[str, str]]] = {}
    used: dict[str, list[dict[str, str]]] = {}
    for flavor in status.flavors:
        for r in flavor.resources:
            over = max(0, milli_of(r.used or "0") - milli_of(r.nominal or "0"))
            reserved.setdefault(flavor.name, []).append(
                {"name": r.name, "total": r.reserved or "0", "borrowed": r.borrowed or "0"}
            )
            used.setdefault(flavor.name, []).append(
                {"name": r.name, "total": r.used or "0", "borrowed": quantity_of(r.name, over)}
            )
    active = (
        kueue_condition("Active", True, "Ready", "Can admit new workloads")
        if status.active
        else kueue_condition(
            "Active",
            False,
            status.inactive_reason or "Inactive",
            f"Can't admit new workloads: {status.inactive_reason or 'inactive'}",
        )
    )
    return {
        "pendingWorkloads": status.pending_workloads,
        "reservingWorkloads": status.reserving_workloads,
        "admittedWorkloads": status.admitted_workloads,
        "flavorsReservation": [{"name": f, "resources": rs} for f, rs in reserved.items()],
        "flavorsUsage": [{"name": f, "resources": rs} for f, rs in used.items()],
        "conditions": [active],
    }
