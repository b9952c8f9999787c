"""Workload API gangs through the services: Submit → cluster → gangpermit → binder → kubelet.

Each test runs the gateway, watcher, gangpermit, binder and sim kubelet in-process against a
real nats-server, submits Kubernetes v1.35 Workload YAML as a user would, and reads the outcome
from the events on the bus and the pods in the cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
from bus_helpers import EventLog
from placement_stack import SPEED, Stack, gang_yaml, node, placement_stack, types_of

from muster.bus import Bus
from muster.cluster.errors import ClusterError
from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(60)

GANG = "ns/train/workers"  # the gang key of Workload ns/train, pod group workers


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events, gateway=True) as s:
        yield s


async def test_gang_of_four_with_room_for_three_binds_nothing_until_a_fourth_node_appears(
    stack: Stack,
) -> None:
    await stack.backend.apply(node("a", cpu="2"))
    await stack.backend.apply(node("b", cpu="1"))
    reply = await stack.submit(gang_yaml("train", pods=4, run_seconds="2"))
    assert [(o.kind, o.key) for o in reply.objects] == [
        ("Workload.scheduling.k8s.io", "ns/train"),
        *(("Pod", f"ns/train-{i}") for i in range(4)),
    ]

    waiting = await stack.events.wait_for("gang_waiting", workload=GANG, timeout_s=10)
    while waiting.gang_waiting.pending < 4:  # the binder applies the pods one by one
        waiting = await stack.events.wait_for_next("gang_waiting", after=waiting, timeout_s=10)
    assert waiting.gang_waiting.min_count == 4
    assert waiting.gang_waiting.reason.startswith("3 of 4 pods fit")
    assert stack.events.matching("gang_permitted", workload=GANG) == []
    assert all(not p.node_name for p in await stack.pods_of(GANG))

    await stack.backend.apply(node("c", cpu="1"))
    permitted = await stack.events.wait_for("gang_permitted", workload=GANG, timeout_s=10)
    assert sorted((b.pod.name, b.node) for b in permitted.gang_permitted.bindings) == [
        ("train-0", "a"),
        ("train-1", "a"),
        ("train-2", "b"),
        ("train-3", "c"),
    ]
    bound = await stack.events.wait_for("bound", workload=GANG)
    assert bound.cause == permitted.event_id
    assert len(bound.bound.bindings) == 4
    finished = await stack.events.wait_for("finished", workload=GANG, timeout_s=10)
    assert finished.finished.message == "4 of 4 pods succeeded"
    life = [t for t in types_of(stack.events, GANG) if t != "workload.pods_pending"]
    # Its pods are applied, not started by the binder for a Kueue admission: told pending.
    assert "workload.pods_pending" in types_of(stack.events, GANG)
    assert life[-4:] == [
        "workload.gang_permitted",
        "workload.bound",
        "workload.running",  # and ready: no pods_ready
        "workload.finished",
    ]
    assert set(life[:-4]) == {"workload.gang_waiting"}
    # What `muster events --workload ns/train/workers` shows: the gang's own events.
    assert stack.gateway is not None
    watch = stack.gateway.events.Watch(
        services_pb2.WatchRequest(from_sequence=1, workload=GANG, history_only=True)
    )
    watched = [env.type async for env in watch]
    assert [t for t in watched if t != "workload.pods_pending"] == life


async def test_deadline_rejects_every_pod_of_the_gang_at_once(bus: Bus, events: EventLog) -> None:
    async with placement_stack(bus, events, gateway=True, gangpermit={"gang_timeout_s": 0.5}) as s:
        await s.backend.apply(node("a", cpu="2"))
        await s.submit(gang_yaml("train", pods=3))

        rejected = await events.wait_for("gang_rejected", workload=GANG, timeout_s=10)
        assert rejected.gang_rejected.reason == "GangTimedOut"
        assert "2 of 3 pods fit" in rejected.gang_rejected.message
        assert sorted(p.name for p in rejected.gang_rejected.pods) == [
            f"train-{i}" for i in range(3)
        ]
        assert all(p.uid for p in rejected.gang_rejected.pods)
        # Rejected together, once, with nothing held: a pod that fits alone still fits.
        await s.submit(gang_yaml("solo", pods=1, cpu="2"))
        await events.wait_for("bound", workload="ns/solo/workers", timeout_s=10)
        assert len(events.matching("gang_rejected", workload=GANG)) == 1
        assert events.matching("gang_permitted", workload=GANG) == []


class RefusingBackend:
    """The sim cluster, whose API server refuses the first `refusals` binds (as an admission
    webhook would), then binds as usual."""

    def __init__(self, backend: SimBackend, *, refusals: int) -> None:
        self._backend = backend
        self.refusals = refusals

    def creates_on_nodes(self, owner_kind: str) -> bool:
        return self._backend.creates_on_nodes(owner_kind)

    async def bind(self, namespace: str, pod: str, node: str, *, uid: str = "") -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise ClusterError(f"Pod/{namespace}/{pod}", "Forbidden", "refused by a webhook")
        await self._backend.bind(namespace, pod, node, uid=uid)

    async def start_workload(
        self,
        workload_key: str,
        *,
        pod_sets: Sequence[Any],
        admission: int = 0,
        origin: Any = None,
        nodes: Mapping[str, str] | None = None,
        checked: bool = False,
    ) -> None:
        await self._backend.start_workload(
            workload_key,
            pod_sets=pod_sets,
            admission=admission,
            origin=origin,
            nodes=nodes,
            checked=checked,
        )

    async def stop_workload(
        self, workload_key: str, *, before: int = 0, pod_sets: Mapping[str, int] | None = None
    ) -> None:
        await self._backend.stop_workload(workload_key, before=before, pod_sets=pod_sets)

    async def apply(self, manifest: Mapping[str, Any], *, as_user: Any = None) -> None:
        await self._backend.apply(manifest, as_user=as_user)

    async def create(self, manifest: Mapping[str, Any], *, as_user: Any = None) -> bool:
        return await self._backend.create(manifest, as_user=as_user)

    async def delete(self, kind: str, name: str, *, namespace: str = "", uid: str = "") -> bool:
        return await self._backend.delete(kind, name, namespace=namespace, uid=uid)


async def test_bind_failure_retries_the_gang_as_a_whole(bus: Bus, events: EventLog) -> None:
    def refusing(backend: SimBackend) -> Any:
        return RefusingBackend(backend, refusals=4)

    stack = placement_stack(
        bus, events, gateway=True, binder_backend=refusing, placed_first=False
    )  # pods bound, so that a bind can be refused (created on nodes: test_pods_created_bound)
    async with stack as s:
        await s.backend.apply(node("a", cpu="4"))
        await s.submit(gang_yaml("train", pods=4, run_seconds="60"))

        first = await events.wait_for("gang_permitted", workload=GANG, timeout_s=10)
        rejected = await events.wait_for("gang_rejected", workload=GANG, timeout_s=10)
        assert (rejected.gang_rejected.reason, rejected.cause) == ("BindFailed", first.event_id)
        assert "refused by a webhook (and 3 more)" in rejected.gang_rejected.message
        second = await events.wait_for_next("gang_permitted", after=first, timeout_s=10)
        assert second.event_id != first.event_id
        assert len(second.gang_permitted.bindings) == 4
        bound = await events.wait_for("bound", workload=GANG, timeout_s=10)
        assert bound.cause == second.event_id
        await s.wait_for_pods(GANG, lambda pods: len(pods) == 4 and all(p.node_name for p in pods))


async def test_restarted_gangpermit_permits_nothing_twice(stack: Stack) -> None:
    await stack.backend.apply(node("a", cpu="4"))
    await stack.stop("binder")  # permits stay unanswered while gangpermit restarts
    await stack.apply_all(gang_yaml("first", pods=4, run_seconds="1"))
    permit = await stack.events.wait_for("gang_permitted", workload="ns/first/workers")

    await stack.stop("gangpermit")
    await stack.start_gangpermit()
    # The restarted gangpermit holds the unanswered permit's room: the second gang waits.
    await stack.apply_all(gang_yaml("second", pods=2, run_seconds="1"))
    second = "ns/second/workers"
    waiting = await stack.events.wait_for("gang_waiting", workload=second, timeout_s=10)
    while waiting.gang_waiting.pending < 2:
        waiting = await stack.events.wait_for_next("gang_waiting", after=waiting, timeout_s=10)
    assert "Insufficient cpu" in waiting.gang_waiting.reason

    await stack.stop("gangpermit")  # and again, while the second gang waits
    await stack.start_gangpermit()
    await stack.start_binder()
    bound = await stack.events.wait_for("bound", workload="ns/first/workers", timeout_s=10)
    assert bound.cause == permit.event_id
    # Once the first gang's pods are done (1 s at 20x), the second one goes.
    await stack.events.wait_for("bound", workload=second, timeout_s=10 + 1 / SPEED)
    assert len(stack.events.matching("gang_permitted", workload="ns/first/workers")) == 1
    assert len(stack.events.matching("gang_permitted", workload=second)) == 1
    reasons = [
        e.gang_waiting.reason for e in stack.events.matching("gang_waiting", workload=second)
    ]
    assert len(reasons) == len(set(reasons))  # no waiting reason published twice in a row


async def test_pods_are_placed_alone_and_other_schedulers_pods_are_left_alone(
    stack: Stack,
) -> None:
    await stack.backend.apply(node("a", cpu="2"))
    lone = """apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ns}}
