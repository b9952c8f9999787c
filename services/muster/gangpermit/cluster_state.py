"""The cluster as gang-permit's scheduler sees it: Nodes, Pods and gang sources from the
cluster (`put`/`remove`, decoded api objects), each pod's gang and room, and how a pod's change
answers a permit or a pod placed before it exists. Pods whose `spec.schedulerName` is
gang-permit's are placed; other bound pods only take room. Pure: no I/O, no clock.
`GangPermitState` adds what the event stream says; this is its lower half.
"""

from __future__ import annotations

import msgspec

from muster.api.model import (
    CompositePodGroup,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    SchedulingPodGroup,
    SchedulingWorkload,
)
from muster.api.wellknown import WORKLOAD_LABEL
from muster.core.placement.feed import GangFeed, Left
from muster.core.placement.model import GangKey, GangSpec, NodeInfo, NodeName, PodInfo, PodKey
from muster.core.placement.scheduler import GangScheduler
from muster.core.placement.sources import created_at_s, handled_by, node_info, pod_info
from muster.gangpermit.member_uids import MemberUids
from muster.gangpermit.permits import Permit
from muster.gangpermit.placed import PlacedGangs
from muster.gangpermit.rooms import NodeRooms
from muster.gangpermit.submitted import KueueGang
from muster.gangpermit.unmade import UnmadePods, made_as_placed

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

ClusterObject = (
    Node
    | Pod
    | SchedulingWorkload
    | PodGroup
    | SchedulingPodGroup
    | CompositePodGroup
    | PriorityClass
)


