"""The simulated cluster of gang placement: Nodes, Pods and gangs, driven by a `GangScheduler`.

`Simulation` (runner.py) makes one when the scenario holds a Node. It reports arrivals (Nodes,
Pods, scheduling.k8s.io Workloads, PodGroups) and the pods of Kueue-admitted workloads to the
scheduler, applies its decisions after each engine pass (binding is instant), and keeps every
pod's record for the report. Which gang a pod is in, and which pods an arriving gang object
touches, is the `GangFeed`'s to say, as in gang-permit; what is the simulator's own is the
virtual clock: when each pod and gang object arrived, how long it runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

import msgspec

from muster.api.model import (
    Admission,
    CompositePodGroup,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    ResourceFlavor,
    SchedulingPodGroup,
    SchedulingWorkload,
    Workload,
    WorkloadKey,
)
from muster.api.pod_set_updates import PodSetUpdate, updated_pod
from muster.api.wellknown import GANG_TIMED_OUT, PREEMPTED
from muster.core.events import Event, EventType
from muster.core.placement.feed import GangFeed, source_key
from muster.core.placement.model import (
    GangKey,
    GangPermitted,
    GangSpec,
    GangTimedOut,
    GangWaiting,
    PlacementPreempted,
    PodInfo,
    PodKey,
)
from muster.core.placement.scheduler import GangScheduler
from muster.core.placement.sources import gang_of_admitted, handled_by, node_info, pod_info
from muster.sim.groups import GroupBook, GroupObject
from muster.sim.scenario import ClusterArrival, Scenario
from muster.sim.timeline import Action, PodFinish

PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]

# The PodScheduled=False reasons (and Failed pods' status.reason) the report shows.
UNSCHEDULABLE = "Unschedulable"  # waiting: for its gang, or for room
SCHEDULED = "Scheduled"  # Bound events, as Kubernetes names a binding


class PodState(msgspec.Struct, frozen=True, kw_only=True):
    """One pod at the end of a run: as written (or made for a Kueue workload), and its fate."""

    pod: Pod
    gang: str  # its gang's key; "" for a pod placed on its own or left to another scheduler
    phase: PodPhase
    node: str  # "" until bound
    reason: str  # while Pending: why (PodScheduled=False); once Failed: why it failed
    message: str
    created_s: float
    bound_s: float | None
    ended_s: float | None

    @property
    def key(self) -> str:
        return self.pod.key


class PlacementHost(Protocol):
    """What placement asks of the simulation loop."""

    def record(self, event: Event) -> None: ...
    def evict(self, key: WorkloadKey, *, reason: str, message: str) -> None: ...
    def gang_bound(self, key: WorkloadKey) -> None: ...
    def push(self, at_s: float, action: Action) -> None: ...
    def pod_set_updates(self, key: WorkloadKey) -> list[PodSetUpdate]: ...


@dataclass(slots=True)
class PodRecord:
    """One pod while the simulation runs; mutable, placement-private."""

    pod: Pod
    serial: int  # a PodFinish fact for an older serial is stale
    created_s: float
    info: PodInfo | None = None  # what the scheduler was told; None: never given to it
    run_s: float | None = None  # None: runs until the end (or its Kueue workload finishes)
    phase: PodPhase = "Pending"
    node: str = ""
    reason: str = ""
    message: str = ""
    bound_s: float | None = None
    ended_s: float | None = None

    def state(self) -> PodState:
        gang = self.info.gang if self.info is not None and self.info.gang is not None else ""
        return PodState(
            pod=self.pod,
            gang=gang,
            phase=self.phase,
            node=self.node,
            reason=self.reason,
            message=self.message,
            created_s=self.created_s,
            bound_s=self.bound_s,
            ended_s=self.ended_s,
        )


class GangSource(msgspec.Struct, frozen=True, kw_only=True):
    """A scheduling.k8s.io Workload or PodGroup that arrived: when, and its pods' default run
    time."""

    arrived_s: float
    run_s: float | None


class Placement:
    """Pods on nodes for one simulation; see the module docstring."""

    def __init__(self, host: PlacementHost, scenario: Scenario) -> None:
        self.host = host
        self.scheduler = GangScheduler()
        priority_classes: Mapping[str, PriorityClass] = {
            obj.meta.name: obj for obj in scenario.objects if isinstance(obj, PriorityClass)
        }
        self.feed = GangFeed(configured=priority_classes)
        self.flavors: Mapping[str, ResourceFlavor] = {
            obj.meta.name: obj for obj in scenario.objects if isinstance(obj, ResourceFlavor)
        }
        self.serials = itertools.count()
        self.pods: dict[str, PodRecord] = {}
        self.nodes: dict[str, Node] = {}
        self.groups = GroupBook()  # scheduling.k8s.io PodGroups' conditions, for the report
        self.sources: dict[str, GangSource] = {}  # by `source_key`
        self.problems: dict[GangKey, str] = {}  # why a known source cannot take the gang
        self.told: dict[str, str] = {}  # the last GangWaiting message of each waiting unit
        self.specs: dict[GangKey, GangSpec] = {}  # what the scheduler was told

    # --- facts from the timeline and the engine -------------------------------------------------

    def arrive(self, arrival: ClusterArrival, *, now_s: float) -> None:
        """A Node, Pod or gang object appears."""
        obj = arrival.obj
        match obj:
            case Node():
                self.nodes[obj.meta.name] = obj
                self.scheduler.upsert_node(node_info(obj))
            case SchedulingWorkload():
                key = f"{obj.meta.namespace}/{obj.meta.name}"
                self.source_arrived(f"workload:{key}", arrival, now_s=now_s)
                self.rejoin(self.feed.put(obj), now_s=now_s)
            case PodGroup():
                key = f"{obj.meta.namespace}/{obj.meta.name}"
                self.source_arrived(f"podgroup:{key}", arrival, now_s=now_s)
                self.rejoin(self.feed.put(obj), now_s=now_s)
            case SchedulingPodGroup() | CompositePodGroup():
                self.groups.arrived(obj)
                source = f"group:{obj.key}"
                if isinstance(obj, SchedulingPodGroup) and source not in self.sources:
                    # an update keeps when it was created, and its run time
                    self.sources[source] = GangSource(arrived_s=now_s, run_s=arrival.script.run_s)
                self.rejoin(self.feed.put(obj), now_s=now_s)
            case Pod():
                self.add_pod(obj, run_s=arrival.script.run_s, now_s=now_s)

    def source_arrived(self, source: str, arrival: ClusterArrival, *, now_s: float) -> None:
        """A Workload or PodGroup arrived: its pods' run time is its latest; it was created when
        it first arrived."""
        known = self.sources.get(source)
        arrived_s = now_s if known is None else known.arrived_s
        self.sources[source] = GangSource(arrived_s=arrived_s, run_s=arrival.script.run_s)

    def rejoin(self, keys: Iterable[str], *, now_s: float) -> None:
        """A gang object arrived or changed: its pending pods learn their gang again (a spec, a
        tree, a new minCount), in the order they arrived."""
        records = [r for key in keys if (r := self.pods.get(key)) is not None]
        for record in sorted(records, key=lambda r: r.serial):
            if record.phase == "Pending" and record.info is not None:
                self.join(record, now_s=now_s)

    def add_pod(self, pod: Pod, *, run_s: float | None, now_s: float) -> None:
        """A Pod from the scenario: bound already, left to another scheduler, or muster's."""
        record = PodRecord(pod=pod, serial=next(self.serials), created_s=now_s, run_s=run_s)
        self.pods[pod.key] = record
        if pod.phase in ("Succeeded", "Failed"):
            record.phase = pod.phase  # done before it arrived: listed, takes no room
            return
        if pod.node_name:  # bound by whoever: it takes room on its node
            record.info = pod_info(pod, gang=None, priority=self.priority(pod), created_s=now_s)
            self.scheduler.upsert_pod(record.info)
            self.start(record, pod.node_name, now_s=now_s)
            return
        if handled_by(pod):
            self.join(record, now_s=now_s)

    def join(self, record: PodRecord, *, now_s: float) -> None:
        """Give a pending pod of muster's to the scheduler, with its gang if it has one."""
        pod = record.pod
        found, priority = self.feed.membership(pod)
        source_name = source_key(pod)
        source = self.sources.get(source_name) if source_name is not None else None
        gang = found.gang
        self.feed.enter(PodKey(pod.key), gang)
        if gang is not None:
            if found.spec is not None:
                self.register(gang, found.spec, source)
            if found.problem:
                self.problems[gang] = found.problem
                self.tell_waiting(gang, found.problem, now_s=now_s)
            else:
                self.problems.pop(gang, None)
        record.info = pod_info(
            pod,
            gang=gang,
            workload=found.workload,
            priority=priority,
            created_s=record.created_s,
            tree_owner=found.tree_owner,
        )
        self.scheduler.upsert_pod(record.info)

    def register(self, gang: GangKey, spec: GangSpec, source: GangSource | None) -> None:
        """Tell the scheduler the gang's spec, created when its object arrived."""
        if source is not None:  # created when it arrived, on the simulation's clock
            spec = msgspec.structs.replace(spec, created_s=source.arrived_s)
        if self.specs.get(gang) != spec:
            self.specs[gang] = spec
            self.scheduler.upsert_gang(spec)

    def admitted(
        self, wl: Workload, admission: Admission, *, run_s: float | None, now_s: float
    ) -> None:
        """The engine admitted `wl`: create its pods (with what its Ready checks ask for in
        podSetUpdates, as the binder does) and register its gang.

        `run_s` is not the pods' own: the workload finishes `run_s` after its gang is bound.
        """
        priority = wl.priority or 0
        gang = gang_of_admitted(
            wl,
            admission,
            flavors=self.flavors,
            priority=priority,
            created_s=now_s,
            groups=self.feed.groups(),
        )
        touched = self.feed.admit(gang.spec)
        self.specs[gang.spec.key] = gang.spec
        self.scheduler.upsert_gang(gang.spec)
        updates = self.host.pod_set_updates(wl.key)
        for pod in (updated_pod(p, updates) for p in gang.pods):
            record = PodRecord(pod=pod, serial=next(self.serials), created_s=now_s)
            record.info = pod_info(
                pod,
                gang=gang.spec.key,
                workload=gang.spec.workload,
                priority=priority,
                created_s=now_s,
            )
            self.pods[pod.key] = record
            self.feed.enter(PodKey(pod.key), gang.spec.key)
            self.scheduler.upsert_pod(record.info)
        self.rejoin(touched, now_s=now_s)  # the scenario's own pods of the workload, if any

    def admission_ended(self, key: WorkloadKey, *, finished: bool, now_s: float) -> None:
        """A Kueue workload finished (its running pods succeed) or lost its admission (its
        pods are deleted); either way its pods and gang leave the scheduler."""
        spec = self.feed.admitted.get(key)
        if spec is None:
            return
        touched = self.feed.end(key)
        for pod_key in list(self.feed.members.get(spec.key, {})):
            self.feed.enter(pod_key, None)
            record = self.pods[pod_key]
            self.scheduler.remove_pod(PodKey(pod_key))
            if finished and record.phase == "Running":
                record.phase, record.ended_s = "Succeeded", now_s
            else:
                del self.pods[pod_key]
        self.scheduler.remove_gang(spec.key)
        self.specs.pop(spec.key, None)
        self.told.pop(spec.key, None)
        self.rejoin(touched, now_s=now_s)

    def finish_pod(self, key: str, serial: int, *, now_s: float) -> None:
        """A pod's run-seconds are over: it succeeds and frees its room."""
        record = self.pods.get(key)
        if record is None or record.serial != serial or record.phase != "Running":
            return
        record.phase, record.ended_s = "Succeeded", now_s
        self.scheduler.remove_pod(PodKey(key))

    # --- decisions ------------------------------------------------------------------------------

    def schedule(self, now_s: float) -> bool:
        """One scheduling pass; True when it freed room or quota, so another pass is due now."""
        again = False
        for decision in self.scheduler.schedule(now_s=now_s):
            match decision:
                case GangWaiting():
                    self.waiting(decision, now_s=now_s)
                case GangPermitted():
                    self.bind(decision, now_s=now_s)
                case GangTimedOut():
                    again |= self.time_out(decision, now_s=now_s)
                case PlacementPreempted():
                    self.preempt(decision, now_s=now_s)
                    again = True
        return again

    def next_deadline_s(self) -> float | None:
        return self.scheduler.next_deadline_s()

    def state_now(self, now_s: float) -> object:
        """What decides this cluster's next placements, for `Repeats` (runner.py): each pod's
        fate, the waiting units' last words and how far the next gang deadline is."""
        deadline_s = self.next_deadline_s()
        return (
            [(key, r.phase, r.node, r.reason, r.message) for key, r in sorted(self.pods.items())],
            sorted(self.told.items()),
            None if deadline_s is None else deadline_s - now_s,
        )

    def waiting(self, decision: GangWaiting, *, now_s: float) -> None:
        # A source that cannot take the gang says more than "waiting for its Workload".
        why = self.problems.get(decision.gang, decision.reason)
        self.tell_waiting(decision.gang, why, now_s=now_s, groups=decision.groups)

    def tell_waiting(
        self, unit: str, why: str, *, now_s: float, groups: tuple[GangKey, ...] = ()
    ) -> None:
        """Report why a gang (or a pod on its own, or a tree of the gangs `groups`) waits,
        once per distinct reason."""
        if self.told.get(unit) == why:
            return
        self.told[unit] = why
        self.emit(EventType.GANG_WAITING, unit, UNSCHEDULABLE, why, now_s)
        for gang in groups or (unit,):
            self.groups.waiting(gang, why)
            for record in self.pending_of(gang):
                record.reason, record.message = UNSCHEDULABLE, why

    def bind(self, decision: GangPermitted, *, now_s: float) -> None:
        """Bind every permitted pod at once; a Kueue workload's gang starts its run clock."""
        nodes = sorted({binding.node for binding in decision.bindings})
        count = len(decision.bindings)
        summary = f"{count} pod{'s' if count != 1 else ''} on node{'s' if len(nodes) != 1 else ''} "
        summary += ", ".join(nodes)
        self.told.pop(decision.gang, None)
        if not decision.basic:
            self.emit(EventType.GANG_PERMITTED, decision.gang, "", summary, now_s)
            self.groups.scheduled(decision.gang, summary)
        for binding in decision.bindings:
            record = self.pods[binding.pod]
            assert record.info is not None  # the scheduler permits only pods it was given
            record.info = msgspec.structs.replace(record.info, node=binding.node)
            self.scheduler.upsert_pod(record.info)
            self.start(record, binding.node, now_s=now_s)
        self.emit(EventType.BOUND, decision.gang, SCHEDULED, summary, now_s)
        if not decision.basic and decision.gang in self.feed.admitted:
            self.host.gang_bound(WorkloadKey(decision.gang))

    def start(self, record: PodRecord, node: str, *, now_s: float) -> None:
        """The pod runs on `node`: for its own run-seconds, else its gang object's."""
        record.phase, record.node, record.bound_s = "Running", node, now_s
        record.reason = record.message = ""
        run_s = record.run_s
        if run_s is None and (source_name := source_key(record.pod)) is not None:
            source = self.sources.get(source_name)
            run_s = source.run_s if source is not None else None
        if run_s is not None:
            self.host.push(now_s + run_s, PodFinish(record.pod.key, record.serial))

    def time_out(self, decision: GangTimedOut, *, now_s: float) -> bool:
        """Reject the gang's pods together; a Kueue workload is evicted (True: quota freed)."""
        gang = decision.gang
        self.told.pop(gang, None)
        self.emit(EventType.GANG_TIMED_OUT, gang, GANG_TIMED_OUT, decision.reason, now_s)
        if gang in self.feed.admitted:
            self.host.evict(WorkloadKey(gang), reason=GANG_TIMED_OUT, message=decision.reason)
            return True
        for pod_key in decision.pods:
            record = self.pods.get(pod_key)
            if record is not None:
                record.reason, record.message = GANG_TIMED_OUT, decision.reason
        return False

    def preempt(self, decision: PlacementPreempted, *, now_s: float) -> None:
        """Evict every victim whole: Kueue workloads through the engine (their pods are
        deleted), other pods fail with reason Preempted. One event per victim."""
        message = f"Preempted to place {decision.gang}"
        for victim in decision.victims:
            self.emit(
                EventType.PLACEMENT_PREEMPTED, victim, PREEMPTED, message, now_s, by=decision.gang
            )
        for victim in decision.victims:
            if victim in self.feed.admitted:
                self.host.evict(WorkloadKey(victim), reason=PREEMPTED, message=message)
                # The engine leaves a workload alone that it no longer holds as admitted.
                self.admission_ended(WorkloadKey(victim), finished=False, now_s=now_s)
        for pod_key in decision.pods:
            record = self.pods.get(pod_key)
            info = record.info if record is not None else None
            if info is not None and info.gang is not None and info.owner != info.key:
                self.groups.disrupted(info.gang, message)  # evicted as a group, or a tree
            if record is not None and record.phase in ("Pending", "Running"):
                self.scheduler.remove_pod(pod_key)
                record.phase, record.ended_s = "Failed", now_s
                record.reason, record.message = PREEMPTED, message

    # --- helpers and views ----------------------------------------------------------------------

    def emit(
        self, type_: EventType, obj: str, reason: str, message: str, now_s: float, *, by: str = ""
    ) -> None:
        event = Event(time=now_s, type=type_, object=obj, reason=reason, message=message, by=by)
        self.host.record(event)

    def pending_of(self, gang: str) -> list[PodRecord]:
        """The pending pods of a gang, or the pod itself for one placed on its own."""
        members = self.feed.members.get(GangKey(gang))
        keys = list(members) if members is not None else [gang]
        return [r for key in keys if (r := self.pods.get(key)) and r.phase == "Pending"]

    def priority(self, pod: Pod) -> int:
        return self.feed.priority(pod)

    def pod_states(self) -> tuple[PodState, ...]:
        return tuple(self.pods[key].state() for key in sorted(self.pods))

    def node_states(self) -> tuple[Node, ...]:
        return tuple(self.nodes[name] for name in sorted(self.nodes))

    def group_states(self) -> tuple[GroupObject, ...]:
        return self.groups.states()
