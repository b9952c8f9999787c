"""Queue statuses and pending lists for the MUSTER_VISIBILITY bucket, built from the engine.

Keys (docs/services.md): `cq.<name>` → `ClusterQueueStatus`, `lq.<namespace>.<name>` →
`LocalQueueStatus`, `pending.<cq>` → `PendingWorkloadsResponse` (every pending workload of the
ClusterQueue, in admission order). A replica writes only the queues of its own shard.
`visibility_values` is pure; `VisibilityWriter` remembers what it wrote and writes changes;
`VisibilityPace` says how long the loop rests between writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

from muster.admission.shards import Sharding
from muster.api import format_quantity
from muster.api.encode import is_byte_resource
from muster.bus.kv import valid_key
from muster.contracts.v1 import events_pb2 as pb
from muster.contracts.v1 import services_pb2
from muster.core.engine import Engine
from muster.core.status import FlavorUsage

log = logging.getLogger(__name__)


def quantity(resource: str, milli: int) -> str:
    """A Kubernetes quantity string: binary suffixes for byte resources only."""
    return format_quantity(milli, binary=is_byte_resource(resource))


def cluster_queue_status(engine: Engine, name: str) -> pb.ClusterQueueStatus:
    """ClusterQueue `name`'s counts and, per flavor and resource, its quota and usage."""
    status = engine.cluster_queue_status(name)
    flavors: dict[str, pb.FlavorStatus] = {}
    for row in engine.quota(name):
        flavor = flavors.get(row.flavor)
        if flavor is None:
            flavor = flavors[row.flavor] = pb.FlavorStatus(name=row.flavor)
        res = row.resource
        flavor.resources.append(
            pb.ResourceStatus(
                name=res,
                nominal=quantity(res, row.nominal),
                borrowing_limit=""
                if row.borrowing_limit is None
                else quantity(res, row.borrowing_limit),
                reserved=quantity(res, row.reserved),
                used=quantity(res, row.used),
                borrowed=quantity(res, row.borrowed),
                available=quantity(res, row.available),
            )
        )
    active = next((c for c in status.conditions if c.type == "Active"), None)
    cq = engine.config.cluster_queues[name]
    return pb.ClusterQueueStatus(
        name=name,
        cohort=cq.cohort or "",
        pending_workloads=status.pending_workloads,
        reserving_workloads=status.reserving_workloads,
        admitted_workloads=status.admitted_workloads,
        flavors=list(flavors.values()),
        active=active is None or active.status == "True",
        inactive_reason="" if active is None or active.status == "True" else active.reason,
    )


def local_queue_status(engine: Engine, namespace: str, name: str) -> pb.LocalQueueStatus:
    """LocalQueue counts, with reserved and used quantities per flavor and resource."""
    status = engine.local_queue_status(namespace, name)
    used = _totals(status.flavors_usage)
    flavors = [
        pb.FlavorStatus(
            name=flavor.name,
            resources=[
                pb.ResourceStatus(
                    name=r.name,
                    reserved=quantity(r.name, r.total),
                    used=quantity(r.name, used.get((flavor.name, r.name), 0)),
                )
                for r in flavor.resources
            ],
        )
        for flavor in status.flavors_reservation
    ]
    return pb.LocalQueueStatus(
        namespace=namespace,
        name=name,
        cluster_queue=status.cluster_queue,
        pending_workloads=status.pending_workloads,
        reserving_workloads=status.reserving_workloads,
        admitted_workloads=status.admitted_workloads,
        flavors=flavors,
    )


def _totals(usage: Sequence[FlavorUsage]) -> dict[tuple[str, str], int]:
    return {(f.name, r.name): r.total for f in usage for r in f.resources}


def pending_workloads(engine: Engine, cluster_queue: str) -> services_pb2.PendingWorkloadsResponse:
    """Every pending workload of `cluster_queue`, in admission order, with positions."""
    items = []
    for p in engine.pending_workloads(cluster_queue):
        namespace, name = p.key.split("/", 1)
        items.append(
            services_pb2.PendingWorkload(
                namespace=namespace,
                name=name,
                local_queue=p.local_queue,
                cluster_queue=p.cluster_queue,
                priority=p.priority,
                position_in_cluster_queue=p.position_in_cluster_queue,
                position_in_local_queue=p.position_in_local_queue,
            )
        )
    return services_pb2.PendingWorkloadsResponse(items=items, total=len(items))


def cluster_queue_key(name: str) -> str:
    return f"cq.{name}"


