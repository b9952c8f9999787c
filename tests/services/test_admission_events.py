"""Admission's handling of each consumed event type, against a real nats-server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from admission_world import (
    Running,
    basic_config,
    cluster_queue,
    config_applied,
    config_deleted,
    count,
    drained,
    eventually,
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
from muster.bus.kv import Bucket
from muster.contracts.v1 import events_pb2 as pb
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def admission(bus_config: BusConfig) -> AsyncIterator[Running]:
    running = await start_admission(bus_config)
    await running.wait_serving()
    try:
        yield running
    finally:
        await running.stop()


async def test_duplicate_submissions_change_nothing(
    bus: Bus, admission: Running, events: EventLog
) -> None:
    await basic_config(bus, cpu="4")
    original = submitted(workload("a", cpu="1"))
    await publish(bus, original, original)  # the same event id: JetStream keeps one
    again = submitted(workload("a", cpu="1"))  # a new id for the same workload
    assert again.event_id != original.event_id
    await publish(bus, again)
    await events.wait_for("admitted", workload="ns/a")
    await drained(bus, "admission-0")
    assert count(events, "submitted", "ns/a") == 2
    assert count(events, "admitted", "ns/a") == 1


async def test_decisions_carry_cluster_cause_and_a_deterministic_source(
    bus: Bus, admission: Running, events: EventLog
) -> None:
    await basic_config(bus, cpu="4")
    sub = submitted(workload("a"), cluster="east")
    await publish(bus, sub)
    admitted = await events.wait_for("admitted", workload="ns/a")
    assert admitted.cluster == "east"
    assert admitted.cause == sub.event_id
    assert admitted.source == "admission/0"


async def test_admitted_carries_the_flavors_node_labels_and_tolerations(
    bus: Bus, admission: Running, events: EventLog
) -> None:
    gpu = flavor("gpu", **{"cloud.example.com/accelerator": "a100"})
    gpu["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    await publish(
        bus,
        config_applied(gpu),
        config_applied(cluster_queue(flavor_name="gpu")),
        config_applied(local_queue()),
        submitted(workload("train")),
    )
    admitted = await events.wait_for("admitted", workload="ns/train")
    (hints,) = admitted.admitted.hints
    assert hints.name == "main"
    assert dict(hints.node_selector) == {"cloud.example.com/accelerator": "a100"}
    assert [(t.key, t.operator, t.effect) for t in hints.tolerations] == [
        ("nvidia.com/gpu", "Exists", "NoSchedule")
    ]


async def value(kv: Bucket, key: str) -> bytes:
    entry = await kv.get(key)
    assert entry is not None, f"{kv.name}: no {key}"
    return entry.value or b""


async def test_visibility_bucket_and_queue_status_follow_the_queues(
    bus: Bus, admission: Running, events: EventLog
) -> None:
    await basic_config(bus, cpu="4")
    await publish(bus, submitted(workload("a", cpu="3")), submitted(workload("b", cpu="2")))
    await events.wait_for("pending", workload="ns/b")
    kv = await bus.kv("MUSTER_VISIBILITY")

    async def status() -> pb.ClusterQueueStatus | None:
        entry = await kv.get("cq.cq")
        if entry is None:
            return None
        return pb.ClusterQueueStatus.FromString(entry.value or b"")

    async def one_pending() -> bool:
        cq = await status()
        return cq is not None and cq.pending_workloads == 1

    await eventually(one_pending)
    cq = await status()
    assert cq is not None
    assert (cq.admitted_workloads, cq.reserving_workloads) == (1, 1)
    (row,) = cq.flavors[0].resources
    assert (row.name, row.nominal, row.reserved, row.used, row.available) == (
        "cpu",
        "4",
        "3",
        "3",
        "1",
    )
    assert row.borrowing_limit == ""
    index = services_pb2.PendingPageIndex.FromString(await value(kv, "pending-index.cq"))
    assert [(p.count, [q.name for q in p.local_queues]) for p in index.pages] == [(1, ["lq"])]
    page = await value(kv, f"pending-page.{index.epoch}-{index.pages[0].id}.cq")
    pending = services_pb2.PendingWorkloadsResponse.FromString(page)
    assert [(p.namespace, p.name, p.local_queue) for p in pending.items] == [("ns", "b", "lq")]
    lq = pb.LocalQueueStatus.FromString(await value(kv, "lq.ns.lq"))
    assert (lq.cluster_queue, lq.pending_workloads, lq.admitted_workloads) == ("cq", 1, 1)
    change = await events.wait_for("queue_status")
    assert change.queue_status.cluster_queue.name == "cq"


async def test_admission_check_ready_admits_and_rejected_deactivates(
    bus: Bus, admission: Running, events: EventLog
) -> None:
    check = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": "prov"},
        "spec": {"controllerName": "example.com/prov"},
    }
    cq = cluster_queue()
    cq["spec"]["admissionChecks"] = ["prov"]
    await publish(bus, config_applied(flavor()), config_applied(check), config_applied(cq))
    await publish(bus, config_applied(local_queue()))
    await publish(bus, submitted(workload("ok")), submitted(workload("no")))
    reserved = await events.wait_for("quota_reserved", workload="ns/ok")
    assert list(reserved.quota_reserved.admission_checks) == ["prov"]
    await events.wait_for("quota_reserved", workload="ns/no")
    await publish(
        bus,
        fact("admission_check", "ns/ok", pb.AdmissionCheckUpdated(check="prov", state="Ready")),
        fact("admission_check", "ns/no", pb.AdmissionCheckUpdated(check="prov", state="Rejected")),
    )
    await events.wait_for("admitted", workload="ns/ok")
    evicted = await events.wait_for("evicted", workload="ns/no")
    assert evicted.evicted.reason == "InactiveWorkload"
    assert evicted.evicted.message == (
        'The workload is deactivated due to AdmissionCheck in Rejected state: "prov"'
    )
    await drained(bus, "admission-0")
    assert count(events, "evicted", "ns/no") == 1


def ready(key: str, told_by: str) -> pb.Envelope:
    """`key`'s pods all ready: as the watcher tells it today (a `running` with its pods ready)
    or as it did before (a `pods_ready` after the `running`; docs/events.md)."""
    if told_by == "running":
        return fact("running", key, pb.WorkloadRunning(pods_ready=True))
    return fact("pods_ready", key)


READY_TOLD_BY = pytest.mark.parametrize("told_by", ["running", "pods_ready"])


async def wait_for_pods_ready(bus: Bus, settings: dict[str, object]) -> None:
    """Apply Kueue's Configuration with `settings` as its waitForPodsReady."""
    configuration = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "waitForPodsReady": settings,
    }
    applied = pb.ConfigApplied(
        kind="Configuration", name="kueue", manifest_json=json.dumps(configuration)
    )
    await publish(bus, new_event("config_applied", applied, cluster="local", source="test"))


