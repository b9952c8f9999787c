"""What `GangScheduler` knows between passes: pods, gangs, nominations, and what changed.

Facts go in through the same verbs as the scheduler's (upsert/remove node, gang and pod,
bind_failed); this module keeps the records (`records`) consistent with the node table (room
held by permitted and bound pods), the owners a preemption evicts, the nominations
(`nominated`) and deadlines (`deadlines`), and remembers which units a pass must look at.
Decisions are made in `scheduler` and `decisions`.
"""

from __future__ import annotations

from collections import Counter

from muster.core.placement import trees
from muster.core.placement.deadlines import Deadlines
from muster.core.placement.model import GangKey, GangSpec, NodeInfo, NodeName, PodInfo, PodKey
from muster.core.placement.nodes import NodeTable
from muster.core.placement.nominated import NominatedRoom
from muster.core.placement.records import GangRecord, Nomination, PodRecord
from muster.core.placement.signature import Signature, SignatureKey, signature_key


class PlacementState:
    """Records of one cluster's pods and gangs, kept consistent with its node table.

    `epoch` grows whenever something happens that could let a waiting unit fit (room freed,
    a node changed, a pod bound from outside, a nomination dropped); a unit that failed at the
    current epoch is not tried again until it changes itself.
    """

    def __init__(self, *, default_timeout_s: float) -> None:
        self.table = NodeTable()
        self.default_timeout_s = default_timeout_s
        self.sigs: dict[SignatureKey, Signature] = {}
        self.pods: dict[PodKey, PodRecord] = {}
        self.gangs: dict[GangKey, GangRecord] = {}
        self.owned: dict[str, set[PodKey]] = {}  # owner -> its pods
        self.holders: dict[str, set[PodKey]] = {}  # owner -> its pods that hold room
        self.held_priorities: Counter[int] = Counter()  # of the pods that hold room
        self.nominated = NominatedRoom(self.table)
        self.awaited: dict[PodKey, GangKey] = {}  # a former victim's pod -> its preemptor
        # Tries a restarted gang-permit resumes: when each began before the restart
        # (`GangScheduler.resume_try`), taken by the gang's next first attempt.
        self.resumed: dict[GangKey, float] = {}
        self.dirty_gangs: set[GangKey] = set()
        self.dirty_singles: set[PodKey] = set()
        self.waiting_gangs: set[GangKey] = set()
        self.waiting_singles: set[PodKey] = set()
        self.epoch = 0
        self.deadlines = Deadlines(self.gangs, default_timeout_s=default_timeout_s)

    # --- facts ---------------------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo) -> None:
        if self.table.upsert(node):
            self.epoch += 1

    def remove_node(self, name: NodeName) -> None:
        if self.table.remove(name):
            self.epoch += 1  # no room gained, but the reasons waiting units give change

    def upsert_gang(self, spec: GangSpec) -> None:
        gang = self.gang(spec.key)
        if gang.spec == spec:
            return
        gang.spec = spec
        gang.timed_out = False
        trees.link(self, gang, spec)
        if not gang.placed and gang.held:  # pods bound before the spec was known
            gang.placed = gang.held >= spec.min_count
            if gang.placed:
                trees.root_of(self, gang).placed = True  # the tree was placed before
        if gang.nomination is not None:
            self.nominated.move(gang.nomination, spec.priority)
        self.deadlines.push(gang)
        self._refresh_owners(gang)
        self.regroup(gang)

    def remove_gang(self, key: GangKey) -> None:
        gang = self.gangs.get(key)
        if gang is None or gang.spec is None:
            return
        gang.spec = None
        gang.started_s = None
        gang.timed_out = False
        self.drop_nomination(gang)
        self.waiting_gangs.discard(key)
        trees.unlink(self, gang)
        if not gang.pods:
            self._forget(gang)
            return
        self._refresh_owners(gang)
        self.regroup(gang)

    def upsert_pod(self, pod: PodInfo) -> None:
        record = self.pods.get(pod.key)
        if record is None:
            self._attach(pod)
            return
        old = record.info
        if old == pod:
            return
        same_place = old.gang == pod.gang and signature_key(pod) == record.sig.key
        if same_place and record.node is not None and pod.node in ("", record.node):
            if pod.node:
                record.bound = True  # a reservation becomes use: the same room
            if old.priority != pod.priority or old.workload != pod.workload:
                self._unindex(record)
                record.info = pod
                record.owner = self.owner_of(pod)
                self._index(record)
                self.epoch += 1  # the victims a preemption may choose changed
            record.info = pod
            return
        self._detach(record)
        self._attach(pod)

    def remove_pod(self, key: PodKey) -> None:
        record = self.pods.get(key)
        if record is not None:
            self._detach(record)

    def bind_failed(self, key: GangKey) -> None:
        gang = self.gangs.get(key)
        if gang is None:
            pod = self.pods.get(PodKey(key))
            if pod is not None and pod.node is not None and not pod.bound:
                self.release(pod)
                self.dirty_singles.add(pod.info.key)
            return
        for pod_key in sorted(gang.pods):
            pod = self.pods[pod_key]
            if pod.node is not None and not pod.bound:
                self.release(pod)
        spec = gang.spec
        if gang.placed and (spec is None or gang.held < spec.min_count):
            gang.placed = False
        gang.started_s = None
        gang.reason = ""
        self.regroup(gang)

    # --- records -------------------------------------------------------------------------------

    def gang(self, key: GangKey) -> GangRecord:
        gang = self.gangs.get(key)
        if gang is None:
            gang = self.gangs[key] = GangRecord(key)
        return gang

    def _forget(self, gang: GangRecord) -> None:
        trees.unlink(self, gang)
        self.drop_nomination(gang)
        self._stop_awaiting(gang)
        del self.gangs[gang.key]
        self.resumed.pop(gang.key, None)
        self.dirty_gangs.discard(gang.key)
        self.waiting_gangs.discard(gang.key)

    def _signature(self, pod: PodInfo) -> Signature:
        key = signature_key(pod)
        sig = self.sigs.get(key)
        if sig is None:
            sig = self.sigs[key] = Signature(key, pod, self.table)
        sig.refs += 1
        return sig

    def owner_of(self, pod: PodInfo) -> str:
        """What a preemption evicts with `pod`: its workload, else its gang's, else itself."""
        if pod.workload:
            return pod.workload
        if pod.gang is not None:
            gang = self.gangs.get(pod.gang)
            spec = None if gang is None else gang.spec
            return (spec.workload if spec is not None else "") or pod.gang
        return pod.key

    def _refresh_owners(self, gang: GangRecord) -> None:
        for key in gang.pods:
            pod = self.pods[key]
            self._set_owner(pod, self.owner_of(pod.info))

    def _set_owner(self, pod: PodRecord, owner: str) -> None:
        self._unindex(pod)
        pod.owner = owner
        self._index(pod)

    def _index(self, pod: PodRecord) -> None:
        self.owned.setdefault(pod.owner, set()).add(pod.info.key)
        if pod.node is not None:
            self._add_holder(pod)

    def _unindex(self, pod: PodRecord) -> None:
        if pod.node is not None:
            self._drop_holder(pod)
        _discard(self.owned, pod.owner, pod.info.key)

    def _add_holder(self, pod: PodRecord) -> None:
        self.holders.setdefault(pod.owner, set()).add(pod.info.key)
        self.held_priorities[pod.info.priority] += 1

    def _drop_holder(self, pod: PodRecord) -> None:
        _discard(self.holders, pod.owner, pod.info.key)
        self.held_priorities[pod.info.priority] -= 1
        if not self.held_priorities[pod.info.priority]:
            del self.held_priorities[pod.info.priority]

    def holds_below(self, priority: int) -> bool:
        """Whether any pod of a priority lower than `priority` holds room."""
        return any(p < priority for p in self.held_priorities)

    def _attach(self, info: PodInfo) -> None:
        record = PodRecord(info, self._signature(info), self.owner_of(info))
        self.pods[info.key] = record
        self._index(record)
        gang = None if info.gang is None else self.gang(info.gang)
        was_single = False
        if gang is not None:
            gang.pods.add(info.key)
            was_single = gang.placed and gang.spec is not None
        if info.node:
            node = NodeName(info.node)
            self.hold(record, node, bound=True)
            self.table.add_use(node, record.sig.demand(self.table))
            self.epoch += 1  # a new holder: a possible victim
            if gang is not None and not gang.placed and gang.spec is not None:
                gang.placed = gang.held >= gang.spec.min_count
                if gang.placed:
                    trees.root_of(self, gang).placed = True  # the tree was placed before
        if gang is None:
            self.dirty_singles.add(info.key)
            return
        if not info.node:
            gang.timed_out = False  # one of its pods changed: a new try
            trees.root_of(self, gang).timed_out = False
        if (gang.placed and gang.spec is not None) != was_single:
            self.regroup(gang)  # permitted with this pod: its pending pods go on their own
        else:
            self._regroup_pod(gang, record)

    def _detach(self, record: PodRecord) -> None:
        key = record.info.key
        if record.node is not None:
            self.release(record)
        self._unindex(record)
        del self.pods[key]
        self.dirty_singles.discard(key)
        self.waiting_singles.discard(key)
        record.sig.refs -= 1
        if record.sig.refs == 0:
            del self.sigs[record.sig.key]
        if record.info.gang is None:
            return
        gang = self.gangs[record.info.gang]
        gang.pods.discard(key)
        if not gang.pods and gang.spec is None:
            self._forget(gang)
        elif not gang.timed_out:
            self.dirty_gangs.add(gang.key)

    def hold(self, pod: PodRecord, node: NodeName, *, bound: bool) -> None:
        """Record that `pod` holds room on `node`; the caller adds the room to the table."""
        pod.node = node
        pod.bound = bound
        self._add_holder(pod)
        self.waiting_singles.discard(pod.info.key)
        self.dirty_singles.discard(pod.info.key)
        if pod.info.gang is not None:
            self.gangs[pod.info.gang].held += 1

    def release(self, pod: PodRecord) -> None:
        """Give `pod`'s room back: it is pending again (or gone, for the caller)."""
        assert pod.node is not None
        self.table.add_use(pod.node, pod.sig.demand(self.table), times=-1)
        self._drop_holder(pod)
        pod.node = None
        pod.bound = False
        pod.reason = ""
        self.epoch += 1
        preemptor = self.nominated.evicting.pop(pod.info.key, None)
        if preemptor is not None:
            nomination = self.gangs[preemptor].nomination
            assert nomination is not None
            nomination.victim_pods.discard(pod.info.key)
            self.dirty_gangs.add(preemptor)
        self._victim_gone(pod.info.key)
        if pod.info.gang is None:
            return
        gang = self.gangs[pod.info.gang]
        gang.held -= 1
        if gang.held == 0 and gang.placed:
            gang.placed = False
            self.regroup(gang)
            trees.released(self, gang)

    def is_single(self, pod: PodRecord) -> bool:
        """Whether `pod` is placed on its own: no gang, or a late member of a permitted one."""
        if pod.info.gang is None:
            return True
        gang = self.gangs[pod.info.gang]
        return gang.placed and gang.spec is not None

    def regroup(self, gang: GangRecord) -> None:
        """After a change to `gang`: it and its pending pods are looked at on the next pass,
        the pods on their own if the gang is permitted, else with the gang."""
        self.dirty_gangs.add(gang.key)
        for key in gang.pods:
            self._regroup_pod(gang, self.pods[key])

    def _regroup_pod(self, gang: GangRecord, pod: PodRecord) -> None:
        """`regroup` for one pod of `gang`: all a pod joining it needs, unless the gang was
        permitted or unpermitted with it (each pod of a gang of n joining: n looks, not n²)."""
        self.dirty_gangs.add(gang.key)
        if pod.node is not None:
            return
        key = pod.info.key
        if gang.placed and gang.spec is not None:
            self.dirty_singles.add(key)
        else:
            self.dirty_singles.discard(key)
            self.waiting_singles.discard(key)

    def start_try(self, gang: GangRecord, now_s: float) -> bool:
        """The first attempt of `gang`'s try: its clock starts now, or when the try began
        before a restart (`resumed`); whether it was resumed."""
        resumed = self.resumed.pop(gang.key, None)
        gang.started_s = now_s if resumed is None else min(resumed, now_s)
        self.deadlines.push(gang)
        return resumed is not None

    def mark_placed(self, gang: GangRecord) -> None:
        """`gang` (or a tree's root) was permitted: its try ends and its nomination goes."""
        self.resumed.pop(gang.key, None)
        gang.placed = True
        gang.started_s = None
        gang.reason = ""
        gang.tried = -1
        self.waiting_gangs.discard(gang.key)
        self.drop_nomination(gang)

    def pending(self, gang: GangRecord) -> list[PodKey]:
        """`gang`'s pods that hold nothing, by key."""
        return sorted(k for k in gang.pods if self.pods[k].node is None)

    # --- nominations ---------------------------------------------------------------------------

    def nominate(self, gang: GangRecord, nomination: Nomination) -> None:
        self.drop_nomination(gang)
        gang.nomination = nomination
        self.nominated.add(gang.key, nomination)

    def drop_nomination(self, gang: GangRecord) -> None:
        if gang.nomination is None:
            return
        self.nominated.remove(gang.key)
        gang.nomination = None
        self.epoch += 1  # the room it kept is free for others again

    def await_victims(self, gang: GangRecord) -> None:
        """`gang` (or a tree's root) timed out: its nomination goes, so that a victim that
        never stops does not keep that room from others for ever; the pods of its victims
        still holding room are remembered, and once the last of them is gone the gang is tried
        again (a new try, with a new deadline): they were evicted for it.

        As kube-scheduler re-queues an unschedulable pod when an assigned pod is deleted
        (NodeResourcesFit's queueing hint), narrowed to the pods this preemptor waited for:
        muster's other timed-out gangs still wait until one of their pods or their spec
        changes.
        """
        self._stop_awaiting(gang)
        nomination = gang.nomination
        if nomination is not None:
            gang.former_victims = set(nomination.victim_pods)
            for key in gang.former_victims:
                self.awaited[key] = gang.key
        self.drop_nomination(gang)

    def _victim_gone(self, key: PodKey) -> None:
        """`key` no longer holds room: a timed-out preemptor that waited for it alone is tried
        again."""
        preemptor = self.awaited.pop(key, None)
        gang = None if preemptor is None else self.gangs.get(preemptor)
        if gang is None:
            return
        gang.former_victims.discard(key)
        if not gang.former_victims and gang.timed_out:
            gang.timed_out = False
            self.regroup(gang)

    def _stop_awaiting(self, gang: GangRecord) -> None:
        for key in gang.former_victims:
            if self.awaited.get(key) == gang.key:
                del self.awaited[key]
        gang.former_victims = set()

    # --- deadlines -----------------------------------------------------------------------------

    def take_due(self, now_s: float) -> None:
        """Mark every gang whose deadline has come for the next pass."""
        self.dirty_gangs.update(self.deadlines.take_due(now_s))


def _discard(index: dict[str, set[PodKey]], owner: str, key: PodKey) -> None:
    keys = index.get(owner)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[owner]
