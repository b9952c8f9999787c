"""Gang-permit's decisions to events, as `translate.py` in the other services: one scheduling
pass as the events to publish (docs/events.md), and its memos. Pure.

`decide(state, now_s=...)` runs `GangScheduler.schedule` and turns each decision into events:
GangPermitted → `workload.gang_permitted` (in parts when too large for one event,
`muster.gangpermit.parts`); GangTimedOut → `workload.gang_rejected` (reason GangTimedOut,
every pod); GangWaiting → `workload.gang_waiting` (only when the reason differs from the last
one published); PlacementPreempted → `workload.placement_preempted` (its pods listed when they
fit), plus `cmd.evict` listing the pods of each victim that Kueue does not manage, in as many
commands as fit the bus's limit (a Kueue workload is evicted by admission, which owns its
quota). The `workload` field is the gang's key. Then each `cmd.evict` not answered within its
back-off is sent again (`resend_evictions`, `muster.gangpermit.evictions`).

Event ids are derived from what was decided (gang, its attempt, its pods' uids, the outcome), so
a pass repeated after a crash publishes the same ids and JetStream drops the copies.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable, Sequence
from typing import Final

from google.protobuf.message import Message

from muster.api.ids import uuid5_text
from muster.api.wellknown import GANG_TIMED_OUT, PLACEMENT_PREEMPTED, POD_SET_ANNOTATION
from muster.bus.envelope import new_event
from muster.contracts.v1 import events_pb2
from muster.core.placement.model import (
    Binding,
    GangKey,
    GangPermitted,
    GangTimedOut,
    GangWaiting,
    PlacementPreempted,
    PodKey,
)
from muster.gangpermit.parts import part_id, part_ids, split_runs
from muster.gangpermit.permits import Permit
from muster.gangpermit.state import GangPermitState

log = logging.getLogger(__name__)

# The namespace of gang-permit's event ids. Fixed forever: changing it breaks dedupe of a pass
# repeated across an upgrade.
DECISION_ID_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_DNS, "gangpermit.muster.dev")
# The namespace of re-sent evictions' ids (`resend_evictions`). Fixed forever, as above.
RESEND_ID_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_DNS, "evict-resends.muster.dev")


def decide(state: GangPermitState, *, now_s: float) -> list[events_pb2.Envelope]:
    """One pass: every decision as events, in the order decided; memos updated as if published.

    The caller must publish every event returned (retrying with the same ids until JetStream has
    them): the scheduler already holds the permits' room.
    """
    out: list[events_pb2.Envelope] = []
    now_ns = int(now_s * 1e9)
    for decision in state.scheduler.schedule(now_s=now_s):
        match decision:
            case GangPermitted(gang=gang, bindings=bindings):
                envs = _permitted(state, gang, bindings, now_ns)
                whole = envs[0].gang_permitted.permit_id or envs[0].event_id
                nodes = {b.pod: b.node for b in bindings}
                state.permits[gang] = Permit(
                    event_id=whole,
                    bindings=nodes,
                    restored=False,
                    part_ids=part_ids(whole, len(envs)),
                )
                state.waiting.pop(gang, None)
                for pod in nodes:  # a late pod of a Kueue gang is permitted as its own unit
                    state.touch(state.feed.gang_of.get(pod))
                out.extend(envs)
            case GangTimedOut(gang=gang, reason=reason, pods=pods):
                state.touch_all()
                refs = _refs(state, pods)
                if len(split_runs(refs, max_event_bytes=state.max_event_bytes)) > 1:
                    # Too many to list (a gang of tens of thousands): none, as the field
                    # allows; a restarted gang-permit then tries the gang again, not parks it.
                    refs = []
                payload = events_pb2.GangRejected(reason=GANG_TIMED_OUT, message=reason, pods=refs)
                out.append(_event(state, "gang_rejected", payload, gang, now_ns))
                state.attempts[gang] = state.attempts.get(gang, 0) + 1
                state.waiting.pop(gang, None)
            case GangWaiting(gang=gang, reason=reason):
                if state.awaits_admission(gang):
                    continue  # pods the binder created a moment before `admitted` reached us
                if state.waiting.get(gang) != reason:
                    out.append(_waiting(state, decision, now_ns))
            case PlacementPreempted():
                state.touch_all()
                out.extend(_preempted(state, decision, now_ns))
    out.extend(resend_evictions(state, now_s=now_s))
    return out


def _waiting(state: GangPermitState, d: GangWaiting, now_ns: int) -> events_pb2.Envelope:
    published = state.waiting_published.get(d.gang, 0)
    payload = events_pb2.GangWaiting(reason=d.reason, pending=d.pending, min_count=d.min_count)
    # Its pods named by their uids' fold, not every uid: one is published per pass while a
    # big gang's pods are made (~400 at 100 000 pods), each O(N log N) when hashed whole.
    members = state.member_uids.digest(d.gang) if d.gang in state.feed.members else None
    env = _event(
        state,
        "gang_waiting",
        payload,
        d.gang,
        now_ns,
        detail=f"{published}/{d.reason}",
        members=members,
    )
    state.waiting[d.gang] = d.reason
    state.waiting_published[d.gang] = published + 1
    return env


def _preempted(
    state: GangPermitState, d: PlacementPreempted, now_ns: int
) -> list[events_pb2.Envelope]:
    """The event about the preemptor, then the `cmd.evict` of each victim outside Kueue.

    The event lists the victims' pods only when they fit it (`pod_count` says how many there
    are): a victim of tens of thousands of pods made it too large for the bus, refused for
    good, and the preemptor waited on room never freed. Each victim's pods go in as many
    commands as fit (`_evictions`)."""
    refs = _refs(state, d.pods)
    listed = refs if len(split_runs(refs, max_event_bytes=state.max_event_bytes)) == 1 else []
    payload = events_pb2.PlacementPreempted(victims=d.victims, pods=listed, pod_count=len(d.pods))
    announced = _event(state, "placement_preempted", payload, d.gang, now_ns)
    out = [announced]
    owned: dict[str, list[PodKey]] = {}
    for pod in d.pods:
        owned.setdefault(state.owners.get(pod, pod), []).append(pod)
    for n, victim in enumerate(d.victims, start=1):
        if victim in state.admitted:
            continue  # a Kueue workload: admission evicts it (it owns the quota)
        commands = _evictions(state, d.gang, victim, owned.get(victim, []), announced, n=n)
        state.evictions.sent(d.gang, commands, now_s=now_ns / 1e9)
        out.extend(commands)
    return out


def resend_evictions(state: GangPermitState, *, now_s: float) -> list[events_pb2.Envelope]:
    """`cmd.evict` again, with new ids, for each eviction not answered within its back-off
    (`muster.gangpermit.evictions`): of the pods its preemptor still waits for and the cluster
    still has (the same uid). The binder stops each pod only while its uid is the one named,
    and an answer names its command, so a re-send is harmless where the first one did arrive.
    """
    out: list[events_pb2.Envelope] = []
    state.evictions.resumed()  # this pass decided again what a restart read back
    for flight in state.evictions.due(now_s=now_s):
        waited = state.scheduler.victims_of(flight.preemptor)
        pods = sorted(
            pod
            for pod, uid in flight.pods.items()
            if pod in waited and pod in state.pods and state.pods[pod].meta.uid == uid
        )
        if not pods:
            state.evictions.drop(flight)
            continue
        # The id says which re-send this is of which pods: the same after a restart (JetStream
        # drops the copy), another for the next one.
        fact = "/".join(
            [state.cluster, flight.preemptor, flight.victim, str(flight.resends + 1)]
            + [flight.pods[p] for p in pods]
        )
        whole_id = uuid5_text(RESEND_ID_NAMESPACE, fact)
        kueue = state.admitted.get(flight.preemptor)
        commands = _evictions(
            state,
            flight.preemptor,
            flight.victim,
            pods,
            kueue.admitted if kueue is not None else None,
            whole_id=whole_id,
            attempt=flight.resends + 2,
            now_ns=int(now_s * 1e9),
        )
        state.evictions.sent(flight.preemptor, commands, now_s=now_s, resent=True)
        state.resent_evictions += 1
        log.info(
            "eviction for %s not answered; asking again (attempt %d)",
            flight.preemptor,
            flight.resends + 1,
            extra={"workload": flight.victim},
        )
        out.extend(commands)
    return out


def _evictions(
    state: GangPermitState,
    gang: GangKey,
    victim: str,
    pods: Sequence[PodKey],
    cause: events_pb2.Envelope | None,
    *,
    n: int = 0,
    whole_id: str | None = None,
    attempt: int = 1,
    now_ns: int | None = None,
) -> list[events_pb2.Envelope]:
    """`cmd.evict` of `victim`'s `pods`: one command as before, or, when that would be over
    the bus's event limit, one per run of pods that fits. Each command stops exactly the pods
    it names, so the binder carries out each on its own, in any order, and again after a
    crash without harm. The whole command's id is derived as a single one's always was; each
    part's from it (`parts.part_id`), so a pass repeated after a crash publishes the same ids.
    Each part says which it is (`part`, `parts`, `command_id`), and the binder's answer
    repeats it. A re-send (`resend_evictions`) gives its own `whole_id` and `attempt`.
    """

    def command(
        refs: list[events_pb2.PodRef],
        event_id: str | None,
        *,
        part: int = 0,
        parts: int = 0,
        command_id: str = "",
    ) -> events_pb2.Envelope:
        payload = events_pb2.EvictRequested(
            reason=PLACEMENT_PREEMPTED,
            message=f"to place gang {gang}",
            attempt=attempt,
            pods=refs,
            part=part,
            parts=parts,
            command_id=command_id,
        )
        return new_event(
            "evict_requested",
            payload,
            cluster=state.cluster,
            workload=victim,
            cause=cause,
            source=state.source,
            n=n,
            now_ns=cause.time_unix_nano if now_ns is None and cause is not None else now_ns,
            event_id=event_id,
        )

    refs = _refs(state, pods)
    runs = split_runs(refs, max_event_bytes=state.max_event_bytes)
    whole = command(refs if len(runs) == 1 else [], whole_id)
    if len(runs) == 1:
        return [whole]
    return [
        command(
            run,
            part_id(whole.event_id, k),
            part=k,
            parts=len(runs),
            command_id=whole.event_id,
        )
        for k, run in enumerate(runs)
    ]


def _permitted(
    state: GangPermitState, gang: GangKey, bindings: Iterable[Binding], now_ns: int
) -> list[events_pb2.Envelope]:
    """The permit as one `gang_permitted`, or, when that would be over the bus's event limit,
    as parts that each fit (`muster.gangpermit.parts`), part 0 first. The whole permit's id is
    derived as a single event's always was, so a permit that fits keeps its id across the
    upgrade; each part's id is derived from it."""
    refs = [events_pb2.PodBinding(pod=_ref(state, b.pod), node=b.node) for b in bindings]
    # Pods not made yet are created on their nodes, for the admission that placed them.
    # (0, False: bound as before, and the event as it was written before.)
    admission = state.to_create(gang)
    permit = events_pb2.GangPermitted(
        bindings=refs, create=bool(admission), admission_sequence=admission
    )
    whole = _event(state, "gang_permitted", permit, gang, now_ns)
    runs = split_runs(refs, max_event_bytes=state.max_event_bytes)
    if len(runs) == 1:
        return [whole]
    kueue = state.admitted.get(gang)
    return [
        new_event(
            "gang_permitted",
            events_pb2.GangPermitted(
                bindings=run,
                part=k,
                parts=len(runs),
                permit_id=whole.event_id,
                create=bool(admission),
                admission_sequence=admission,
            ),
            cluster=state.cluster,
            workload=gang,
            generation=whole.generation,
            cause=kueue.admitted if kueue is not None else None,
            source=state.source,
            now_ns=now_ns,
            event_id=part_id(whole.event_id, k),
        )
        for k, run in enumerate(runs)
    ]


