"""Late decisions about a workload that ended (docs/events.md, "A name used again"): admission
decided them before it read the deletion, and stored them after the name was submitted again.
Neither the eviction's command nor the eviction itself may stop or fence the new workload."""

from __future__ import annotations

import json

from muster.binder.handlers import BinderContext, WorkloadSpecs, follow, on_admitted, on_evict
from muster.binder.pacing import BindPacer
from muster.bus import new_event
from muster.cluster.backend import PodSetStart, WorkloadOrigin
from muster.contracts.v1 import events_pb2 as pb
from muster.preemption.translate import evict_command

MANIFEST = json.dumps(
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1}]},
    }
)


def on(field: str, payload: object, sequence: int, *, submitted_id: str = "") -> pb.Envelope:
    env = new_event(field, payload, cluster="local", workload="ns/w", source="t")  # type: ignore[arg-type]
    env.sequence = sequence
    env.submitted_id = submitted_id
    return env


class _Cluster:
    """The pods started and stopped, by workload."""

    def __init__(self) -> None:
        self.started: list[int] = []  # admissions started
        self.stopped: list[int] = []  # evictions carried out

    async def start_workload(
        self,
        key: str,
        *,
        pod_sets: list[PodSetStart],
        admission: int = 0,
        origin: WorkloadOrigin | None = None,
    ) -> None:
        self.started.append(admission)

    async def stop_workload(
        self, key: str, *, before: int, pod_sets: dict[str, int] | None = None
    ) -> None:
        self.stopped.append(before)


class _Published:
    def __init__(self) -> None:
        self.seen: list[pb.Envelope] = []

    async def publish(self, env: pb.Envelope) -> int:
        self.seen.append(env)
        return len(self.seen)


def binder() -> tuple[BinderContext, _Cluster, _Published]:
    cluster, published = _Cluster(), _Published()
    ctx = BinderContext(
        cluster="local",
        backend=cluster,  # type: ignore[arg-type]
        publisher=published,
        specs=WorkloadSpecs(),
        pacer=BindPacer(max_concurrent=1, per_second=0.0),
    )
    return ctx, cluster, published


def admitted(sequence: int, *, submitted_id: str) -> pb.Envelope:
    assignment = pb.PodSetAssignment(name="main", count=1, flavors={"cpu": "default"})
    admission = pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    payload = pb.WorkloadAdmitted(admission=admission)
    return on("admitted", payload, sequence, submitted_id=submitted_id)


def evicted(sequence: int, *, submitted_id: str) -> pb.Envelope:
    payload = pb.WorkloadEvicted(reason="Preempted", message="by ns/p")
    return on("evicted", payload, sequence, submitted_id=submitted_id)


def a_name_used_again(ctx: BinderContext) -> tuple[pb.Envelope, pb.Envelope]:
    """`ns/w` submitted, deleted and submitted again; the new one admitted and started."""
    first = on("submitted", pb.WorkloadSubmitted(manifest_json=MANIFEST), 1)
    again = on("submitted", pb.WorkloadSubmitted(manifest_json=MANIFEST), 3)
    for env in (first, on("deleted", pb.WorkloadDeleted(), 2), again):
        follow(env, ctx.specs, ctx.fences)
    return first, again


async def test_a_late_eviction_of_a_deleted_workload_stops_nothing_of_the_new_one() -> None:
    ctx, cluster, published = binder()
    first, again = a_name_used_again(ctx)
    new_admission = admitted(4, submitted_id=again.event_id)
    follow(new_admission, ctx.specs, ctx.fences)
    await on_admitted(new_admission, ctx)
    assert cluster.started == [4]

    late = evicted(5, submitted_id=first.event_id)
    follow(late, ctx.specs, ctx.fences)
    command = evict_command(late, attempt=1)
    assert command.submitted_id == first.event_id  # preemption names the submission
    await on_evict(command, ctx)
    assert (cluster.stopped, published.seen) == ([], [])
    # Its admission, redelivered, is still not behind a fence.
    await on_admitted(new_admission, ctx)
    assert cluster.started == [4, 4]

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
