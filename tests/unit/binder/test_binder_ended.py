"""Late decisions about a workload that ended (docs/events.md, "A name used again"): admission
decided them before it read the deletion, and stored them after the name was submitted again.
Neither the eviction's command nor the eviction itself may stop or fence the new workload."""

from __future__ import annotations

import json

from test_binder_specs import MANIFEST, _Backend, _context, _Published, on

from muster.binder.handlers import BinderContext, WorkloadSpecs, follow, on_admitted, on_evict
from muster.contracts.v1 import events_pb2 as pb
from muster.preemption.translate import evict_command


def event(field: str, payload: object, sequence: int, *, submitted_id: str = "") -> pb.Envelope:
    env = on("local", field, payload, sequence)
    env.submitted_id = submitted_id
    return env


def binder() -> tuple[BinderContext, _Backend, _Published]:
    cluster, published = _Backend(), _Published()
    ctx = _context(cluster)
    ctx.publisher = published
    return ctx, cluster, published


def admitted(sequence: int, *, submitted_id: str) -> pb.Envelope:
    assignment = pb.PodSetAssignment(name="main", count=1, flavors={"cpu": "default"})
    admission = pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    payload = pb.WorkloadAdmitted(admission=admission)
    return event("admitted", payload, sequence, submitted_id=submitted_id)


def evicted(sequence: int, *, submitted_id: str) -> pb.Envelope:
    payload = pb.WorkloadEvicted(reason="Preempted", message="by ns/p")
    return event("evicted", payload, sequence, submitted_id=submitted_id)


def a_name_used_again(ctx: BinderContext) -> tuple[pb.Envelope, pb.Envelope]:
    """`ns/w` submitted, deleted and submitted again; the new one admitted and started."""
    manifest = json.dumps(MANIFEST)
    first = event("submitted", pb.WorkloadSubmitted(manifest_json=manifest), 1)
    again = event("submitted", pb.WorkloadSubmitted(manifest_json=manifest), 3)
    for env in (first, event("deleted", pb.WorkloadDeleted(), 2), again):
        follow(env, ctx.specs, ctx.fences)
    return first, again


async def test_a_late_eviction_of_a_deleted_workload_stops_nothing_of_the_new_one() -> None:
    ctx, cluster, published = binder()
    first, again = a_name_used_again(ctx)
    new_admission = admitted(4, submitted_id=again.event_id)
    follow(new_admission, ctx.specs, ctx.fences)
    await on_admitted(new_admission, ctx)
    assert cluster.admissions == [4]

    late = evicted(5, submitted_id=first.event_id)
    follow(late, ctx.specs, ctx.fences)
    command = evict_command(late, attempt=1)
    assert command.submitted_id == first.event_id  # preemption names the submission
    await on_evict(command, ctx)
    assert cluster.stopped == []
    # The answer settles the eviction for the preemption service, naming it and what it was
    # about; it is no `eviction_completed`, which would read as the new workload's.
    (answer,) = published.seen
    assert answer.type == "workload.eviction_dropped"
    assert answer.eviction_dropped.eviction_id == late.event_id
    assert answer.eviction_dropped.eviction_sequence == 5
    assert answer.submitted_id == first.event_id
    published.seen.clear()
    # Its admission, redelivered, is still not behind a fence.
    await on_admitted(new_admission, ctx)
    assert cluster.admissions == [4, 4]

    # The new workload's own eviction is carried out.
    own = evicted(6, submitted_id=again.event_id)
    follow(own, ctx.specs, ctx.fences)
    await on_evict(evict_command(own, attempt=1), ctx)
    assert cluster.stopped == [6]
    assert [e.type for e in published.seen] == ["workload.eviction_completed"]


async def test_an_eviction_written_before_submitted_ids_is_carried_out_as_before() -> None:
    ctx, cluster, _ = binder()
    a_name_used_again(ctx)
    older = evicted(5, submitted_id="")
    follow(older, ctx.specs, ctx.fences)
    await on_evict(evict_command(older, attempt=1), ctx)
    assert cluster.stopped == [5]


async def test_a_late_eviction_of_a_workload_ended_without_a_successor_is_carried_out() -> None:
    """A MultiKueue copy that finished elsewhere while this cluster was away: its pods here go."""
    ctx, cluster, published = binder()
    manifest = json.dumps(MANIFEST)
    submitted = event("submitted", pb.WorkloadSubmitted(manifest_json=manifest), 1)
    for env in (submitted, event("finished", pb.WorkloadFinished(), 3)):
        follow(env, ctx.specs, ctx.fences)
    late = evicted(2, submitted_id=submitted.event_id)
    await on_evict(evict_command(late, attempt=1), ctx)
    assert cluster.stopped == [2]
    assert [e.type for e in published.seen] == ["workload.eviction_completed"]


KEPT_S = 60.0


def at(env: pb.Envelope, seconds: float, *, workload: str = "ns/w") -> pb.Envelope:
    env.time_unix_nano, env.workload = int(seconds * 1e9), workload
    return env


async def test_a_late_admission_is_refused_for_the_kept_time_then_its_end_is_forgotten() -> None:
    """`--ended-kept-seconds`: the binder remembers an end for that long in the stream's time,
    however many workloads end meanwhile (before: the newest 200 000, for good)."""
    ctx, cluster, _ = binder()
    ctx.specs = WorkloadSpecs(ended_kept_s=KEPT_S)
    manifest = pb.WorkloadSubmitted(manifest_json=json.dumps(MANIFEST))
    first = at(event("submitted", manifest, 1), 0.0)
    follow(first, ctx.specs, ctx.fences)
    follow(at(event("deleted", pb.WorkloadDeleted(), 2), 10.0), ctx.specs, ctx.fences)
    sequence = 3
    for i in range(100):  # others come and go within the minute after it
        other = f"ns/other-{i}"
        for field, payload in (("submitted", manifest), ("deleted", pb.WorkloadDeleted())):
            env = at(event(field, payload, sequence), 10.0 + i * 0.5, workload=other)
            follow(env, ctx.specs, ctx.fences)
            sequence += 1

    # Decided before the deletion was read, delivered again just within the time.
    late = at(admitted(sequence, submitted_id=first.event_id), 10.0 + KEPT_S)
    await on_admitted(late, ctx)
    assert cluster.admissions == []

    after = at(event("deleted", pb.WorkloadDeleted(), sequence + 1), 11.0 + KEPT_S, workload="x/y")
    follow(after, ctx.specs, ctx.fences)
    assert not ctx.specs.ended(first.event_id)  # forgotten: memory is bounded by time
