"""Queue statuses and pending lists for the MUSTER_VISIBILITY bucket, built from the engine.

Keys (docs/services.md): `cq.<name>` → `ClusterQueueStatus`, `lq.<namespace>.<name>` →
`LocalQueueStatus`, and the pending workloads of a ClusterQueue in admission order, in the
pages of the engine's index (`core.pending_pages`: 32 to 128 workloads, each under an id it
keeps): `pending-page.<epoch>-<id>.<cq>` (`PendingWorkloadsResponse`, no positions) and
`pending-index.<cq>` (`PendingPageIndex`: the pages in order, with their counts per
LocalQueue, and the epoch; under admission fair sharing, each LocalQueue's usage rank, which
comes before the pages' order; docs/events.md). A replica writes only the queues of its own
shard, each under its epoch for that queue: the stream sequence after the last event it had
applied when it began to own it, so that a newer owner's is larger (`visibility_writer`
fences the writes on it). A LocalQueue whose ClusterQueue does not exist has an epoch of its
own, carried in its status (`LocalQueueStatus.epoch`).

`VisibilityRenderer` keeps the values between renders and recomputes only the queues the
engine says changed, and of a pending list only the pages that changed and the index: a
render after one arrival costs one page and the index's join, however long its queue.
`visibility_values` is the same render done afresh. `VisibilityPace` says how long the loop
rests between writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from muster.admission.shards import Sharding
from muster.admission.visibility_trees import TreeChanges
from muster.api import format_quantity
from muster.api.encode import is_byte_resource
from muster.bus.partitions import partition_of
from muster.contracts.v1 import events_pb2 as pb
from muster.contracts.v1 import services_pb2
from muster.core.admission_fair_sharing import usage_ranks
from muster.core.engine import Engine
from muster.core.pending_pages import PendingPage
from muster.core.queue_index import Changes
from muster.core.status import FlavorUsage

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


def pending_workloads(engine: Engine, cluster_queue: str) -> services_pb2.PendingWorkloadsResponse:
    """Every pending workload of `cluster_queue`, in admission order, with positions."""
    response = services_pb2.PendingWorkloadsResponse()
    add = response.items.add  # a third cheaper than building each item, then the list
    for p in engine.pending_workloads(cluster_queue):
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


def page_bytes(page: PendingPage) -> bytes:
    """A pending page as stored: its workloads in order, without positions (a reader counts
    them from the index) or ClusterQueue (the key names it)."""
    response = services_pb2.PendingWorkloadsResponse(total=len(page.records))
    add = response.items.add
    for r in page.records:
        namespace, _, name = r.key.partition("/")
        add(
            namespace=namespace,
            name=name,
            local_queue=r.local_queue.partition("/")[2],
            priority=r.priority,
        )
    return response.SerializeToString()


def index_entry(page: PendingPage) -> bytes:
    """Page `page`'s entry of the index, serialized as a PendingPageIndex holding it alone:
    the index is these entries' bytes joined (a repeated field's encoding), so an arrival
    re-serializes one entry, not the whole index."""
    entry = services_pb2.PendingPageEntry(id=page.id, count=len(page.records))
    add = entry.local_queues.add
    for key, count in sorted(page.local_queues.items()):
        namespace, _, name = key.partition("/")
        add(namespace=namespace, name=name, count=count)
    return services_pb2.PendingPageIndex(pages=[entry]).SerializeToString()


def fair_order_bytes(engine: Engine, cluster_queue: str) -> bytes:
    """The `fair_order` field of `cluster_queue`'s index, serialized (empty when it orders by
    priority and FIFO alone): each waiting LocalQueue's usage rank, as admission orders now
    (`core.admission_fair_sharing.usage_ranks`)."""
    usages = engine.fair_usages(cluster_queue)
    if usages is None:
        return b""
    index = services_pb2.PendingPageIndex()
    add = index.fair_order.add
    for key, rank in usage_ranks(usages).items():
        namespace, _, name = key.partition("/")
        add(namespace=namespace, name=name, rank=rank)
    return index.SerializeToString()


def cluster_queue_key(name: str) -> str:
    return f"cq.{name}"


def local_queue_key(namespace: str, name: str) -> str:
    return f"{LOCAL_QUEUE_PREFIX}{namespace}.{name}"


LOCAL_QUEUE_PREFIX: Final = "lq."


INDEX_PREFIX: Final = "pending-index."
PAGE_PREFIX: Final = "pending-page."


def pending_index_key(cluster_queue: str) -> str:
    return f"{INDEX_PREFIX}{cluster_queue}"


def pending_page_key(cluster_queue: str, page_id: int, epoch: int) -> str:
    """The key of page `page_id` of `cluster_queue`'s pending list, written by the owner of
    epoch `epoch`. Epoch and id are one token: names may hold dots."""
    return f"{PAGE_PREFIX}{epoch}-{page_id}.{cluster_queue}"


def visibility_values(engine: Engine, sharding: Sharding, *, sequence: int = 0) -> dict[str, bytes]:
    """Every visibility key this shard owns, with its serialized value."""
    return dict(VisibilityRenderer().render(engine, sharding, sequence=sequence)[0])


class VisibilityRenderer:
    """The visibility values of one shard, kept from render to render: each render recomputes
    the queues the engine's index reports changed (every queue after a configuration change,
    a new engine or a change of the shard's partitions), and of a pending list the pages it
    reports changed and the list's index."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self._engine: Engine | None = None
        self._owned_partitions: object = None
        self._cluster_queues: dict[str, str] = {}  # owned ClusterQueue -> its tree
        self._trees: dict[str, list[str]] = {}  # tree -> its owned ClusterQueues
        self._local_queues: dict[str, tuple[str, str]] = {}  # "ns/name" -> (ns, name), owned
        self._entries: dict[str, dict[int, bytes]] = {}  # per ClusterQueue, per page: its entry
        self._changed: set[str] = set()
        self.epochs: dict[str, int] = {}  # owned ClusterQueue -> since when (see `fence`)
        self._epoch_bytes: dict[str, bytes] = {}  # its index's epoch field, serialized
        self._local_queue_owners: dict[str, str] = {}  # `lq.` key -> its owned ClusterQueue
        self.alone_epochs: dict[str, int] = {}  # `lq.` key of no ClusterQueue -> its epoch

    def render(
        self,
        engine: Engine,
        sharding: Sharding,
        *,
        sequence: int = 0,
        moved_at: Mapping[int, int] | None = None,
        trees: TreeChanges | None = None,
    ) -> tuple[dict[str, bytes], set[str]]:
        """(every key with its value, the keys put or dropped since the last render).
        `sequence`: the last stream sequence the engine applied; a ClusterQueue this shard
        did not own at the last render gets epoch `sequence + 1`, and so does one whose tree
        changed since the last render, even to change back (`trees`, told of every
        configuration change), or whose partition had a record since its epoch began
        (`moved_at`: each partition's last record's sequence): it may have left and come
        back, and another owner written it meanwhile under a larger epoch. So does every
        LocalQueue of no ClusterQueue (one key each) at every configuration change."""
        engine.settle()  # deferred configuration changes are reported once applied
        changes = engine.take_view_changes()
        departed = set() if trees is None else trees.take()
        if (
            changes.everything
            or departed
            or engine is not self._engine
            or sharding.owned is not self._owned_partitions
        ):
            self._restart(engine, sharding, sequence, moved_at or {}, departed)
            changes = Changes(everything=True)
        self._render_changes(engine, changes)
        changed, self._changed = self._changed, set()
        return self.values, changed

    def fence(self, key: str) -> tuple[str, int] | None:
        """(the owned ClusterQueue whose owner writes `key`, this shard's epoch for it); None
        for a key of no owned ClusterQueue (a LocalQueue naming a missing one)."""
        if key.startswith("cq."):
            cluster_queue: str | None = key[3:]
        elif key.startswith(INDEX_PREFIX):
            cluster_queue = key[len(INDEX_PREFIX) :]
        elif key.startswith(PAGE_PREFIX):
            cluster_queue = key.split(".", 2)[2]
        else:
            cluster_queue = self._local_queue_owners.get(key)
        epoch = self.epochs.get(cluster_queue or "")
        return None if cluster_queue is None or epoch is None else (cluster_queue, epoch)

    def alone(self, key: str) -> int | None:
        """This shard's epoch for `key`, the `lq.` key of a LocalQueue of no ClusterQueue;
        None for any other key."""
        return self.alone_epochs.get(key)

    def epoch_of(self, key: str) -> int | None:
        """The epoch `key` is written under now (None: an unfenced key)."""
        fence = self.fence(key)
        return self.alone(key) if fence is None else fence[1]

    def _restart(
        self,
        engine: Engine,
        sharding: Sharding,
        sequence: int,
        moved_at: Mapping[int, int],
        departed: set[str],
    ) -> None:
        self._engine, self._owned_partitions = engine, sharding.owned
        trees_before = self._cluster_queues
        self._changed = set(self.values)
        self.values, self._entries, self._trees = {}, {}, {}
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
        # A queue owned before keeps its epoch (its pages keep their keys), unless it moved
        # to another tree (even to move back) or its tree's partition moved since: it may
        # have been another replica's meanwhile. A new one is owned from the next event on.
        kept = {
            cq: epoch
            for cq, epoch in self.epochs.items()
            if (now := self._cluster_queues.get(cq)) == trees_before.get(cq)
            and now is not None
            and cq not in departed
            and moved_at.get(partition_of(now), 0) < epoch
        }
        self.epochs = {cq: kept.get(cq, sequence + 1) for cq in self._cluster_queues}
        self._epoch_bytes = {
            cq: services_pb2.PendingPageIndex(epoch=epoch).SerializeToString()
            for cq, epoch in self.epochs.items()
        }
        self._local_queue_owners = {
            local_queue_key(namespace, name): config.local_queues[key].cluster_queue
            for key, (namespace, name) in self._local_queues.items()
            if config.local_queues[key].cluster_queue in self._cluster_queues
        }
        # A LocalQueue of no ClusterQueue: the engine says nothing of where it was in between
        # (its stand-in tree, another's tree), and it is one key: a new epoch each time.
        self.alone_epochs = {
            local_queue_key(namespace, name): sequence + 1
            for key, (namespace, name) in self._local_queues.items()
            if config.local_queues[key].cluster_queue not in config.cluster_queues
        }

    def _render_changes(self, engine: Engine, changes: Changes) -> None:
        owned = self._cluster_queues
        pending: dict[str, set[int] | None]
        if changes.everything:
            statuses: Iterable[str] = owned
            local_queues: Iterable[str] = self._local_queues
            pending = dict.fromkeys(owned)
        else:
            # What a ClusterQueue holds changes what the others of its tree can borrow.
            trees = {owned[cq] for cq in changes.holdings if cq in owned}
            statuses = {cq for cq in changes.cluster_queues if cq in owned}.union(
                *(self._trees[tree] for tree in trees)
            )
            local_queues = [lq for lq in changes.local_queues if lq in self._local_queues]
            pending = {cq: ids for cq, ids in changes.pending_pages.items() if cq in owned}
        for name in statuses:
            self._put(cluster_queue_key(name), cluster_queue_status(engine, name))
        for key in local_queues:
            namespace, name = self._local_queues[key]
            status = local_queue_status(engine, namespace, name)
            # Its writer's epoch, its ClusterQueue's or its own: a LocalQueue that gains or
            # loses a ClusterQueue changes owner, and the older one's late write is refused.
            key = local_queue_key(namespace, name)
            status.epoch = self.epoch_of(key) or 0
            self._put(key, status)
        for name in statuses:
            # A start or stop in the ClusterQueue changes its LocalQueues' usage: the fair
            # order in its index, though no page changed.
            if name not in pending and engine.fair_usages(name) is not None:
                pending[name] = set()
        for name, pages in pending.items():
            self._render_pending(engine, name, pages)

    def _render_pending(self, engine: Engine, cluster_queue: str, pages: set[int] | None) -> None:
        """Re-render `cluster_queue`'s pages `pages` (None: all) and its index; drop the
        pages of `pages` that are gone."""
        entries = self._entries.setdefault(cluster_queue, {})
        epoch = self.epochs[cluster_queue]
        if pages is None:
            pages = set(entries)
            entries.clear()
        for page_id in pages:
            entries.pop(page_id, None)
        joined = []
        for page in engine.pending_pages(cluster_queue):
            entry = entries.get(page.id)
            if entry is None:
                entry = entries[page.id] = index_entry(page)
                self._put_bytes(pending_page_key(cluster_queue, page.id, epoch), page_bytes(page))
            joined.append(entry)
        for page_id in pages.difference(entries):
            key = pending_page_key(cluster_queue, page_id, epoch)
            self.values.pop(key, None)
            self._changed.add(key)
        joined.append(self._epoch_bytes[cluster_queue])  # fields of one message, concatenated
        joined.append(fair_order_bytes(engine, cluster_queue))
        self._put_bytes(pending_index_key(cluster_queue), b"".join(joined))

    def _put(self, key: str, message: Message) -> None:
        self._put_bytes(key, message.SerializeToString())

    def _put_bytes(self, key: str, value: bytes) -> None:
        self.values[key] = value
        self._changed.add(key)


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

    def rest_s(self, *, rounds: int, waited: bool, spent_s: float) -> float:
        """The rest after a write of what `rounds` rounds changed, whose views took `spent_s`
        to compute; `waited`: no change had come when the rest before ended. A round during
        the rest is a stream too: one of N replicas sees a round or two per rest where a lone
        replica sees many, and resetting on one wrote its views twice as often."""
        if rounds == 0 or (rounds == 1 and waited):
            self._rest_s = self.quiet_s
        else:
            self._rest_s = min(self.busy_s, max(self._rest_s * 2, self.quiet_s))
        return max(self._rest_s, spent_s * self.cpu_share)
