"""Gang-permit's state: the cluster's pods, what the event stream says about Kueue workloads
and past decisions, and the `GangScheduler` they feed. Pure: no I/O, no clock. Which gang a pod
is in, and which pods a gang source's change touches, is the shared `GangFeed`'s to say.

Facts arrive from two places, in any order:
- the cluster (`put`/`remove`, decoded api objects): Nodes, Pods, scheduling.k8s.io Workloads,
  PodGroups and PriorityClasses. Pods whose `spec.schedulerName` is gang-permit's are placed;
  other bound pods only take room.
- the event stream (`apply_event`): Kueue workloads (`submitted`: spec and priority, read by
  `muster.gangpermit.submitted`; `admitted`: their gang, unless it names a submission that
  ended since; `finished`, `eviction_completed`, `deleted`: done; an `eviction_completed`
  naming pods answers a placement eviction, and ends nothing), PriorityClasses
  (`config.applied`), the binder's answers (`bound`, `gang_rejected` BindFailed), and, while
  `restoring`, gang-permit's own past decisions.

A restarted gang-permit replays the stream first (`restoring`), then `restored()`: permits not
yet answered by the binder, nor acknowledged by its consumer, hold their nodes (their pods count
as bound there, "assumed"), gangs
that timed out stay parked until one of their pods or their spec changes (but a preemptor timed
out while its victims stopped is tried again), and the last waiting reason of each gang is known,
so no decision is made or published twice. `decide` turns one scheduling pass into events
(`muster.gangpermit.translate`).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable

import msgspec

from muster.admitted_podsets import AdmissionMismatchError, admitted_pod_sets, created_on_nodes
from muster.api.model import (
    CompositePodGroup,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    SchedulingPodGroup,
    SchedulingWorkload,
)
from muster.api.wellknown import BIND_FAILED, GANG_TIMED_OUT, SCHEDULER_NAME, WORKLOAD_LABEL
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES
from muster.contracts.v1 import events_pb2
from muster.core.dispatch import ClusterCapacity
from muster.core.placement.feed import GangFeed, Left
from muster.core.placement.model import (
    GangKey,
    GangSpec,
    NodeInfo,
    NodeName,
    PodInfo,
    PodKey,
    Scoring,
)
from muster.core.placement.scheduler import DEFAULT_TIMEOUT_S, GangScheduler
from muster.core.placement.sources import (
    created_at_s,
    gang_of_admitted,
    handled_by,
    node_info,
    pod_info,
    pods_to_create,
)
from muster.core.submissions import ENDED_KEPT_S, EndedSubmissions
from muster.gangpermit.evictions import RESEND_FIRST_S, RESEND_MAX_S, EvictionFlights
from muster.gangpermit.member_uids import MemberUids
from muster.gangpermit.parts import part_ids
from muster.gangpermit.rooms import NodeRooms
from muster.gangpermit.submitted import Submitted, admission_of, submitted_from, submitted_of
from muster.gangpermit.unmade import UnmadePods, made_as_placed
from muster.payloads import PayloadError, applied_document, applied_object

log = logging.getLogger(__name__)

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


class Permit(msgspec.Struct, kw_only=True):
    """A published `gang_permitted` (one event, or its parts) the binder has not answered yet."""

    event_id: str  # the whole permit's (a part's `permit_id`)
    bindings: dict[PodKey, NodeName]
    restored: bool  # read back from the stream at start, not decided by this process
    uids: dict[PodKey, str] = msgspec.field(default_factory=dict)  # of the pods permitted
    # The event ids of its parts (`event_id` alone when whole), and those the binder answered:
    # the permit is answered once every part is, as a whole permit was by its one answer.
    part_ids: tuple[str, ...] = ()
    answered: set[str] = msgspec.field(default_factory=set)
    bind_failed: bool = False  # a part was answered BindFailed
    # The pods before this one (in `bindings`' order) were seen bound: each bind seen looks on
    # from there, not at every pod again (a gang of n pods: n, not n², looks; `_seen_bound`).
    seen_bound: int = 0
    order: tuple[PodKey, ...] = ()  # the keys of `bindings`, to look on from `seen_bound`
    # Read back (`restored`): the parts' events read, and the highest of their sequences.
    read: set[str] = msgspec.field(default_factory=set)
    sequence: int = 0

    def __post_init__(self) -> None:
        self.order = tuple(self.bindings)
        self.part_ids = self.part_ids or (self.event_id,)


class KueueGang(msgspec.Struct, kw_only=True):
    """A Kueue-admitted workload's gang, and the `admitted` event its decisions are caused by."""

    spec: GangSpec
    admitted: events_pb2.Envelope


