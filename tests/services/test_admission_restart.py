"""A killed admission replica's successor rebuilds from the stream: nothing lost, none twice."""

from __future__ import annotations

import pytest
from admission_world import (
    basic_config,
    cluster_queue,
    config_applied,
    count,
    drained,
    fact,
    flavor,
    local_queue,
    publish,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.bus import Bus, BusConfig, new_event
from muster.contracts.v1 import events_pb2 as pb
from muster.core.routing import Policy

pytestmark = pytest.mark.timeout(60)


async def test_restart_keeps_admissions_and_admits_pending_ones_later(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    first = await start_admission(bus_config)
    await first.wait_serving()
    await basic_config(bus, cpu="4")
    names = [f"w{i}" for i in range(1, 7)]
    await publish(bus, *(submitted(workload(n, cpu="1")) for n in names))
    for n in names[:4]:
        await events.wait_for("admitted", workload=f"ns/{n}")
    for n in names[4:]:
        await events.wait_for("pending", workload=f"ns/{n}")
    await first.kill()

    # While no replica runs: one finishes, one more arrives.
    await publish(bus, fact("finished", "ns/w1"), submitted(workload("w7", cpu="1")))
    second = await start_admission(bus_config)
    try:
        await second.wait_serving()
        await events.wait_for("admitted", workload="ns/w5")
        await publish(bus, fact("finished", "ns/w2"), fact("finished", "ns/w3"))
        await events.wait_for("admitted", workload="ns/w6")
        await events.wait_for("admitted", workload="ns/w7")
        await drained(bus, "admission-0")
        for n in [*names, "w7"]:
            assert count(events, "admitted", f"ns/{n}") == 1, n
    finally:
        await second.stop()


async def test_kill_during_a_burst_loses_nothing_and_admits_nothing_twice(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    first = await start_admission(bus_config)
    await first.wait_serving()
    await basic_config(bus, cpu="10")
    names = [f"b{i:02d}" for i in range(30)]
    await publish(bus, *(submitted(workload(n, cpu="1")) for n in names))
    await events.wait_for("admitted")
    await first.kill()  # somewhere in the middle of the burst

    second = await start_admission(bus_config)
    try:
        await second.wait_serving()
        finished: set[str] = set()
        while len(finished) < len(names):
            await drained(bus, "admission-0")
            admitted = {e.workload for e in events.matching("admitted")}
            wave = sorted(admitted - finished)
            assert wave, f"nothing admitted beyond {sorted(finished)}"
            await publish(bus, *(fact("finished", key) for key in wave))
            finished |= set(wave)
        await drained(bus, "admission-0")
        for n in names:
            assert count(events, "admitted", f"ns/{n}") == 1, n
    finally:
        await second.stop()


async def test_a_restarted_replica_keeps_a_route_and_announces_nothing_twice(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    # --routing-policy fastest: the ClusterQueues name no policy of their own.
    first = await start_admission(bus_config, routing_policy=Policy.FASTEST)
    await first.wait_serving()
    await publish(
        bus,
        config_applied(flavor()),
        config_applied(cluster_queue("gpu", cpu="40", gpu="1")),
        config_applied(cluster_queue("cpu", cpu="4")),
        config_applied(local_queue("gpu", cq="gpu")),
        config_applied(local_queue("cpu", cq="cpu")),
        *(submitted(workload(f"g{i}", gpu=1, queue="gpu", annotations=runs(30))) for i in range(4)),
        submitted(workload("native", cpu="4", queue="cpu", annotations=runs(10))),
    )
    await events.wait_for("admitted", workload="ns/native")
    light = {**runs(26), "muster.dev/alternatives": TO_CPU}
    await publish(bus, submitted(workload("light", cpu="4", gpu=1, queue="gpu", annotations=light)))
    routed = await events.wait_for("routed", workload="ns/light")
    assert (routed.routed.to_cluster_queue, routed.routed.queue_name) == ("cpu", "cpu")
    await events.wait_for("pending", workload="ns/light")  # behind native, on the CPU
    await first.kill()

    second = await start_admission(bus_config, routing_policy=Policy.FASTEST)
    try:
        await second.wait_serving()
        await publish(bus, fact("finished", "ns/native"))
        admitted = await events.wait_for("admitted", workload="ns/light")
        assert admitted.admitted.admission.cluster_queue == "cpu"
        assert dict(admitted.admitted.admission.pod_set_assignments[0].resource_usage) == {
            "cpu": "4"
        }
        await drained(bus, "admission-0")
        for kind in ("routed", "pending", "admitted"):
            assert count(events, kind, "ns/light") == 1, kind
        for key in ("ns/native", *(f"ns/g{i}" for i in range(4))):
            assert count(events, "routed", key) == 0, key
            assert count(events, "admitted", key) <= 1, key
    finally:
        await second.stop()


TO_CPU = "- queueName: cpu\n  requests: {nvidia.com/gpu: 0}\n  runSeconds: 20\n"


def runs(seconds: float) -> dict[str, str]:
    return {"muster.dev/run-seconds": f"{seconds:g}"}


async def test_a_replica_killed_between_reserving_and_admitting_is_followed_by_an_admission(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    await basic_config(bus, cpu="4")
    await publish(bus, submitted(workload("a", cpu="3")))
    # What a replica killed between its two waves leaves: the reservation, not the admission.
    assignment = pb.PodSetAssignment(
        name="main", count=1, flavors={"cpu": "default"}, resource_usage={"cpu": "3"}
    )
    admission = pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    reserved = pb.QuotaReserved(admission=admission)
    source = "admission/0"
    env = new_event("quota_reserved", reserved, cluster="local", workload="ns/a", source=source)
    await bus.publish(env)

    second = await start_admission(bus_config)
    try:
        await second.wait_serving()
        admitted = await events.wait_for("admitted", workload="ns/a")
        assert admitted.admitted.admission.cluster_queue == "cq"
        assert not admitted.admitted.with_reservation  # the reservation was told already
        await publish(bus, submitted(workload("b", cpu="2")))
        await events.wait_for("pending", workload="ns/b")  # ns/a holds 3 of 4, once
        assert count(events, "quota_reserved", "ns/a") == 1
    finally:
        await second.stop()