class ClusterState:
    """The cluster's nodes and pods, given to the scheduler, and the stream's facts that say
    how a pod is held (`GangPermitState` folds those in)."""

    def __init__(self, *, scheduler_name: str, scheduler: GangScheduler) -> None:
        self.scheduler_name = scheduler_name
        self.scheduler = scheduler
        # --- from the cluster
        self.nodes: dict[NodeName, NodeInfo] = {}  # for the capacity heartbeat
        self.pods: dict[PodKey, Pod] = {}  # pods the scheduler knows (handled, or bound)
        self.owners: dict[PodKey, str] = {}  # what a preemption evicts with the pod
        self.infos: dict[PodKey, PodInfo] = {}  # each pod as last given to the scheduler
        # Gang sources and membership; the stream's PriorityClasses are its `configured`.
        self.feed = GangFeed()
        self.member_uids = MemberUids()  # kept with `pods` and the feed's membership (`_count`)
        self.specs: dict[GangKey, GangSpec] = {}  # as given to the scheduler
        # --- from the stream, read here as the cluster changes
        self.admitted: dict[str, KueueGang] = {}  # by workload (= gang) key
        self.unmade = UnmadePods()  # pods placed before the binder creates them
        self.permits: dict[GangKey, Permit] = {}
        # Restored permits' pods, until bound: the node, and the uid permitted ("" for any).
        self.assumed: dict[PodKey, tuple[NodeName, str]] = {}
        self.parked: dict[GangKey, frozenset[str]] = {}  # timed out before a restart: pod uids
        self.held: dict[GangKey, set[PodKey]] = {}  # parked gangs' pods, kept from the scheduler
        self.waiting: dict[GangKey, str] = {}  # the last waiting reason published
        self.waiting_published: dict[GangKey, int] = {}
        self.attempts: dict[GangKey, int] = {}  # gang_rejected so far: a new attempt each
        # --- for `capacity`: the gangs placed, and each node's room, looked at again only
        # where they may have changed
        self._placed = PlacedGangs()
        self._rooms = NodeRooms()

    def touch(self, gang: str | None) -> None:
        """The placement of `gang` may have changed: `capacity` looks at it again."""
        self._placed.touch(gang)

    def touch_all(self) -> None:
        """Any gang's placement may have changed (a node, a time-out, a preemption)."""
        self._placed.touch_all()

    def put(self, obj: ClusterObject) -> bool:
        """An object as it is now (added or changed); whether a pass may now decide
        differently (not after a pod only went on as placed, `_went_on`, or was made where
        it was placed, `_made_where_held`)."""
        match obj:
            case Node():
                info = node_info(obj)
                self.nodes[info.name] = info
                self.scheduler.upsert_node(info)
                self._rooms.node_changed(info.name)
                self.touch_all()
            case Pod():
                unmade = self.unmade.pods.get(PodKey(obj.key))
                self._made(obj)
                settled = self._went_on(obj)
                old = self.pods.get(PodKey(obj.key))
                if not settled and old is not None and old is unmade and self._made_where_held(obj):
                    placed = self.infos[PodKey(obj.key)]
                    created = created_at_s(obj.meta)
                    self._bound_as_permitted(
                        obj, msgspec.structs.replace(placed, created_s=created)
                    )
                    return False
                if settled and old is not None and old.node_name and old.node_name == obj.node_name:
                    # A bound pod's phase moved on (Pending to Running): placement reads no
                    # phase, so only the pod is kept (a third of a workload's pod changes).
                    self.pods[PodKey(obj.key)] = obj
                    self._count(PodKey(obj.key))
                    return False
                if settled and old is not None and not old.node_name:
                    held = self.infos.get(PodKey(obj.key))
                    if held is not None:
                        self._bound_as_permitted(obj, held)
                        return False
                self._put_pod(obj)
                return not settled
            case _:
                self._refresh(self.feed.put(obj))
        return True

    def _made_where_held(self, pod: Pod) -> bool:
        """Whether `pod` is the binder's making of the pod placed before it existed (`unmade`,
        just found made for its gang's admission), on the node the scheduler holds it on and
        otherwise as placed (`made_as_placed`): a bind seen, as `_bound_as_permitted` takes it,
        not a new pod to look up again (each pod the binder creates on its node)."""
        key = PodKey(pod.key)
        old = self.pods[key]
        return (
            key not in self.unmade.pods
            and key in self.infos
            and pod.phase not in TERMINAL_PHASES
            and bool(pod.node_name)
            and self.scheduler.node_of(key) == pod.node_name
            and made_as_placed(pod, old)
        )

    def _went_on(self, pod: Pod) -> bool:
        """Whether `pod` changed only as its placement goes on: bound to the node the scheduler
        already holds it on (a permit, or an assumed bind), or Pending to Running where it is.
        Neither changes any node's room or any gang, so no decision can change."""
        old = self.pods.get(PodKey(pod.key))
        if old is None or pod.phase in TERMINAL_PHASES:
            return False
        if msgspec.structs.replace(old, node_name=pod.node_name, phase=pod.phase) != pod:
            return False
        if old.node_name == pod.node_name:
            return True
        return not old.node_name and self.scheduler.node_of(PodKey(pod.key)) == pod.node_name

    def remove(self, obj: ClusterObject) -> None:
        """An object was deleted (`obj` is its last state)."""
        match obj:
            case Node():
                self.nodes.pop(NodeName(obj.meta.name), None)
                self.scheduler.remove_node(NodeName(obj.meta.name))
                self._rooms.node_changed(NodeName(obj.meta.name))
                self.touch_all()
            case Pod():
                self._forget_pod(PodKey(obj.key))
                unmade = self.unmade.pods.get(PodKey(obj.key))
                if unmade is not None:  # a pod of an earlier admission had its name
                    self._put_pod(unmade)
            case _:
                self._refresh(self.feed.remove(obj))

    def _made(self, pod: Pod) -> None:
        """`pod` is in the cluster: no longer one to create, if its gang's admission's."""
        gang = self.unmade.gang_of(PodKey(pod.key))
        kueue = self.admitted.get(gang) if gang is not None else None
        if kueue is not None:
            self.unmade.made(pod, kueue.admitted.sequence)

    def _put_pod(self, pod: Pod) -> None:
        key = PodKey(pod.key)
        handled = handled_by(pod, self.scheduler_name)
        if pod.phase in TERMINAL_PHASES or not (handled or pod.node_name):
            self._forget_pod(key)  # done, or another scheduler's pod still waiting
            return
        self.pods[key] = pod
        self._count(key)
        gang: GangKey | None = None
        owner = ""
        tree_owner = False
        if handled:
            m, priority = self.feed.membership(pod)
            gang, owner, tree_owner = m.gang, m.workload, m.tree_owner
            if gang is not None and self._parks(gang, pod):
                return
            self._set_spec(gang, m.spec)
        else:  # bound by another scheduler: it only takes room
            self.feed.index(key, None)
            priority = self.feed.priority(pod)
        info = pod_info(pod, gang=gang, workload=owner, priority=priority, tree_owner=tree_owner)
        if pod.node_name:
            self.assumed.pop(key, None)
            self._seen_bound(gang or GangKey(key))
        elif key in self.assumed:
            node, uid = self.assumed[key]
            if not uid or uid == pod.meta.uid:
                info = msgspec.structs.replace(info, node=node)
            else:  # another pod of that name than the one permitted: not held
                del self.assumed[key]
        self._join(key, gang)
        self.owners[key] = info.owner
        self.infos[key] = info
        self.scheduler.upsert_pod(info)
        self.touch(gang)

    def _bound_as_permitted(self, pod: Pod, held: PodInfo) -> None:
        """`pod` is now bound to the node the scheduler holds it on (a permit, or an assumed
        bind), nothing else changed: its gang, spec, owner and room stay what `_put_pod` found
        when it was pending, so only the reservation turns into use. Spares a membership look
        and a `pod_info` per pod (a third of a workload's pod changes)."""
        key = PodKey(pod.key)
        self.pods[key] = pod
        self._count(key)
        self.assumed.pop(key, None)
        self._seen_bound(held.gang or GangKey(key))
        info = msgspec.structs.replace(held, node=NodeName(pod.node_name))
        self.infos[key] = info
        self.scheduler.upsert_pod(info)
        self.touch(held.gang)

    def _seen_bound(self, gang: GangKey) -> None:
        """A pod of `gang` is bound: once all its permitted pods are, the permit is answered
        (the binder's `bound` says the same; the cache may see it first)."""
        permit = self.permits.get(gang)
        if permit is None:
            return
        pods = permit.order
        looked_from = permit.seen_bound
        while permit.seen_bound < len(pods) and self._is_bound(pods[permit.seen_bound]):
            permit.seen_bound += 1
        if permit.seen_bound < len(pods):
            return
        # All seen bound once: checked whole again, as a pod seen earlier may have gone since
        # (unless all were seen just now: a gang bound in one go, the most common, looks once).
        if looked_from == 0 or all(self._is_bound(p) for p in pods):
            del self.permits[gang]
        else:
            permit.seen_bound = 0

    def _is_bound(self, key: PodKey) -> bool:
        pod = self.pods.get(key)
        return pod is not None and bool(pod.node_name)

    def awaits_admission(self, gang: GangKey) -> bool:
        """Whether `gang` is a Kueue workload's whose `admitted` event is not folded in yet: its
        pods (created by the binder on admission) can reach the cluster watch first."""
        if gang in self.admitted or gang in self.specs:
            return False
        return any(
            WORKLOAD_LABEL in self.pods[p].meta.labels
            for p in self.feed.members.get(gang, ())
            if p in self.pods
        )

    def _parks(self, gang: GangKey, pod: Pod) -> bool:
        """Whether `pod` waits outside the scheduler: its gang timed out before a restart and
        nothing about it changed since. A pod the timeout did not reject unparks the gang."""
        uids = self.parked.get(gang)
        if uids is None:
            return False
        if pod.meta.uid in uids and not pod.node_name:
            self.held.setdefault(gang, set()).add(PodKey(pod.key))
            return True
        self._unpark(gang)
        return False

    def _unpark(self, gang: GangKey) -> None:
        self.parked.pop(gang, None)
        for key in sorted(self.held.pop(gang, set())):
            if key in self.pods:
                self._put_pod(self.pods[key])

    def _set_spec(self, gang: GangKey | None, spec: GangSpec | None) -> None:
        if gang is None:
            return
        self.touch(gang)
        if spec is None:
            if self.specs.pop(gang, None) is not None:
                self.scheduler.remove_gang(gang)
        elif self.specs.get(gang) != spec:
            self.specs[gang] = spec
            self.scheduler.upsert_gang(spec)
            self._unpark(gang)

    def _join(self, key: PodKey, gang: GangKey | None) -> None:
        """Record `key` as a pod of `gang` (leaving the gang it was in before, if another)."""
        self._left(self.feed.enter(key, gang))
        self._count(key)

    def _count(self, key: PodKey) -> None:
        """`member_uids` told `key`'s gang and uid: called wherever either changes."""
        pod = self.pods.get(key)
        self.member_uids.set(key, self.feed.gang_of.get(key), pod.meta.uid if pod else "")

    def _left(self, left: Left) -> None:
        self.touch(left.gang)
        if left.gang is not None and left.emptied:
            self._gone(left.gang)

    def _gone(self, gang: GangKey) -> None:
        """No pod of `gang` is left in the cluster: forget it (a Kueue admission stays)."""
        if self.specs.pop(gang, None) is not None:
            self.scheduler.remove_gang(gang)
        self.permits.pop(gang, None)
        self._forget_memos(gang)

    def _forget_memos(self, gang: GangKey) -> None:
        self.waiting.pop(gang, None)
        self.waiting_published.pop(gang, None)
        if gang not in self.admitted:
            self.attempts.pop(gang, None)

    def _forget_pod(self, key: PodKey) -> None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return
        self._count(key)
        self.touch(self.feed.gang_of.get(key))
        self.feed.index(key, None)
        self.owners.pop(key, None)
        self.infos.pop(key, None)
        self.assumed.pop(key, None)
        for gang, held in list(self.held.items()):
            if key in held:
                held.discard(key)
                self._unpark(gang)  # a rejected pod went away: the gang changed
                return
        self._join(key, None)
        self.scheduler.remove_pod(key)
        self._forget_memos(GangKey(key))  # a pod placed on its own is keyed as its own gang

    def _refresh(self, keys: tuple[PodKey, ...]) -> bool:
        """A gang source changed (Workload, PodGroup, admission): look at its pods (`keys`)
        again; a parked gang among them is parked no more (its spec may have changed). Whether
        it has any pod (else nothing a pass decides on changed)."""
        for gang in [g for g, held in self.held.items() if not held.isdisjoint(keys)]:
            del self.held[gang]
            self.parked.pop(gang, None)
        for key in keys:
            self._put_pod(self.pods[key])
        return bool(keys)
