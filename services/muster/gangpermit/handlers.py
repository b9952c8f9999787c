"""Gang-permit's effects: publish the decisions of one pass over the waiting gangs.

Each decision is caused by the gang's `admitted` event, so a pass repeated after a crash
republishes the same event ids and JetStream drops the copies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Protocol

from google.protobuf.message import Message

from muster.bus.envelope import new_event
from muster.cluster.objects import PodView
from muster.contracts.v1 import events_pb2
from muster.core.gang import PodKey
from muster.gangpermit.state import Decision, Gang, GangState, Permit, TimedOut

log = logging.getLogger(__name__)

GANG_TIMED_OUT = "GangTimedOut"


class Publisher(Protocol):
    async def publish(self, env: events_pb2.Envelope) -> int: ...


def permitted_payload(decision: Permit, pods: Mapping[PodKey, PodView]) -> events_pb2.GangPermitted:
    bindings = []
    for b in decision.placement.bindings:
        pod = pods[b.pod]
        ref = events_pb2.PodRef(
            namespace=pod.namespace, name=pod.name, pod_set=pod.pod_set, uid=pod.uid
        )
        bindings.append(events_pb2.PodBinding(pod=ref, node=b.node))
    return events_pb2.GangPermitted(bindings=bindings)


async def publish_decisions(
    decisions: list[Decision],
    state: GangState,
    pods: Mapping[PodKey, PodView],
    *,
    publisher: Publisher,
    cluster: str,
) -> None:
    """Publish each decision, then record it in `state` (permits reserve, time-outs forget).

    Decisions are about different gangs (workloads): they are published together and each is
    recorded once JetStream has it. If some fail, the others are still recorded, and the first
    failure is raised.
    """
    sent: list[tuple[Decision, Gang]] = []
    envs = []
    for decision in decisions:
        gang = state.gangs.get(decision.workload)
        if gang is None:
            continue  # done meanwhile (finished, evicted) while the pass looked at the cluster
        payload: Message
        if isinstance(decision, Permit):
            field, payload = "gang_permitted", permitted_payload(decision, pods)
        else:
            assert isinstance(decision, TimedOut)
            field = "gang_rejected"
            payload = events_pb2.GangRejected(reason=GANG_TIMED_OUT, message=decision.message)
        envs.append(
            new_event(
                field,
                payload,
                cluster=cluster,
                workload=gang.key,
                generation=gang.admitted.generation,
                cause=gang.admitted,
                source=f"gangpermit/{cluster}",
            )
        )
        sent.append((decision, gang))
    results = await asyncio.gather(*(publisher.publish(e) for e in envs), return_exceptions=True)
    failure: BaseException | None = None
    for (decision, gang), result in zip(sent, results, strict=True):
        if isinstance(result, BaseException):
            failure = failure or result
        elif isinstance(decision, Permit):
            log.debug("gang permitted", extra={"workload": gang.key})
            state.permitted(gang.key, decision.placement)
        else:
            log.info("gang timed out: %s", decision.message, extra={"workload": gang.key})
            state.forget(gang.key)
    if failure is not None:
        raise failure
