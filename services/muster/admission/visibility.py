"""Queue statuses and pending lists for the MUSTER_VISIBILITY bucket, built from the engine.

Keys (docs/services.md): `cq.<name>` → `ClusterQueueStatus`, `lq.<namespace>.<name>` →
`LocalQueueStatus`, and the pending workloads of a ClusterQueue in admission order, in pages
of `PENDING_PAGE` (`PendingWorkloadsResponse`, positions set): `pending.<cq>` the first,
`pending-from.<start>.<cq>` the one from position `start` on (only as many as there are).
A replica writes only the queues of its own shard.

`VisibilityRenderer` keeps the values between renders and recomputes only the queues the
engine says changed, and of a pending list only the pages from the first position that moved:
a render after one arrival costs about what one queue's pages from it cost, not what every
queue holds. `visibility_values` is the same render done afresh. `VisibilityWriter` remembers
what it wrote and writes changes; `VisibilityPace` says how long the loop rests between writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Protocol

from muster.admission.shards import Sharding
from muster.api import format_quantity
from muster.api.encode import is_byte_resource
from muster.bus.kv import valid_key
from muster.contracts.v1 import events_pb2 as pb
from muster.contracts.v1 import services_pb2
from muster.core.engine import Engine
from muster.core.queue_index import Changes
from muster.core.status import FlavorUsage, PendingWorkload

log = logging.getLogger(__name__)

Message = pb.ClusterQueueStatus | pb.LocalQueueStatus | services_pb2.PendingWorkloadsResponse


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


# Workloads per pending key: the gateway's default page (a request reads one or two keys, at
# most 11 for its largest page), and few enough that a page re-rendered is cheap.
PENDING_PAGE: Final = 100


def pending_workloads(engine: Engine, cluster_queue: str) -> services_pb2.PendingWorkloadsResponse:
    """Every pending workload of `cluster_queue`, in admission order, with positions."""
    return pending_response(engine.pending_workloads(cluster_queue))


def pending_response(pending: Iterable[PendingWorkload]) -> services_pb2.PendingWorkloadsResponse:
    response = services_pb2.PendingWorkloadsResponse()
    add = response.items.add  # a third cheaper than building each item, then the list
    for p in pending:
        namespace, _, name = p.key.partition("/")
        add(
            namespace=namespace,
            name=name,
            local_queue=p.local_queue,
            cluster_queue=p.cluster_queue,
            priority=p.priority,
            position_in_cluster_queue=p.position_in_cluster_queue,
            position_in_local_queue=p.position_in_local_queue,
        )
    response.total = len(response.items)
    return response


def cluster_queue_key(name: str) -> str:
    return f"cq.{name}"


def local_queue_key(namespace: str, name: str) -> str:
    return f"lq.{namespace}.{name}"


def pending_key(cluster_queue: str, start: int = 0) -> str:
    """The key of the page of `cluster_queue`'s pending list from position `start` on (a
    multiple of PENDING_PAGE). The start is a token of its own: names may hold dots."""
    return f"pending.{cluster_queue}" if start == 0 else f"pending-from.{start}.{cluster_queue}"


def visibility_values(engine: Engine, sharding: Sharding) -> dict[str, bytes]:
    """Every visibility key this shard owns, with its serialized value."""
    return dict(VisibilityRenderer().render(engine, sharding)[0])


class VisibilityRenderer:
    """The visibility values of one shard, kept from render to render: each render recomputes
    the queues the engine's index reports changed (every queue after a configuration change,
    a new engine or a change of the shard's partitions)."""

    def __init__(self, *, page: int = PENDING_PAGE) -> None:
        self.page = page  # pending workloads per key
        self.values: dict[str, bytes] = {}
        self._engine: Engine | None = None
        self._owned_partitions: object = None
        self._cluster_queues: dict[str, str] = {}  # owned ClusterQueue -> its tree
        self._trees: dict[str, list[str]] = {}  # tree -> its owned ClusterQueues
        self._local_queues: dict[str, tuple[str, str]] = {}  # "ns/name" -> (ns, name), owned
        # Per ClusterQueue, per page and after the last: how many of each LocalQueue's
        # workloads come before it.
        self._before: dict[str, list[dict[str, int]]] = {}
        self._changed: set[str] = set()

    def render(self, engine: Engine, sharding: Sharding) -> tuple[dict[str, bytes], set[str]]:
        """(every key with its value, the keys put or dropped since the last render)."""
        engine.settle()  # deferred configuration changes are reported once applied
        changes = engine.take_view_changes()
        if (
            changes.everything
            or engine is not self._engine
            or sharding.owned is not self._owned_partitions
        ):
            self._restart(engine, sharding)
            changes = Changes(everything=True)
        self._render_changes(engine, changes)
        changed, self._changed = self._changed, set()
        return self.values, changed

    def _restart(self, engine: Engine, sharding: Sharding) -> None:
        self._engine, self._owned_partitions = engine, sharding.owned
        self._changed = set(self.values)
        self.values, self._before, self._trees = {}, {}, {}
        self._cluster_queues = {}
        for name in engine.cluster_queue_names():
            if sharding.owns_cluster_queue(name):
                tree = engine.tree_of_cluster_queue(name) or ""
                self._cluster_queues[name] = tree
                self._trees.setdefault(tree, []).append(name)
        self._local_queues = {}
        config = engine.config
        for namespace, name in engine.local_queue_keys():
            lq = config.local_queues[f"{namespace}/{name}"]
            exists = lq.cluster_queue in config.cluster_queues
            if (exists and lq.cluster_queue in self._cluster_queues) or (
                not exists and sharding.owns_local_queue(namespace, name)
            ):
                self._local_queues[f"{namespace}/{name}"] = (namespace, name)

    def _render_changes(self, engine: Engine, changes: Changes) -> None:
        owned = self._cluster_queues
        if changes.everything:
            statuses: Iterable[str] = owned
            local_queues: Iterable[str] = self._local_queues
            pending: dict[str, int] = dict.fromkeys(owned, 0)
        else:
            # What a ClusterQueue holds changes what the others of its tree can borrow.
            trees = {owned[cq] for cq in changes.holdings if cq in owned}
            statuses = {cq for cq in changes.cluster_queues if cq in owned}.union(
                *(self._trees[tree] for tree in trees)
            )
            local_queues = [lq for lq in changes.local_queues if lq in self._local_queues]
            pending = {cq: at for cq, at in changes.pending_from.items() if cq in owned}
        for name in statuses:
            self._put(cluster_queue_key(name), cluster_queue_status(engine, name))
        for key in local_queues:
            namespace, name = self._local_queues[key]
            self._put(local_queue_key(namespace, name), local_queue_status(engine, namespace, name))
        for name, start in pending.items():
            self._render_pending(engine, name, start)

    def _render_pending(self, engine: Engine, cluster_queue: str, start: int) -> None:
        """Re-render `cluster_queue`'s pages from the one holding position `start` on."""
        before = self._before.setdefault(cluster_queue, [{}])
        rendered = len(before) - 1
        first = min(start // self.page, rendered)
        in_local = dict(before[first])
        pages = max(1, -(-engine.pending_count(cluster_queue) // self.page))
        del before[first + 1 :]
        for page in range(first, pages):
            start = page * self.page
            items = engine.pending_slice(cluster_queue, start, start + self.page, in_local)
            self._put(pending_key(cluster_queue, start), pending_response(items))
            before.append(dict(in_local))
        for page in range(pages, rendered):
            key = pending_key(cluster_queue, page * self.page)
            self.values.pop(key, None)
            self._changed.add(key)

    def _put(self, key: str, message: Message) -> None:
        self.values[key] = message.SerializeToString()
        self._changed.add(key)


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
        self.owed: set[str] | None = None  # keys a failed write left; None: compare every key

    def changes(
        self, values: Mapping[str, bytes], keys: Iterable[str] | None = None
    ) -> tuple[dict[str, bytes], list[str]]:
        """(keys to put with their values, keys to delete), against what was written; of
        `keys` only, and of what a failed write left, when given."""
        if keys is None or self.owed is None:
            put = {k: v for k, v in values.items() if self.written.get(k) != v}
            gone = [k for k in self.written if k not in values]
            return put, gone
        keys = self.owed.union(keys)
        put = {k: values[k] for k in keys if k in values and self.written.get(k) != values[k]}
        return put, [k for k in keys if k not in values and k in self.written]

    async def write(
        self, values: Mapping[str, bytes], keys: Iterable[str] | None = None
    ) -> list[str]:
        """Store the changes, side by side (each key is written once); returns the keys put.
        `keys`: the only keys that may have changed since the last call (a renderer's).

        A key is remembered as written only once its write succeeded, so a failed write
        leaves the rest to the next call.
        """
        put, gone = self.changes(values, keys)
        self.owed = set(put).union(gone)  # until written
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
        self.owed = set()
        return list(put)


class VisibilityPace:
    """How long the visibility loop rests after a write, so that views lag by a known bound.

    A write for at most one round's change (the engine was quiet: a kubectl apply, one
    workload, a test's step) is followed by `quiet_s`, so the next change shows within it.
    Each write for several rounds' changes doubles the rest, up to `busy_s`: under a stream of
    rounds the views are computed and written about once per `busy_s` instead of once per
    `quiet_s`. A write costs rendering the queues that changed and a KV put (and a
    `queue.status`) per changed key, with their PubAcks: a cost per second that grows with
    the rate of changes, not with how many workloads wait. A rest is never shorter than
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
