"""A gang-permit restarted while a preemptor waits for victims that do not stop keeps the
preemptor's deadline: its try goes on from its first preemption, read back from the stream.
Before, the restart started a whole new deadline, and the room nominated for it was held that
much longer. Past the deadline already, it times out at once and waits for those victims."""

from __future__ import annotations

from cluster_docs import fed, objects, preemption

from muster.api.model import Pod
from muster.contracts.v1 import events_pb2
from muster.gangpermit.state import GangPermitState
from muster.gangpermit.translate import decide

PREEMPTOR = "ns/high/workers"
VICTIM_PODS = 4
NO_RESEND_S = 1e6  # the binder answered: no eviction is sent again here
PREEMPTED_AT_S = 10.0
DEADLINE_S = PREEMPTED_AT_S + 300.0  # the default gang timeout


def preempted_then_restarted() -> tuple[list[events_pb2.Envelope], GangPermitState]:
    """What gang-permit published before the restart, and the restarted state (the victims
    still run: they did not stop)."""
    before = fed(preemption(VICTIM_PODS), evict_resend_s=NO_RESEND_S)
    stream = decide(before, now_s=PREEMPTED_AT_S)
    for n, env in enumerate(stream, start=1):
        env.sequence = n
    return stream, fed(preemption(VICTIM_PODS), stream=stream, evict_resend_s=NO_RESEND_S)


def types(envs: list[events_pb2.Envelope]) -> list[str]:
    return [e.type for e in envs]


def test_a_restarted_preemptor_times_out_at_the_deadline_it_had() -> None:
    stream, restarted = preempted_then_restarted()

    again = decide(restarted, now_s=200.0)  # the same nomination, the same ids
    assert [e.event_id for e in again] == [e.event_id for e in stream]
    assert decide(restarted, now_s=DEADLINE_S - 1) == []

    (rejected,) = decide(restarted, now_s=DEADLINE_S)  # not 200 s + 300 s

    assert (rejected.type, rejected.gang_rejected.reason) == (
        "workload.gang_rejected",
        "GangTimedOut",
    )


def test_a_preemptor_restarted_past_its_deadline_times_out_and_waits_for_its_victims() -> None:
    stream, restarted = preempted_then_restarted()

    envs = decide(restarted, now_s=DEADLINE_S + 100)

    assert types(envs) == ["workload.placement_preempted", "cmd.evict", "workload.gang_rejected"]
    assert [e.event_id for e in envs[:2]] == [e.event_id for e in stream]  # dropped as copies
    for obj in objects(preemption(VICTIM_PODS)):
        if isinstance(obj, Pod) and obj.meta.name.startswith("low-"):
            restarted.remove(obj)
    assert types(decide(restarted, now_s=DEADLINE_S + 101)) == ["workload.gang_permitted"]