@READY_TOLD_BY
async def test_pods_ready_timeout_fires_from_the_engine_timer(
    bus: Bus, admission: Running, events: EventLog, told_by: str
) -> None:
    await wait_for_pods_ready(bus, {"enable": True, "timeout": "2s"})
    await basic_config(bus, cpu="4")
    await publish(bus, submitted(workload("quick")))
    await events.wait_for("admitted", workload="ns/quick")
    # Applied in stream order: quick's pods are ready before slow is even admitted.
    await publish(bus, ready("ns/quick", told_by), submitted(workload("slow")))
    evicted = await events.wait_for("evicted", workload="ns/slow", timeout_s=5)
    assert evicted.evicted.reason == "PodsReadyTimeout"
    assert evicted.cause.startswith("timer/admission/0/")  # no event caused it
    await drained(bus, "admission-0")
    assert count(events, "evicted", "ns/quick") == 0


@READY_TOLD_BY
async def test_pods_ready_stored_before_wait_for_pods_ready_was_turned_on_count(
    bus: Bus, admission: Running, events: EventLog, told_by: str
) -> None:
    """Off (Kueue's default), the replica reads no pods_ready. A Configuration turning it on
    with blockAdmission makes it rebuild, reading those stored before: quick's pods were ready,
    so it neither blocks slow nor is evicted at the timeout (already past)."""
    await basic_config(bus, cpu="4")
    await publish(bus, submitted(workload("quick")))
    await events.wait_for("admitted", workload="ns/quick")
    await publish(bus, ready("ns/quick", told_by))
    await drained(bus, "admission-0")
    await wait_for_pods_ready(bus, {"enable": True, "timeout": "1ms", "blockAdmission": True})
    await publish(bus, submitted(workload("slow")))
    await events.wait_for("admitted", workload="ns/slow")
    await drained(bus, "admission-0")
    assert count(events, "evicted", "ns/quick") == 0