spec:
  schedulerName: {scheduler}
  containers: [{{name: main, resources: {{requests: {{cpu: "1"}}}}}}]
"""
    await stack.submit(lone.format(name="theirs", scheduler="default-scheduler"))
    await stack.submit(lone.format(name="ours", scheduler="muster"))
    permitted = await stack.events.wait_for("gang_permitted", workload="ns/ours", timeout_s=10)
    assert [(b.pod.name, b.node) for b in permitted.gang_permitted.bindings] == [("ours", "a")]
    await stack.events.wait_for("bound", workload="ns/ours")
    assert stack.events.matching("gang_permitted", workload="ns/theirs") == []
    assert stack.events.matching("gang_waiting", workload="ns/theirs") == []


async def test_higher_priority_gang_evicts_a_whole_lower_priority_gang_to_fit(
    stack: Stack,
) -> None:
    await stack.backend.apply(node("a", cpu="2"))
    await stack.submit(gang_yaml("low", pods=2))  # runs until evicted
    await stack.events.wait_for("bound", workload="ns/low/workers", timeout_s=10)

    high = gang_yaml("high", pods=2).replace("  workloadRef:", "  priority: 100\n  workloadRef:")
    await stack.submit(high)
    preempted = await stack.events.wait_for(
        "placement_preempted", workload="ns/high/workers", timeout_s=10
    )
    assert list(preempted.placement_preempted.victims) == ["ns/low"]
    assert sorted(p.name for p in preempted.placement_preempted.pods) == ["low-0", "low-1"]
    completed = await stack.events.wait_for("eviction_completed", workload="ns/low", timeout_s=10)
    assert completed.cause != ""
    bound = await stack.events.wait_for("bound", workload="ns/high/workers", timeout_s=10)
    assert sorted(b.node for b in bound.bound.bindings) == ["a", "a"]
    assert await stack.pods_of("ns/low/workers") == []


async def test_resubmitting_a_bound_pod_leaves_it_as_it_is(stack: Stack) -> None:
    await stack.backend.apply(node("a", cpu="2"))
    await stack.submit(gang_yaml("train", pods=1))
    await stack.events.wait_for("bound", workload=GANG, timeout_s=10)
    flavored = gang_yaml("train", pods=1).replace("schedulerName: muster", "schedulerName: other")

    reply = await stack.submit(flavored)  # changed: a new command; the binder keeps the pod

    assert [o.kind for o in reply.objects] == ["Workload.scheduling.k8s.io", "Pod"]
    await stack.submit(gang_yaml("marker", pods=1))  # applied after it, in order
    await stack.events.wait_for("bound", workload="ns/marker/workers", timeout_s=10)
    (pod,) = await stack.pods_of(GANG)
    assert (pod.scheduler_name, pod.node_name) == ("muster", "a")
