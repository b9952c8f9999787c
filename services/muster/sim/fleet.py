"""Several clusters in one simulation: one `Placement` per cluster, and MultiKueue dispatch.

`Simulation` (runner.py) makes a `Fleet` instead of a single `Placement` when the scenario
declares MultiKueue (`scenario.clusters`). It talks to the Fleet as to a Placement (arrivals,
admissions, pod finishes, one pass per step) and hands it the MultiKueue checks of each quota
reservation. A workload waiting for dispatch is tried after every pass in which room may have
changed (`muster.core.dispatch`, first-fit or best-fit over its MultiKueueConfig's clusters);
once a cluster is chosen, the check turns Ready at that instant, the engine admits, and the
workload's pods are placed in that cluster. Until its gang is bound there, the room the
dispatch expected it to take is held, so two dispatches in one pass do not count the same room.

A cluster lost (`muster.dev/lost-at-seconds`) takes no more work, and every workload dispatched
to it and not finished is evicted (reason ClusterLost), requeued by the engine and dispatched
again elsewhere; its pods there are gone. Without Nodes, every cluster is taken to have room.

What waits, where each workload went, the room held and the clusters lost are
`muster.core.dispatcher`'s bookkeeping, the same the admission service keeps; the Fleet keeps
the clusters' Placements and turns dispatch decisions into timeline entries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from muster.api.model import Admission, Node, ResourceFlavor, Workload, WorkloadKey
from muster.api.pod_set_updates import PodSetUpdate
from muster.api.wellknown import CLUSTER_LOST, LOCAL_CLUSTER
from muster.core.dispatch import ClusterCapacity, demand_of, node_room
from muster.core.dispatcher import ClusterView, DispatcherState, Sent, Try, Waiting
from muster.core.events import Event
from muster.core.placement.sources import node_info
from muster.sim.clusters import ClusterPlan, cluster_of
from muster.sim.groups import GroupObject
from muster.sim.placement import Placement, PlacementHost, PodState
from muster.sim.scenario import ClusterArrival, Scenario
from muster.sim.timeline import Action, SetCheck

READY = "Ready"


class Fleet:
    """The clusters of one multi-cluster simulation; see the module docstring."""

    def __init__(self, host: PlacementHost, scenario: Scenario, plan: ClusterPlan) -> None:
        self.host = host
        self.plan = plan
        self.flavors: Mapping[str, ResourceFlavor] = {
            obj.meta.name: obj for obj in scenario.objects if isinstance(obj, ResourceFlavor)
        }
        self.placements: dict[str, Placement] = (
            {name: Placement(ClusterHost(self, name), scenario) for name in plan.clusters}
            if scenario.placement
            else {}
        )
        self.book = DispatcherState()  # waiting, live dispatches (targets), holds, lost clusters
        self.losses = sorted((at_s, name) for name, at_s in plan.lost_at.items())
        self.where: dict[WorkloadKey, str] = {}  # the cluster each admitted workload runs in
        # status.clusterName as the watcher writes it on Kubernetes: the worker, from its
        # admission there until an eviction of any reason; kept once it finished.
        self.ran_on: dict[WorkloadKey, str] = {}
        self.messages: dict[WorkloadKey, dict[str, str]] = {}  # MultiKueue checks' messages
        self.changed = False  # room may have changed since the last dispatch attempt

    # --- what the runner asks ----------------------------------------------------------------

    @property
    def alive(self) -> list[str]:
        """The clusters not lost, in name order."""
        return [name for name in self.plan.clusters if name not in self.book.down]

    def dispatches(self, check: str) -> bool:
        """Whether `check` is a MultiKueue check (answered by dispatch, not by a script)."""
        return check in self.plan.routes

    def reserved(
        self, wl: Workload, admission: Admission, *, epoch: int, checks: list[str]
    ) -> None:
        """Quota is reserved for `wl` and its MultiKueue `checks` wait for a cluster."""
        demand = demand_of(wl, admission, flavors=self.flavors)
        self.book.wait(wl.key, Waiting(checks=tuple(checks), demand=demand, epoch=epoch))
        self.changed = True

    def arrive(self, arrival: ClusterArrival, *, now_s: float) -> None:
        cluster = cluster_of(arrival.obj.meta.annotations)
        if cluster not in self.book.down and cluster in self.placements:
            self.placements[cluster].arrive(arrival, now_s=now_s)
            self.changed = True

    def admitted(
        self, wl: Workload, admission: Admission, *, run_s: float | None, now_s: float
    ) -> None:
        """Place the pods of an admitted workload where it was dispatched (else locally)."""
        cluster = self.book.targets.get(wl.key, LOCAL_CLUSTER)
        self.where[wl.key] = cluster
        self.name_cluster(wl.key, cluster)
        placement = self.placements.get(cluster)
        if placement is None:  # no nodes in the scenario: it runs at once
            self.host.gang_bound(wl.key)
            return
        if cluster not in self.book.down:
            placement.admitted(wl, admission, run_s=run_s, now_s=now_s)

    def name_cluster(self, key: WorkloadKey, cluster: str) -> None:
        """status.clusterName at an admission in `cluster` (none in the manager's own)."""
        if cluster != LOCAL_CLUSTER:
            self.ran_on[key] = cluster

    def admission_ended(self, key: WorkloadKey, *, finished: bool, now_s: float) -> None:
        if finished:
            if key not in self.where and key in self.book.targets:
                # Ended at its admission, before any pod (FailedToStart): admitted in its
                # worker all the same, and so named there.
                self.name_cluster(key, self.book.targets[key])
            self.book.forget(key)
        else:
            self.book.stopped(key)
            # Evicted, preempted or deactivated: unset at once, though its pods may still
            # stop (Kueue's resetClusterNomination); a finished workload keeps it.
            self.ran_on.pop(key, None)
        cluster = self.where.pop(key, None)
        if cluster is not None and cluster in self.placements:
            self.placements[cluster].admission_ended(key, finished=finished, now_s=now_s)
        self.changed = True

    def finish_pod(self, key: str, serial: int, *, now_s: float) -> None:
        for name in self.alive:
            placement = self.placements.get(name)
            if placement is not None and key in placement.pods:
                placement.finish_pod(key, serial, now_s=now_s)
                self.changed = True

    def schedule(self, now_s: float) -> bool:
        """Lose the clusters due, place in the others, then dispatch what waits.

        True when quota was freed (an eviction), so the engine must run again at this instant.
        """
        again = False
        while self.losses and self.losses[0][0] <= now_s:
            _, name = self.losses.pop(0)
            again |= self.lose(name)
        for name in self.alive:
            placement = self.placements.get(name)
            if placement is not None:
                again |= placement.schedule(now_s)
        if self.changed:
            self.changed = False
            self.dispatch_waiting(now_s)
        return again

    def next_deadline_s(self) -> float | None:
        times = [
            p.next_deadline_s() for name, p in self.placements.items() if name not in self.book.down
        ]
        if self.losses:
            times.append(self.losses[0][0])
        due = [t for t in times if t is not None]
        return min(due) if due else None

    def state_now(self, now_s: float) -> object:
        """What decides the fleet's next dispatches and placements, for `Repeats` (runner.py):
        each live cluster's placement state, the dispatcher's book without the simulator's
        reservation epochs, and the losses ahead, times as seconds from `now_s`."""
        book = self.book
        return (
            [
                (n, p.state_now(now_s))
                for n, p in sorted(self.placements.items())
                if n in self.alive
            ],
            [(key, w.checks, w.demand) for key, w in book.waiting.items()],  # in their order
            sorted(book.targets.items()),
            sorted(book.last.items()),
            sorted((key, cluster, takes) for key, (cluster, takes) in book.holds.items()),
            sorted(book.down),
            sorted(book.lost.items()),
            sorted((key, sorted(clusters)) for key, clusters in book.fenced.items()),
            sorted(
                (key, cluster, r.count, max(r.until_s - now_s, 0.0), r.why)
                for (key, cluster), r in book.refusals.items()
            ),
            sorted(self.where.items()),
            sorted(self.ran_on.items()),
            [(at_s - now_s, name) for at_s, name in self.losses],
        )

    # --- dispatch and loss ----------------------------------------------------------------

    def dispatch_waiting(self, now_s: float) -> None:
        """Try every waiting workload in order of reservation; a chosen cluster's checks turn
        Ready now, and what it takes there is held until its gang is bound."""
        views = {name: self.view(name) for name in self.plan.clusters}
        tries = [
            Try(key=key, route=self.plan.routes[waiting.checks[0]], demand=waiting.demand)
            for key, waiting in self.book.waiting.items()
        ]
        epochs = {key: waiting.epoch for key, waiting in self.book.waiting.items()}
        for decision in self.book.dispatch_round(tries, views, now_s=now_s):
            key = decision.key
            self.messages[key] = dict.fromkeys(decision.checks, decision.message)
            if isinstance(decision, Sent):  # status.clusterName waits for the admission
                for check in decision.checks:
                    self.host.push(now_s, SetCheck(key, epochs[key], check, READY))

    def view(self, name: str) -> ClusterView:
        """A cluster as dispatch sees it: lost, or the free room of its nodes (None without
        Nodes: unknown, any cluster has room)."""
        if name in self.book.down:
            return ClusterView(unavailable="lost")
        placement = self.placements.get(name)
        if placement is None:
            return ClusterView()
        scheduler = placement.scheduler
        rooms = []
        for node_name in sorted(placement.nodes):
            info = node_info(placement.nodes[node_name])
            room = node_room(info, scheduler.free(info.name))
            if room is not None:
                rooms.append(room)
        return ClusterView(capacity=ClusterCapacity(cluster=name, nodes=tuple(rooms)))

    def lose(self, name: str) -> bool:
        """Cluster `name` is gone: evict what was dispatched there (requeued, dispatched again
        elsewhere). True when anything was evicted."""
        victims = self.book.lose(name)
        self.changed = True
        for key in victims:
            message = f"worker cluster {name} was lost"
            self.host.evict(key, reason=CLUSTER_LOST, message=message)
        return bool(victims)

    def gang_bound(self, key: WorkloadKey) -> None:
        self.book.holds.pop(key, None)  # its pods count on their nodes now
        self.host.gang_bound(key)

    # --- the report ----------------------------------------------------------------------------

    def pod_states(self) -> tuple[PodState, ...]:
        return tuple(sorted(self._pods(), key=lambda state: state.key))

    def _pods(self) -> Iterator[PodState]:
        for placement in self.placements.values():
            yield from placement.pod_states()

    def node_states(self) -> tuple[Node, ...]:
        nodes = [node for p in self.placements.values() for node in p.node_states()]
        return tuple(sorted(nodes, key=lambda node: node.meta.name))

    def group_states(self) -> tuple[GroupObject, ...]:
        groups = [group for p in self.placements.values() for group in p.group_states()]
        return tuple(sorted(groups, key=lambda g: (type(g).__name__, g.key)))


class ClusterHost:
    """What one cluster's Placement asks of the loop, through the Fleet that owns it."""

    def __init__(self, fleet: Fleet, cluster: str) -> None:
        self.fleet = fleet
        self.cluster = cluster

    def record(self, event: Event) -> None:
        self.fleet.host.record(event)

    def evict(self, key: WorkloadKey, *, reason: str, message: str) -> None:
        self.fleet.host.evict(key, reason=reason, message=message)

    def gang_bound(self, key: WorkloadKey) -> None:
        self.fleet.gang_bound(key)

    def push(self, at_s: float, action: Action) -> None:
        self.fleet.host.push(at_s, action)

    def pod_set_updates(self, key: WorkloadKey) -> list[PodSetUpdate]:
        return self.fleet.host.pod_set_updates(key)