async def test_readiness_lost_evicts_at_the_recovery_timeout_unless_regained(
    bus: Bus, admission: Running, events: EventLog
) -> None:
    # Without blockAdmission, so that both are admitted whichever is ready first.
    settings = {"enable": True, "timeout": "1h", "recoveryTimeout": "1s", "blockAdmission": False}
    await wait_for_pods_ready(bus, settings)
    await basic_config(bus, cpu="4")
    await publish(bus, submitted(workload("back")), submitted(workload("gone")))
    await events.wait_for("admitted", workload="ns/back")
    await events.wait_for("admitted", workload="ns/gone")
    lost = pb.PodsReady(lost=True)
    await publish(bus, ready("ns/back", "running"), ready("ns/gone", "running"))
    # back regains readiness within the recovery timeout; gone does not. back's loss is
    # published first, so its timer would have fired before gone's.
    await publish(bus, fact("pods_ready", "ns/back", lost), fact("pods_ready", "ns/back"))
    await publish(bus, fact("pods_ready", "ns/gone", lost))
    evicted = await events.wait_for("evicted", workload="ns/gone", timeout_s=5)
    assert (evicted.evicted.reason, evicted.evicted.message) == (
        "PodsReadyTimeout",
        "Exceeded the PodsReady timeout ns/gone",
    )
    assert evicted.cause.startswith("timer/admission/0/")
    await drained(bus, "admission-0")
    assert count(events, "evicted", "ns/back") == 0


async def test_gang_rejected_evicts_and_eviction_completed_requeues(
    bus: Bus, admission: Running, events: EventLog
) -> None:
    await basic_config(bus, cpu="4")
    await publish(bus, submitted(workload("gang", cpu="4")))
    await events.wait_for("admitted", workload="ns/gang")
    rejected = pb.GangRejected(reason="GangTimedOut", message="3 of 4 pods placed")
    await publish(bus, fact("gang_rejected", "ns/gang", rejected))
    evicted = await events.wait_for("evicted", workload="ns/gang")
    assert evicted.evicted.reason == "GangRejected"
    assert evicted.evicted.message == "GangTimedOut: 3 of 4 pods placed"
    await drained(bus, "admission-0")
    assert count(events, "admitted", "ns/gang") == 1  # holds its quota until stopped
    await publish(bus, fact("eviction_completed", "ns/gang"))
    await events.wait_for("requeued", workload="ns/gang")

    async def admitted_again() -> bool:  # requeued at its creation time: admitted again
        return count(events, "admitted", "ns/gang") == 2

    await eventually(admitted_again)


async def test_deleting_a_local_queue_makes_new_workloads_inadmissible(
    bus: Bus, admission: Running, events: EventLog
) -> None:
    await basic_config(bus, cpu="4")
    await publish(bus, config_deleted("LocalQueue", "ns/lq"), submitted(workload("late")))
    pending = await events.wait_for("pending", workload="ns/late")
    assert pending.pending.message == "LocalQueue lq doesn't exist"
