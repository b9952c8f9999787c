"""A gang outside Kueue evicted in parts (its pods over the bus's event limit) to make room for a
preemptor that needs every node it holds (on a real nats-server, the pod-path services
in-process): the preemptor is bound only onto room the victim's pods have left, whichever part
is answered first and whether the binder or gang-permit restarts between parts.

The binder reaches the cluster through `Kubelets`, which checks each bind of the preemptor as a
kubelet admits a pod (OutOfcpu: the pods already on the node must leave room for it), and holds
the deletes of every `cmd.evict` but the first until the test releases them, so that the first
part is answered while the pods of the others still run. The limit is lowered so that a few
hundred pods need several commands, as tens of thousands do at the default 1 MiB.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from bus_helpers import EventLog
from placement_stack import (
    CLUSTER,
    Stack,
    gang_yaml,
    limited_bus_config,
    node,
    placement_stack,
    submit_and_admit,
)

from muster.bus import Bus, BusConfig
from muster.bus.envelope import decode
from muster.bus.subjects import command_subject
from muster.cluster.errors import ClusterError
from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import events_pb2

pytestmark = pytest.mark.timeout(90)

LIMIT = 16 * 1024
NODES = 4
PODS = 400  # ~45 bytes a pod: 18 KB of pods, over LIMIT; 100 a node
TIMEOUT_S = 600.0
VICTIM, PREEMPTOR = "ns/low", "ns/high/workers"


@pytest.fixture
def bus_config(nats_server: str) -> BusConfig:
    return limited_bus_config(nats_server, LIMIT)


class Kubelets(SimBackend):
    """The sim cluster as the binder reaches it: once `watching` is set, a bind onto a node
    whose pods leave no room for the pod is noted in `overcommitted` (then carried out, so
    that the test goes on to show what followed), and deletes of the pods named by any
    `cmd.evict` after the first wait for `release` (or fail as the cluster going away would,
    once `cut` is set: the binder is being killed)."""

    def __init__(self, backend: SimBackend) -> None:
        super().__init__(backend.store)
        self.commands: list[events_pb2.Envelope] = []  # every `cmd.evict`, as published
        self.told = asyncio.Condition()
        self.release = asyncio.Event()
        self.cut = asyncio.Event()
        self.overcommitted: list[str] = []
        self.watching = False  # the victim's own binds are not looked at (a list each)

    async def command(self, msg: object) -> None:
        async with self.told:
            self.commands.append(decode(msg.data))  # type: ignore[attr-defined]
            self.told.notify_all()

    async def bind(self, namespace: str, pod: str, node: str, *, uid: str = "") -> None:
        if self.watching:
            await self._admit(namespace, pod, node)
        await super().bind(namespace, pod, node, uid=uid)

    async def _admit(self, namespace: str, pod: str, node: str) -> None:
        pods = await self.list_pods()
        (mine,) = [p for p in pods if (p.namespace, p.name) == (namespace, pod)]
        (room,) = [n.allocatable["cpu"] for n in await self.list_nodes() if n.name == node]
        used = sum(p.requests.get("cpu", 0) for p in pods if p.node_name == node)
        if used + mine.requests.get("cpu", 0) > room:
            self.overcommitted.append(f"{namespace}/{pod} onto {node}: {used} of {room} used")

    async def delete(self, kind: str, name: str, *, namespace: str = "", uid: str = "") -> bool:
        async with self.told:
            await self.told.wait_for(lambda: self._part_of(name) is not None)
        if self._part_of(name):
            await first_of(self.release, self.cut)
            if not self.release.is_set():
                raise ClusterError(
                    f"Pod/{namespace}/{name}", "Unavailable", "connection lost", temporary=True
                )
        return await super().delete(kind, name, namespace=namespace, uid=uid)

    def _part_of(self, name: str) -> int | None:
        """The index of the first command naming pod `name` (None: none told yet)."""
        for n, command in enumerate(self.commands):
            if any(p.name == name for p in command.evict_requested.pods):
                return n
        return None


async def first_of(*happened: asyncio.Event) -> None:
    waits = [asyncio.create_task(e.wait()) for e in happened]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


@contextlib.asynccontextmanager
async def evicting(bus: Bus, events: EventLog) -> AsyncIterator[tuple[Stack, Kubelets]]:
    """The stack on NODES nodes n0.. of PODS // NODES CPUs, whose binder goes through
    `Kubelets`; gang `low` bound on all of them; then gang `high` (one pod a node, a whole
    node each, priority 100) applied, so that `low` is preempted."""
    kubelets: list[Kubelets] = []

    def through_kubelets(backend: SimBackend) -> Kubelets:
        kubelets.append(Kubelets(backend))
        return kubelets[0]

    # A gang's deadline far away: under a loaded CI machine, restarts take seconds.
    patient = {"gang_timeout_s": TIMEOUT_S}
    stack = placement_stack(
        bus, events, kubelet=False, binder_backend=through_kubelets, gangpermit=patient
    )
    async with stack as s:
        sub = await bus.nc.subscribe(command_subject(CLUSTER, "evict"), cb=kubelets[0].command)
        try:
            for i in range(NODES):
                await s.backend.apply(node(f"n{i}", cpu=str(PODS // NODES)))
            await s.apply_all(gang_yaml("low", pods=PODS))
            await s.wait_for_pods(
                "ns/low/workers",
                lambda pods: sum(bool(p.node_name) for p in pods) == PODS,
                timeout_s=45,
            )
            kubelets[0].watching = True
            high = gang_yaml("high", pods=NODES, cpu=str(PODS // NODES))
            await s.apply_all(high.replace("  workloadRef:", "  priority: 100\n  workloadRef:"))
            yield s, kubelets[0]
        finally:
            await sub.unsubscribe()


async def first_part_answered(stack: Stack, kubelets: Kubelets) -> None:
    """Wait until a part of the victim's eviction is answered while others' pods still run,
    then until gang-permit has read past that answer and decided a pass after it."""
    done = await stack.events.wait_for("eviction_completed", workload=VICTIM, timeout_s=45)
    assert len(kubelets.commands) > 1
    assert done.cause == kubelets.commands[0].event_id
    assert len(await stack.pods_of("ns/low/workers")) > 0  # the later parts' pods still run
    await a_pass_decided_since(stack, "probe")


async def a_pass_decided_since(stack: Stack, name: str) -> None:
    """Wait until gang-permit has read the stream up to now and decided a pass after it: a
    Kueue workload admitted now (a pod of one CPU, on a node of its own) is permitted."""
    await stack.backend.apply(node(name, cpu="1"))
    key = await submit_and_admit(stack, name, count=1, cpu="1", run_seconds=None)
    await stack.events.wait_for("gang_permitted", workload=key, timeout_s=20)


async def preemptor_bound_where_room_was_left(stack: Stack, kubelets: Kubelets) -> None:
    """No permit for the preemptor before its room is free; once the held deletes go on, it
    is bound on every node, and no bind ever went onto a node without room for it."""
    assert stack.events.matching("gang_permitted", workload=PREEMPTOR) == []
    kubelets.release.set()
    bound = await stack.events.wait_for("bound", workload=PREEMPTOR, timeout_s=45)
    assert sorted(b.node for b in bound.bound.bindings) == [f"n{i}" for i in range(NODES)]
    assert await stack.pods_of("ns/low/workers") == []
    assert kubelets.overcommitted == []
    # Every command answered; each answer names its own command, the part it was and how
    # many pods it named (so that no reader takes it for the end of a Kueue admission).
    await stack.events.wait_until(
        lambda seen: (
            {e.cause for e in seen if e.type == "workload.eviction_completed"}
            >= {c.event_id for c in kubelets.commands}
        ),
        timeout_s=20,
    )
    told = {c.event_id: c.evict_requested for c in kubelets.commands}
    for answer in stack.events.matching("eviction_completed", workload=VICTIM):
        done, command = answer.eviction_completed, told[answer.cause]
        assert (done.part, done.parts, done.command_id, done.pods) == (
            command.part,
            command.parts,
            command.command_id,
            len(command.pods),
        )
    answered: dict[str, set[int]] = {}
    for answer in stack.events.matching("eviction_completed", workload=VICTIM):
        answered.setdefault(answer.eviction_completed.command_id, set()).add(
            answer.eviction_completed.part
        )
    assert {whole: sorted(parts) for whole, parts in answered.items()} == {
        c.command_id: list(range(c.parts)) for c in told.values()
    }


async def restart(stack: Stack, kubelets: Kubelets, service: str) -> None:
    """Kill `service` between the parts of the eviction and start it again."""
    if service == "binder":
        kubelets.cut.set()  # a later part's deletes were waiting: not acknowledged
        await stack.stop("binder")
        await stack.start_binder(kubelets)
    elif service == "gangpermit":
        await stack.stop("gangpermit")
        await stack.start_gangpermit(gang_timeout_s=TIMEOUT_S)
        await a_pass_decided_since(stack, "probe-after")


@pytest.mark.parametrize(
    "restarted",
    [
        pytest.param("", id="running"),
        pytest.param("binder", id="binder-restarted-between-parts"),
        pytest.param("gangpermit", id="gangpermit-restarted-between-parts"),
    ],
)
async def test_a_preemptor_is_bound_only_on_room_left_by_the_pods_of_every_part_of_its_victim(
    bus: Bus, events: EventLog, restarted: str
) -> None:
    async with evicting(bus, events) as (stack, kubelets):
        await first_part_answered(stack, kubelets)
        await restart(stack, kubelets, restarted)

        await preemptor_bound_where_room_was_left(stack, kubelets)
