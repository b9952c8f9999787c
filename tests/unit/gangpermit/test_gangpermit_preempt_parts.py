"""A placement preemption of a victim too large for one event (docs/events.md, "Large
preemptions"): `placement_preempted` counts the pods it cannot list, and the victim's
`cmd.evict` goes in commands that each fit and together name every pod once.

The bus's limit is lowered here so that a victim of a few hundred pods is over it, as one of
20 000 pods is at the default 1 MiB.
"""

from __future__ import annotations

from cluster_docs import event, fed, objects, preemption

from muster.api.model import Pod
from muster.bus.envelope import encode
from muster.contracts.v1 import events_pb2
from muster.gangpermit.state import GangPermitState
from muster.gangpermit.translate import decide

LIMIT = 8 * 1024
PODS = 300  # ~40 bytes a pod here: 12 KB of pods, over LIMIT


def test_a_victim_over_the_event_limit_is_evicted_in_commands_that_each_fit() -> None:
    docs = preemption(PODS)

    envs = decide(fed(docs, max_event_bytes=LIMIT), now_s=10.0)

    announced, *evicts = envs
    assert announced.type == "workload.placement_preempted"
    assert list(announced.placement_preempted.victims) == ["ns/low"]
    assert announced.placement_preempted.pod_count == PODS
    assert list(announced.placement_preempted.pods) == []  # too many to list
    assert len(evicts) > 1
    assert {e.type for e in evicts} == {"cmd.evict"}
    assert {e.workload for e in evicts} == {"ns/low"}
    assert all(len(encode(e)) <= LIMIT for e in envs)
    names = [p.name for e in evicts for p in e.evict_requested.pods]
    assert sorted(names) == sorted(f"low-{i}" for i in range(PODS))
    assert all(p.uid == f"uid-{p.name}" for e in evicts for p in e.evict_requested.pods)
    assert len({e.event_id for e in evicts}) == len(evicts)
    # Each says which part of the whole command it is, as a permit's parts do.
    assert [e.evict_requested.part for e in evicts] == list(range(len(evicts)))
    assert {(e.evict_requested.parts, e.evict_requested.command_id) for e in evicts} == {
        (len(evicts), evicts[0].evict_requested.command_id)
    }
    assert evicts[0].evict_requested.command_id not in {e.event_id for e in evicts}
    # Repeated after a crash (nothing reached the stream): the same ids, deduplicated.
    again = decide(fed(docs, max_event_bytes=LIMIT), now_s=12.0)
    assert [e.event_id for e in again] == [e.event_id for e in envs]


def test_a_victim_that_fits_is_one_command_listing_its_pods_as_before() -> None:
    docs = preemption(PODS)

    announced, evict = decide(fed(docs), now_s=10.0)  # the default limit, 1 MiB

    assert announced.placement_preempted.pod_count == PODS
    assert len(announced.placement_preempted.pods) == PODS
    assert len(evict.evict_requested.pods) == PODS
    assert (evict.evict_requested.parts, evict.evict_requested.command_id) == (0, "")


def stopped(state: GangPermitState, command: events_pb2.Envelope, sequence: int) -> None:
    """The binder carried out `command` (one part): its pods are gone, then it answered."""
    named = {p.name for p in command.evict_requested.pods}
    for obj in objects(preemption(PODS)):
        if isinstance(obj, Pod) and obj.meta.name in named:
            state.remove(obj)
    completed = event("eviction_completed", events_pb2.EvictionCompleted(), workload="ns/low")
    completed.cause, completed.sequence = command.event_id, sequence
    state.apply_event(completed)


def types(envs: list[events_pb2.Envelope]) -> list[tuple[str, str]]:
    return [(e.type, e.workload) for e in envs]


def test_a_victim_evicted_in_parts_keeps_its_room_until_the_pods_of_every_part_are_gone() -> None:
    state = fed(preemption(PODS), max_event_bytes=LIMIT)
    _, first, *rest = decide(state, now_s=10.0)
    assert rest

    # The first part is carried out and answered; the later parts' pods still run on `a`.
    stopped(state, first, sequence=1)
    assert decide(state, now_s=11.0) == []  # `high` waits on the room still nominated

    for n, command in enumerate(rest, start=2):
        assert decide(state, now_s=11.0 + n) == []
        stopped(state, command, sequence=n)
    assert types(decide(state, now_s=20.0)) == [("workload.gang_permitted", "ns/high/workers")]


def test_a_gang_permit_restarted_between_the_parts_of_an_eviction_tells_the_rest_again() -> None:
    envs = decide(fed(preemption(PODS), max_event_bytes=LIMIT), now_s=10.0)
    announced, first, *_ = envs
    first_pods = {p.name for p in first.evict_requested.pods}

    # It died once the first command was stored and carried out, the later ones never told:
    # its successor reads that answer and a cluster where only the first part's pods are gone.
    left = [d for d in preemption(PODS) if d["metadata"]["name"] not in first_pods]
    completed = event("eviction_completed", events_pb2.EvictionCompleted(), workload="ns/low")
    completed.cause, completed.sequence = first.event_id, 2
    announced.sequence = 1
    successor = fed(left, stream=[announced, completed], max_event_bytes=LIMIT)
    again = decide(successor, now_s=11.0)

    # No permit on room still taken: the victim's other pods are evicted, each named once.
    assert {e.type for e in again} == {"workload.placement_preempted", "cmd.evict"}
    named = [p.name for e in again[1:] for p in e.evict_requested.pods]
    assert sorted(named) == sorted({f"low-{i}" for i in range(PODS)} - first_pods)
    assert again[0].placement_preempted.pod_count == PODS - len(first_pods)
