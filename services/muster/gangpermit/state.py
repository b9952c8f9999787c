"""Gang-permit's state: the cluster's pods, what the event stream says about Kueue workloads
and past decisions, and the `GangScheduler` they feed. Pure: no I/O, no clock. Which gang a pod
is in, and which pods a gang source's change touches, is the shared `GangFeed`'s to say.

Facts arrive from two places, in any order:
- the cluster (`put`/`remove`, decoded api objects): Nodes, Pods, scheduling.k8s.io Workloads,
  PodGroups and PriorityClasses; kept by the lower layer, `muster.gangpermit.cluster_state`.
- the event stream (`apply_event`, here): Kueue workloads (`submitted`: spec and priority, read
  by `muster.gangpermit.submitted`; `admitted`: their gang, unless it names a submission that
  ended since; `finished`, `eviction_completed`, `deleted`: done; an `eviction_completed`
  naming pods answers a placement eviction, and ends nothing), PriorityClasses
  (`config.applied`), the binder's answers (`bound`, `gang_rejected` BindFailed), and, while
  `restoring`, gang-permit's own past decisions.

A restarted gang-permit replays the stream first (`restoring`), then `restored()`: permits
neither answered by the binder nor acknowledged by its consumer hold their nodes (their pods
count as bound there, "assumed"), gangs that timed out stay parked until one of their pods or
their spec changes (but a preemptor timed out while its victims stopped is tried again), and
the last waiting reason of each gang is known, so no decision is made or published twice.
`decide` turns one scheduling pass into events (`muster.gangpermit.translate`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from muster.admitted_podsets import AdmissionMismatchError, admitted_pod_sets, created_on_nodes
from muster.api.model import Pod, PriorityClass
from muster.api.wellknown import BIND_FAILED, GANG_TIMED_OUT, SCHEDULER_NAME
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES
from muster.contracts.v1 import events_pb2
from muster.core.dispatch import ClusterCapacity
from muster.core.placement.model import GangKey, GangSpec, PodKey, Scoring
from muster.core.placement.scheduler import DEFAULT_TIMEOUT_S, GangScheduler
from muster.core.placement.sources import gang_of_admitted, pods_to_create
from muster.core.submissions import ENDED_KEPT_S, EndedSubmissions
from muster.gangpermit.cluster_state import ClusterObject, ClusterState
from muster.gangpermit.evictions import RESEND_FIRST_S, RESEND_MAX_S, EvictionFlights
from muster.gangpermit.permits import Permit, answer, handled_before, read_back
from muster.gangpermit.submitted import (
    KueueGang,
    Submitted,
    admission_of,
    submitted_from,
    submitted_of,
)
from muster.payloads import PayloadError, applied_document, applied_object

__all__ = ["ClusterObject", "GangPermitState"]  # the objects `put` takes, and the facade

log = logging.getLogger(__name__)


class GangPermitState(ClusterState):
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
        scheduler = GangScheduler(
            scoring=scoring, default_timeout_s=default_timeout_s, preemption=preemption
        )
        super().__init__(scheduler_name=scheduler_name, scheduler=scheduler)
        self.cluster = cluster
        # Whether the binder creates an admitted workload's pods itself, by what it stands
        # for (`ClusterBackend.creates_on_nodes`): such pods are placed before they exist.
        self.creates_on_nodes = creates_on_nodes
        self.max_event_bytes = max_event_bytes  # the bus's: a larger permit goes in parts
        self.source = f"gangpermit/{cluster}"
        self.restoring = True
        self.applied_sequence = 0
        self.submitted: dict[str, Submitted] = {}
        # A late admission of a workload ended (within `ended_kept_s`) since is dropped.
        self.ended = EndedSubmissions(kept_s=ended_kept_s)
        # Placement evictions not answered yet, asked for again on a timer (`evictions`).
        self.evictions = EvictionFlights(
            first_s=evict_resend_s, max_s=max(evict_resend_s, RESEND_MAX_S)
        )
        self.resent_evictions = 0  # re-sends so far (a metric)
        # While restoring: the attempt in which each gang last preempted (see `_rejected`),
        # and when it first preempted in the attempt it is in (its try's deadline runs on).
        self.preempted_in: dict[GangKey, int] = {}
        self.preempted_since: dict[GangKey, float] = {}

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
            if handled_before(permit, binder_acked):
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
        binder answers (`permits.read_back`). A part whose permit crashed before its later
        parts were stored holds what it names, and its gang's other pods are placed again once
        the pods named are seen bound (`_seen_bound`)."""
        read_back(self.permits, gang, env)
        self.waiting.pop(gang, None)
        self.parked.pop(gang, None)  # retried after an earlier time-out
        self.preempted_since.pop(gang, None)  # its try ended

    def _answered(self, gang: GangKey, cause: str, *, failed: bool = False) -> Permit | None:
        """The binder answered permit part `cause`: the permit, once every part is answered
        (`permits.answer`), holds no more."""
        permit = answer(self.permits, gang, cause, failed=failed)
        if permit is not None:
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
        placed = self._placed.placed(self.admitted, self._is_placed)
        return ClusterCapacity(cluster=self.cluster, nodes=rooms, placed=placed)

    def _is_placed(self, spec: GangSpec) -> bool:
        pods = self.feed.members.get(spec.key, {})
        return len(pods) >= spec.min_count and all(
            self.scheduler.node_of(pod) is not None for pod in pods
        )
