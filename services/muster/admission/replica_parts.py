"""The parts of one admission replica's state, and where each workload belongs.

`ReplicaParts` holds what every layer of `AdmissionState` works on (the engine of its shard, the
ledger of all workloads, MultiKueue's dispatcher, the partitions and the LocalQueues' homes, the
fences, the stories to forward) and answers where a workload's story is and who decides for it
(homes.py, forwarding.py). The layers above it: `decision_reads` (what a round publishes),
`fact_application` (consumed facts), `state` (the modes: replay, ownership, rounds).
"""

from __future__ import annotations

from typing import Final

from muster.admission.dispatch import Dispatcher
from muster.admission.facts import Term
from muster.admission.forwarding import Forwards
from muster.admission.homes import Handover, Move, QueueHomes, queue_key
from muster.admission.ledger import Entry, Ledger
from muster.admission.shards import PartitionMap, Sharding
from muster.admission.usage_carry import UsageCarry
from muster.admission.visibility_trees import TreeChanges
from muster.api.model import KueueConfig, WorkloadKey
from muster.core.config_owners import ConfigOwners
from muster.core.engine import Engine
from muster.core.routing import Policy, RoutingSettings

PENDING_PHASE: Final = "Pending"  # the engine's Phase value of a queued workload


class ReplicaParts:
    """What the layers of `AdmissionState` share, and where a workload's story belongs."""

    def __init__(
        self,
        *,
        shard: int = 0,
        shards: int = 1,
        source: str = "admission/0",
        default_cluster: str = "local",
        kueue: KueueConfig | None = None,
        cluster_lost_s: float = 10.0,
        routing_policy: Policy = Policy.STATIC,
        admission_fair_sharing: bool = True,
    ) -> None:
        # Routing is always on: a ClusterQueue's muster.dev/routing-policy wins over the default.
        self.routing = RoutingSettings(default_policy=routing_policy)
        # Admission fair sharing: usage runs from each workload's recorded QuotaReserved to
        # the event that released it, at those events' times (`_run_started`, `_run_stopped`),
        # so a replica rebuilt from the stream has the live one's usage; a snapshot carries
        # what finished workloads left (`ended_usage`). `admission_fair_sharing=False` orders
        # by priority and time only (docs/kueue-compatibility.md, "Admission fair sharing").
        self.engine = Engine(
            config=kueue,
            hold_quota_until_stopped=True,
            routing=self.routing,
            admission_fair_sharing=admission_fair_sharing,
        )
        self.dispatch = Dispatcher(lost_after_s=cluster_lost_s)  # MultiKueue (admission/dispatch)
        self.ledger = Ledger()
        self.partitions = PartitionMap(shards=shards)  # moved by config.partition records
        self.sharding = Sharding(self.engine, shard=shard, partitions=self.partitions)
        self.homes = QueueHomes()  # each LocalQueue's partition, to see what a change moves
        self.trees = TreeChanges()  # each ClusterQueue's tree, to see what a change moves
        # Partition -> sequence of its last config.partition record: what this replica's
        # decisions about its workloads are fenced on (docs/events.md, "Partitions").
        self.fences: dict[int, int] = {}
        # The term of the shard lease this replica decides in (None: no lease, as in tests of
        # the state alone), and why a later term of its shard seems to have taken one of its
        # partitions over (set: nothing more is decided before the lease is confirmed).
        self.term: Term | None = None
        self.superseded = ""
        self.moves: dict[WorkloadKey, Move] = {}  # stories to forward (the shell takes them)
        self.handovers: list[Handover] = []  # LocalQueues to fetch from another's partition
        self.repartitioned = False  # a record moved a partition to or from this replica
        self.forwards = Forwards()  # what was taken through forwards (forwarding.py)
        self.usage_carry = UsageCarry()  # fair sharing usage a LocalQueue brought along
        self.source = source
        self.default_cluster = default_cluster
        self.adopted: set[WorkloadKey] = set()  # in the engine: live workloads of this shard
        self.owning = False
        self.last_sequence = 0  # the last stream sequence applied, replayed or consumed
        self.cluster_queue_clusters: dict[str, str] = {}  # where a ClusterQueue was applied
        # Which cluster may change which object; the manager is this one (admission runs there).
        self.config_owners = ConfigOwners(manager=default_cluster)
        self._fresh: list[WorkloadKey] = []  # adopted since the last round, not answered yet
        self._done: list[WorkloadKey] = []  # finished or deleted: forgotten after `decisions`
        self.notes: dict[WorkloadKey, str] = {}  # alternatives left to other shards, said so

    # --- ownership ------------------------------------------------------------------------

    def home_of(self, entry: Entry) -> int:
        """The partition `entry`'s events belong in now (homes.py)."""
        return self.sharding.partition_of_local_queue(
            entry.workload.meta.namespace, entry.queue_name
        )

    def forward_target(self, key: WorkloadKey, *, arrived_on: int | None) -> int | None:
        """Where to forward a report about `key` that arrived in partition `arrived_on`: its
        home, when another replica decides that and it is not where the report is (a
        publisher still named the old one). None: nowhere (call before applying it)."""
        entry = self.ledger.get(key)
        if entry is None or arrived_on is None or not self.owning:
            return None
        home = self.home_of(entry)
        return home if home != arrived_on and home not in self.sharding.owned else None

    def partition_for(self, key: WorkloadKey) -> int | None:
        """The partition `key`'s decisions are stored in: where its story is."""
        entry = self.ledger.get(key)
        if entry is None:
            return None
        return self.home_of(entry) if entry.partition is None else entry.partition

    def queue_of(self, key: WorkloadKey) -> str:
        """`namespace/name` of the LocalQueue `key` is in now ("" when unknown)."""
        entry = self.ledger.get(key)
        if entry is None:
            return ""
        return queue_key(entry.workload.meta.namespace, entry.queue_name)

    def routed_home(self, key: WorkloadKey) -> None:
        """After its `routed` was stored: a workload routed to another partition's tree moves
        there (`moves`)."""
        entry = self.ledger.get(key)
        if entry is None or entry.partition is None:
            return
        home = self.home_of(entry)
        if home != entry.partition:
            self.moves[key] = Move(key, home)

    def moved(self, key: WorkloadKey, partition: int) -> None:
        """`key`'s story is now stored in `partition` too (forwarded there)."""
        entry = self.ledger.get(key)
        if entry is not None and partition in self.sharding.owned:
            entry.partition = partition  # ours: its story is there from now on