def _refs(state: GangPermitState, pods: Sequence[PodKey]) -> list[events_pb2.PodRef]:
    return [_ref(state, pod) for pod in pods]


def _ref(state: GangPermitState, key: PodKey) -> events_pb2.PodRef:
    pod = state.pods.get(key)
    namespace, _, name = key.partition("/")
    if pod is None:
        return events_pb2.PodRef(namespace=namespace, name=name)
    group = pod.workload_ref.pod_group if pod.workload_ref is not None else ""
    return events_pb2.PodRef(
        namespace=namespace,
        name=name,
        pod_set=pod.meta.annotations.get(POD_SET_ANNOTATION, group),
        uid=pod.meta.uid,
    )


def _event(
    state: GangPermitState,
    field: str,
    payload: Message,
    gang: GangKey,
    now_ns: int,
    *,
    detail: str = "",
    members: str | None = None,
) -> events_pb2.Envelope:
    """An event about `gang`, caused by its Kueue admission if it has one, with an id derived
    from the gang's attempt, its pods (every uid, or `members`: their fold) and `detail` (see
    the module docstring)."""
    kueue = state.admitted.get(gang)
    cause = kueue.admitted if kueue is not None else None
    if members is not None:
        uids = [members]
    else:
        pods = state.feed.members.get(gang) or {PodKey(gang): None}
        uids = sorted(state.pods[p].meta.uid for p in pods if p in state.pods)
    digest = hashlib.sha256(
        "\n".join([*uids, payload.SerializeToString(deterministic=True).hex()]).encode()
    )
    fact = "/".join(
        [
            state.cluster,
            gang,
            cause.event_id if cause is not None else "",
            str(state.attempts.get(gang, 0)),
            field,
            detail,
            digest.hexdigest()[:32],
        ]
    )
    return new_event(
        field,
        payload,
        cluster=state.cluster,
        workload=gang,
        generation=cause.generation if cause is not None else 0,
        cause=cause,
        source=state.source,
        now_ns=now_ns,
        event_id=uuid5_text(DECISION_ID_NAMESPACE, fact),  # str(uuid5(...)), cheaper
    )