class GangPermitState:
    """Everything gang-permit knows about one cluster, and its scheduler."""

    def __init__(
        self,
        *,
        cluster: str,
        scheduler_name: str = SCHEDULER_NAME,
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        scoring: Scoring = "binpack",
        preemption: bool = True,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        evict_resend_s: float = RESEND_FIRST_S,
        ended_kept_s: float = ENDED_KEPT_S,
        creates_on_nodes: Callable[[str], bool] = lambda owner_kind: False,
    ) -> None:
        self.cluster = cluster
        # Whether the binder creates an admitted workload's pods itself, by what it stands
        # for (`ClusterBackend.creates_on_nodes`): such pods are placed before they exist.
        self.creates_on_nodes = creates_on_nodes
        self.max_event_bytes = max_event_bytes  # the bus's: a larger permit goes in parts
        self.source = f"gangpermit/{cluster}"
        self.scheduler_name = scheduler_name
        self.scheduler = GangScheduler(
            scoring=scoring, default_timeout_s=default_timeout_s, preemption=preemption
        )
        self.restoring = True
        self.applied_sequence = 0
        # --- from the cluster
        self.nodes: dict[NodeName, NodeInfo] = {}  # for the capacity heartbeat
        self.pods: dict[PodKey, Pod] = {}  # pods the scheduler knows (handled, or bound)
        self.owners: dict[PodKey, str] = {}  # what a preemption evicts with the pod
        self.infos: dict[PodKey, PodInfo] = {}  # each pod as last given to the scheduler
        # Gang sources and membership; the stream's PriorityClasses are its `configured`.
        self.feed = GangFeed()
        self.member_uids = MemberUids()  # kept with `pods` and the feed's membership (`_count`)
        self.specs: dict[GangKey, GangSpec] = {}  # as given to the scheduler
        # --- from the stream
        self.submitted: dict[str, Submitted] = {}
        # A late admission of a workload ended (within `ended_kept_s`) since is dropped.
        self.ended = EndedSubmissions(kept_s=ended_kept_s)
        self.admitted: dict[str, KueueGang] = {}  # by workload (= gang) key
        self.unmade = UnmadePods()  # pods placed before the binder creates them
        self.permits: dict[GangKey, Permit] = {}
        # Placement evictions not answered yet, asked for again on a timer (`evictions`).
        self.evictions = EvictionFlights(
            first_s=evict_resend_s, max_s=max(evict_resend_s, RESEND_MAX_S)
        )
        self.resent_evictions = 0  # re-sends so far (a metric)
        # Restored permits' pods, until bound: the node, and the uid permitted ("" for any).
        self.assumed: dict[PodKey, tuple[NodeName, str]] = {}
        self.parked: dict[GangKey, frozenset[str]] = {}  # timed out before a restart: pod uids
        self.held: dict[GangKey, set[PodKey]] = {}  # parked gangs' pods, kept from the scheduler
        self.waiting: dict[GangKey, str] = {}  # the last waiting reason published
        self.waiting_published: dict[GangKey, int] = {}
        self.attempts: dict[GangKey, int] = {}  # gang_rejected so far: a new attempt each
        # While restoring: the attempt in which each gang last preempted (see `_rejected`),
        # and when it first preempted in the attempt it is in (its try's deadline runs on).
        self.preempted_in: dict[GangKey, int] = {}
        self.preempted_since: dict[GangKey, float] = {}
        # --- for `capacity`: Kueue gangs found placed, in order, and those whose placement may
        # have changed since (None: any), so a heartbeat looks again at those only. Kept sorted
        # as they change: a heartbeat (up to ten a second in a burst) copies the list instead
        # of sorting every running workload again (2 ms at 6 000 of them).
        self._placed: list[str] = []
        self._recheck: set[str] | None = None
        self._rooms = NodeRooms()  # each node's room, looked at again only when it may change

    # --- the event stream -------------------------------------------------------------------

    def apply_event(self, env: events_pb2.Envelope) -> bool:
        """Fold one event in; return whether a scheduling pass may now decide differently.

        Events at or below the last applied sequence change nothing (a redelivery). Once
        restored, gang-permit's own events are skipped: `decide` recorded them already.
        """
        if env.sequence and env.sequence <= self.applied_sequence:
            return False
        self.applied_sequence = max(self.applied_sequence, env.sequence)
        field = env.WhichOneof("payload")
        if env.source == self.source and not self.restoring:
            return False
        key = env.workload
        match field:
            case "submitted":
                self.submitted[key] = submitted_of(env)
                self.ended.submitted(key, env.event_id, at_s=env.time_unix_nano / 1e9)
                return False
            case "admitted":
                return self._admit(env)  # a pass only once the binder's pods are seen
            case "eviction_completed" if env.eviction_completed.pods:
                # A placement eviction's answer (pods outside Kueue, maybe one part of
                # several): ends no admission. Their room is given back pod by pod, as the
                # cluster shows each gone, so no part's answer frees another's nodes.
                self.evictions.answered(env)  # but its pods are not asked for again
                return False
            case "eviction_completed" if self._admitted_since(env):
                return False  # an earlier eviction's: the admission held now was not stopped
            case "finished" | "eviction_completed" | "deleted":
                self.admitted.pop(key, None)
                # Room a permit or pods not made yet held is free now, though no pod of the
                # gang is left to say so (a restored permit whose pods were deleted unseen):
                # a pass places the gangs waiting for it.
                held = GangKey(key) in self.permits or self.unmade.of(GangKey(key))
                self._drop_permit(GangKey(key))
                self._drop_unmade(GangKey(key))
                self.touch(key)
                if field != "eviction_completed":
                    self.submitted.pop(key, None)
                    self.ended.ended(key, at_s=env.time_unix_nano / 1e9)
                return self._refresh(self.feed.end(key)) or held
            case "config_applied" | "config_deleted":
                return self._priority_class(env)
            case "bound":
                self._bound(GangKey(key), env.cause)
                return False
            case "gang_rejected":
                self._rejected(GangKey(key), env)
            case "gang_permitted":
                self._permitted_before(GangKey(key), env)
                return False
            case "placement_preempted":  # our own, read back while restoring
                self.preempted_in[GangKey(key)] = self.attempts.get(GangKey(key), 0)
                at_s = env.time_unix_nano / 1e9
                self.preempted_since.setdefault(GangKey(key), at_s)
                victims = env.placement_preempted.victims
                self.evictions.preempted_before(GangKey(key), victims, at_s=at_s)
                return False
            case "gang_waiting":
                self.parked.pop(GangKey(key), None)  # retried after an earlier time-out
                self.waiting[GangKey(key)] = env.gang_waiting.reason
                count = self.waiting_published.get(GangKey(key), 0)
                self.waiting_published[GangKey(key)] = count + 1
                return False
            case _:
                return False
        return True

    def _admitted_since(self, completed: events_pb2.Envelope) -> bool:
        """Whether the Kueue admission held for `completed`'s workload came after the
        eviction it completes (the binder stops only the admissions before an eviction)."""
        gang = self.admitted.get(completed.workload)
        eviction = completed.eviction_completed.eviction_sequence
        return gang is not None and 0 < eviction < gang.admitted.sequence

    def restored(self, *, binder_acked: int = 0) -> None:
        """The stream is replayed: restored permits hold their nodes from now on, but those
        the binder acknowledged (every part at or below `binder_acked`, its consumer's ack
        floor, read before the cluster is): it made or bound their pods, or never will."""
        self.restoring = False
        for gang, permit in sorted(self.permits.items()):
            if permit.read == set(permit.part_ids) and 0 < permit.sequence <= binder_acked:
                self._handled_before(gang, permit)
        self.preempted_in.clear()
        # A preemptor's try goes on where it was: its nomination holds until the deadline it
        # had, not a whole deadline from now (a victim that never stops would hold it longer).
        for gang, since_s in sorted(self.preempted_since.items()):
            self.scheduler.resume_try(gang, started_s=since_s)
        self.preempted_since.clear()
        for permit in self.permits.values():
            for pod, node in permit.bindings.items():
                self.assumed[pod] = (node, permit.uids.get(pod, ""))
                unmade = self.unmade.pods.get(pod)
                if unmade is not None and self.pods.get(pod) is unmade:
                    self._put_pod(unmade)  # held on its node until the binder creates it
        self.touch_all()

    def _handled_before(self, gang: GangKey, permit: Permit) -> None:
        """The binder handled `permit` before this restart (with `--bound-events binds` it
        stores no `bound` for pods it makes on their nodes): its pods are in the cluster as
        the binder left them, or were deleted since (`kubectl delete pod`). Nothing is held
        for them, as a gang-permit that did not restart holds nothing for pods deleted."""
        del self.permits[gang]
        for key in permit.order:
            unmade = self.unmade.forget(key)
            if unmade is not None and self.pods.get(key) is unmade:
                self._forget_pod(key)

    def _drop_permit(self, gang: GangKey) -> None:
        """The gang's admission ended (or a new one began): a permit not answered yet names
        pods that are gone, and must not hold their nodes for pods made again under the
        same names."""
        permit = self.permits.pop(gang, None)
        if permit is not None:
            for pod in permit.bindings:
                self.assumed.pop(pod, None)

    def _admit(self, env: events_pb2.Envelope) -> bool:
        """Hold a Kueue workload's admission as its gang; whether any of its pods is known.

        An admission of a workload that finished or was deleted since is dropped: admission
        decided it before it read that, and stored it after (docs/events.md, "A name used
        again"); the pods of that name now are a new workload's.
        """
        key = env.workload
        if env.submitted_id in self.ended:
            log.info("skipping an admission of a workload ended since", extra={"workload": key})
            return False
        known = self.submitted.get(key)
        if known is None and env.admitted.manifest_json:
            # Submitted before what this replica replayed: the admission carries the spec.
            known = submitted_from(env.admitted.manifest_json, env)
        admission = admission_of(env.admitted.admission)
        unmade: tuple[Pod, ...] = ()
        if known is not None and known.workload is not None:
            spec = gang_of_admitted(
                known.workload,
                admission,
                flavors={},  # the pods come from the cluster with their flavors' labels
                priority=known.priority,
                created_s=known.created_s,
                groups=self.feed.groups(),
                with_pods=False,
            ).spec
            unmade = self._to_create(env, known)
        else:  # no spec at all (an older admission): all its admitted pods, at once
            spec = GangSpec(
                key=GangKey(key),
                min_count=sum(a.count for a in admission.pod_set_assignments),
                created_s=env.time_unix_nano / 1e9,
                workload=key,
            )
        self.admitted[key] = KueueGang(spec=spec, admitted=env)
        self.attempts.pop(GangKey(key), None)  # a new admission: its own attempts
        self.preempted_since.pop(GangKey(key), None)
        self.evictions.forget_preemptor(GangKey(key))
        self._drop_permit(GangKey(key))  # and its own permit
        self._drop_unmade(GangKey(key))  # and its own pods to create
        self.touch(key)
        changed = self._refresh(self.feed.admit(spec))
        for pod in unmade:
            self.unmade.add(GangKey(key), pod)
            if PodKey(pod.key) not in self.pods:  # else once a pod of an earlier one is gone
                self._put_pod(pod)
        return changed or bool(unmade)

    def _to_create(self, env: events_pb2.Envelope, known: Submitted) -> tuple[Pod, ...]:
        """The pods the binder creates on their nodes for admission `env`, placed before they
        exist; none when it creates them unbound, or someone else does (a Job controller, a
        copy's from another cluster), as the binder decides (`binder.handlers.on_admitted`)."""
        wl = known.workload
        if wl is None or not created_on_nodes(
            env.admitted, wl, cluster=self.cluster, creates_on_nodes=self.creates_on_nodes
        ):
            return ()
        try:
            return pods_to_create(wl, admitted_pod_sets(wl, env.admitted))
        except AdmissionMismatchError:
            return ()  # the binder refuses it (dead-lettered): no pods to place

    def _made(self, pod: Pod) -> None:
        """`pod` is in the cluster: no longer one to create, if its gang's admission's."""
        gang = self.unmade.gang_of(PodKey(pod.key))
        kueue = self.admitted.get(gang) if gang is not None else None
        if kueue is not None:
            self.unmade.made(pod, kueue.admitted.sequence)

    def _drop_unmade(self, gang: GangKey) -> None:
        """The gang's admission ended (or a new one began): its pods not created yet never
        will be."""
        for key, pod in self.unmade.drop(gang):
            if self.pods.get(key) is pod:
                self._forget_pod(key)

    def to_create(self, gang: GangKey) -> int:
        """The admission sequence whose pods the binder creates when `gang` is permitted (0:
        its pods exist, they are bound)."""
        kueue = self.admitted.get(gang)
        if kueue is None or not self.unmade.of(gang):
            return 0
        return kueue.admitted.sequence

    def _priority_class(self, env: events_pb2.Envelope) -> bool:
        """Fold in a PriorityClass of this cluster; another cluster's (its own of the same
        name) says nothing about the priority of this cluster's pods."""
        if env.cluster != self.cluster:
            return False
        if env.HasField("config_applied"):
            applied = env.config_applied
            if applied.kind != "PriorityClass":
                return False
            try:
                obj = applied_object(applied)
            except PayloadError:
                applied_document(applied)  # not JSON: raises, and the event is dead-lettered
                return False  # a PriorityClass muster cannot read: pods keep the default
            if not isinstance(obj, PriorityClass):
                return False
            self.feed.configured[obj.meta.name] = obj
        elif env.config_deleted.kind == "PriorityClass":
            self.feed.configured.pop(env.config_deleted.name, None)
        return False  # read when a pod is next seen; placed pods keep their priority

    def _permitted_before(self, gang: GangKey, env: events_pb2.Envelope) -> None:
        """Our own permit (or a part of it), read back while restoring: it holds until the
        binder answers. A permit's parts are joined; a part whose permit crashed before its
        later parts were stored holds what it names, and its gang's other pods are placed
        again once the pods named are seen bound (`_seen_bound`)."""
        permitted = env.gang_permitted
        whole = permitted.permit_id or env.event_id
        permit = self.permits.get(gang)
        if permit is None or permit.event_id != whole:
            permit = self.permits[gang] = Permit(
                event_id=whole,
                bindings={},
                restored=True,
                part_ids=part_ids(whole, permitted.parts),
            )
        for b in permitted.bindings:
            key = PodKey(f"{b.pod.namespace}/{b.pod.name}")
            permit.bindings[key] = NodeName(b.node)
            permit.uids[key] = b.pod.uid
        permit.order = tuple(permit.bindings)
        permit.read.add(env.event_id)
        permit.sequence = max(permit.sequence, env.sequence)
        self.waiting.pop(gang, None)
        self.parked.pop(gang, None)  # retried after an earlier time-out
        self.preempted_since.pop(gang, None)  # its try ended

    def _answered(self, gang: GangKey, cause: str, *, failed: bool = False) -> Permit | None:
        """The binder answered permit part `cause` (bound, or rejected); once it answered every
        part, the permit no longer holds: returned then, None before (and for an older
        permit's answer)."""
        permit = self.permits.get(gang)
        if permit is None or cause not in permit.part_ids:
            return None  # an older permit's answer
        permit.answered.add(cause)
        permit.bind_failed |= failed
        if len(permit.answered) < len(permit.part_ids):
            return None  # parts not answered yet: they are being bound
        del self.permits[gang]
        for pod in permit.bindings:
            self.assumed.pop(pod, None)
        return permit

    def _rejected(self, gang: GangKey, env: events_pb2.Envelope) -> None:
        rejected = env.gang_rejected
        self.touch(gang)
        attempt = self.attempts.get(gang, 0)
        self.attempts[gang] = attempt + 1
        self.waiting.pop(gang, None)
        self.preempted_since.pop(gang, None)  # its try ended: the next starts anew
        if rejected.reason == BIND_FAILED:
            permit = self._answered(gang, env.cause, failed=True)
            if permit is not None:
                self._bind_failed(gang, permit)
        elif rejected.reason == GANG_TIMED_OUT and self.restoring:
            if self.preempted_in.get(gang) == attempt:
                # It timed out while the victims it preempted for were stopping: the scheduler
                # would try it again once they are gone, and which of them are gone by now
                # is not known here, so it is tried again (a victim still there is preempted
                # again, with the next attempt's ids).
                self.parked.pop(gang, None)
                return
            self.parked[gang] = frozenset(p.uid for p in rejected.pods)

    def _bound(self, gang: GangKey, cause: str) -> None:
        permit = self._answered(gang, cause)
        if permit is not None and permit.bind_failed:  # an earlier part's bind failed
            self.touch(gang)
            self._bind_failed(gang, permit)

    def _bind_failed(self, gang: GangKey, permit: Permit) -> None:
        """Every part of `permit` is answered, one BindFailed: its pods not bound are pending
        again, the gang to be placed anew."""
        if not permit.restored:
            self.scheduler.bind_failed(gang)
            return
        for pod in sorted(permit.bindings):  # assumed bound until now: pending again
            if pod in self.pods and not self.pods[pod].node_name:
                self.scheduler.remove_pod(pod)  # a pending report does not undo a hold
                self._put_pod(self.pods[pod])

    # --- what the cluster can take (the MUSTER_CLUSTERS heartbeat) ---------------------------

    def capacity(self) -> ClusterCapacity:
        """Each schedulable, Ready node's free room, and the Kueue workloads whose pods are all
        bound or permitted (admission's dispatch drops its own estimate for those).

        Looks again only at the gangs touched since the last call (`touch`), and at the nodes
        whose room may have changed (`NodeRooms`).
        """
        rooms = self._rooms.rooms(self.nodes, self.scheduler)
        if self._recheck is None:  # a full look
            self._placed = sorted(k for k, g in self.admitted.items() if self._is_placed(g.spec))
        else:  # a gang that left `admitted` was touched then: it is looked at here
            for key in self._recheck:
                gang = self.admitted.get(key)
                at = bisect.bisect_left(self._placed, key)
                there = at < len(self._placed) and self._placed[at] == key
                if gang is not None and self._is_placed(gang.spec):
                    if not there:
                        self._placed.insert(at, key)
                elif there:
                    del self._placed[at]
        self._recheck = set()
        return ClusterCapacity(cluster=self.cluster, nodes=rooms, placed=tuple(self._placed))

    def touch(self, gang: str | None) -> None:
        """The placement of `gang` may have changed: `capacity` looks at it again."""
        if gang is not None and self._recheck is not None:
            self._recheck.add(gang)

    def touch_all(self) -> None:
        """Any gang's placement may have changed (a node, a time-out, a preemption)."""
        self._recheck = None

    def _is_placed(self, spec: GangSpec) -> bool:
        pods = self.feed.members.get(spec.key, {})
        return len(pods) >= spec.min_count and all(
            self.scheduler.node_of(pod) is not None for pod in pods
        )

    # --- the cluster ------------------------------------------------------------------------

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
