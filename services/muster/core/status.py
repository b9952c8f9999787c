"""Visibility: queue statuses and pending positions, as Kueue publishes them."""

from __future__ import annotations

import msgspec

from muster.api.model import WorkloadKey


class ResourceUsage(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    total: int  # MilliUnits
    borrowed: int = 0  # MilliUnits above the queue's nominal quota


class FlavorUsage(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    resources: tuple[ResourceUsage, ...]


class QueueCondition(msgspec.Struct, frozen=True, kw_only=True):
    type: str  # "Active"
    status: str  # "True" | "False"
    reason: str
    message: str


class ClusterQueueStatus(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    pending_workloads: int
    reserving_workloads: int  # holding quota (QuotaReserved), admitted or not
    admitted_workloads: int
    flavors_reservation: tuple[FlavorUsage, ...]  # quota reserved by reserving workloads
    flavors_usage: tuple[FlavorUsage, ...]  # quota used by admitted workloads
    conditions: tuple[QueueCondition, ...] = ()


class LocalQueueStatus(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    cluster_queue: str
    pending_workloads: int
    reserving_workloads: int
    admitted_workloads: int
    flavors_reservation: tuple[FlavorUsage, ...]
    flavors_usage: tuple[FlavorUsage, ...]
    conditions: tuple[QueueCondition, ...] = ()


class PendingWorkload(msgspec.Struct, frozen=True, kw_only=True):
    """One pending workload and where it stands; positions count from 0, in admission order."""

    key: WorkloadKey
    cluster_queue: str
    local_queue: str
    priority: int
    position_in_cluster_queue: int
    position_in_local_queue: int