def local_queue_key(namespace: str, name: str) -> str:
    return f"lq.{namespace}.{name}"


def pending_key(cluster_queue: str) -> str:
    return f"pending.{cluster_queue}"


def visibility_values(engine: Engine, sharding: Sharding) -> dict[str, bytes]:
    """Every visibility key this shard owns, with its serialized value."""
    values: dict[str, bytes] = {}
    owned: set[str] = set()
    for name in engine.cluster_queue_names():
        if not sharding.owns_cluster_queue(name):
            continue
        owned.add(name)
        values[cluster_queue_key(name)] = cluster_queue_status(engine, name).SerializeToString()
        values[pending_key(name)] = pending_workloads(engine, name).SerializeToString()
    for namespace, name in engine.local_queue_keys():
        lq = engine.config.local_queues[f"{namespace}/{name}"]
        exists = lq.cluster_queue in engine.config.cluster_queues
        if (exists and lq.cluster_queue in owned) or (
            not exists and sharding.owns_local_queue(namespace, name)
        ):
            status = local_queue_status(engine, namespace, name)
            values[local_queue_key(namespace, name)] = status.SerializeToString()
    return values


class KeyValueWriter(Protocol):
    """The part of a JetStream key-value bucket the writer uses."""

    async def put(self, key: str, value: bytes) -> int: ...

    async def delete(self, key: str) -> None: ...


class VisibilityWriter:
    """Writes the keys whose values changed since the last flush; deletes vanished ones."""

    def __init__(self, kv: KeyValueWriter) -> None:
        self.kv = kv
        self.written: dict[str, bytes] = {}
        self.refused: set[str] = set()  # invalid keys, logged once

    def changes(self, values: Mapping[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
        """(keys to put with their values, keys to delete), against what was written."""
        put = {k: v for k, v in values.items() if self.written.get(k) != v}
        gone = [k for k in self.written if k not in values]
        return put, gone

    async def write(self, values: Mapping[str, bytes]) -> list[str]:
        """Store the changes, side by side (each key is written once); returns the keys put.

        A key is remembered as written only once its write succeeded, so a failed write
        leaves the rest to the next call.
        """
        put, gone = self.changes(values)
        for key in [k for k in put if not valid_key(k)]:
            # A name stored before names were checked (a LocalQueue `../x`): it cannot be a key,
            # and must not keep the other keys from being written. Said once.
            del put[key]
            if key not in self.refused:
                self.refused.add(key)
                log.error("visibility key %r is not a valid key: not written", key)

        async def put_one(key: str, value: bytes) -> None:
            await self.kv.put(key, value)
            self.written[key] = value

        async def delete_one(key: str) -> None:
            await self.kv.delete(key)
            self.written.pop(key, None)

        results = await asyncio.gather(
            *(put_one(k, v) for k, v in put.items()),
            *(delete_one(k) for k in gone),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return list(put)


class VisibilityPace:
    """How long the visibility loop rests after a write, so that views lag by a known bound.

    A write for at most one round's change (the engine was quiet: a kubectl apply, one
    workload, a test's step) is followed by `quiet_s`, so the next change shows within it.
    Each write for several rounds' changes doubles the rest, up to `busy_s`: under a stream of
    rounds the views are computed and written about once per `busy_s` instead of once per
    `quiet_s`. A write costs a computation over every record of the replica's queues and a KV
    put (and a `queue.status`) per changed queue, with their PubAcks: a cost per second that
    every replica pays whatever share of the work it has. A rest is never shorter than
    `cpu_share` times what computing the views took, so they get at most 1/`cpu_share` of the
    replica's time.
    """

    def __init__(self, *, quiet_s: float, busy_s: float, cpu_share: float) -> None:
        if not 0 <= quiet_s <= busy_s:
            raise ValueError(
                f"visibility rests need 0 <= quiet ({quiet_s:g}s) <= busy ({busy_s:g}s)"
            )
        self.quiet_s = quiet_s
        self.busy_s = busy_s
        self.cpu_share = cpu_share
        self._rest_s = quiet_s

    def rest_s(self, *, rounds: int, spent_s: float) -> float:
        """The rest after a write of what `rounds` rounds changed, whose views took `spent_s`
        to compute."""
        if rounds <= 1:
            self._rest_s = self.quiet_s
        else:
            self._rest_s = min(self.busy_s, max(self._rest_s * 2, self.quiet_s))
        return max(self._rest_s, spent_s * self.cpu_share)
