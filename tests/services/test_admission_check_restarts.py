"""A check's Retry or Rejected that no replica answered before it died is answered by its
successor: stored after the last decision about the workload, the check's event is read by the
rebuild as history (the successor's consumer starts after it), so the successor acts on the
check states its rebuild found, as Kueue's workload controller acts on what the Workload's
status holds whenever it reconciles."""

from __future__ import annotations

import pytest
from admission_world import (
    Running,
    admission_check,
    cluster_queue,
    config_applied,
    count,
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

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(60)


async def checked_queue(bus: Bus, *arrivals: pb.Envelope) -> None:
    """ClusterQueue cq (requiring check prov) and its LocalQueue, then `arrivals`."""
    cq = cluster_queue()
    cq["spec"]["admissionChecks"] = ["prov"]
    await publish(
        bus,
        config_applied(flavor()),
        config_applied(admission_check()),
        config_applied(cq),
        config_applied(local_queue()),
        *arrivals,
    )


async def queued_behind_blocker(bus: Bus, events: EventLog) -> None:
    """`w` (2 cpu) waits for quota in cq, behind `blocker` (4 cpu)."""
    await checked_queue(
        bus, submitted(workload("blocker", cpu="4")), submitted(workload("w", cpu="2"))
    )
    await events.wait_for("pending", workload="ns/w")


async def admitted_then_evicted(bus: Bus, events: EventLog) -> None:
    """`w` reserved in cq, admitted once prov says Ready, then evicted (its gang timed out):
    its pods are stopping."""
    await checked_queue(bus, submitted(workload("w")))
    await events.wait_for("quota_reserved", workload="ns/w")
    await publish(bus, told("Ready", "provisioned"))
    await events.wait_for("admitted", workload="ns/w")
    rejected = pb.GangRejected(reason="GangTimedOut", message="1 of 2 pods placed")
    await publish(bus, fact("gang_rejected", "ns/w", rejected))
    await events.wait_for("evicted", workload="ns/w")


async def read_then_restarted(
    bus: Bus, bus_config: BusConfig, events: EventLog, replica: Running, *, restart: bool
) -> Running:
    """Once `replica` has read what was published so far (one consumer reads a sentinel after
    it: its answer says so), with `restart` a replica rebuilt from the stream in its place."""
    await publish(bus, submitted(workload("sentinel", queue="nowhere")))
    await events.wait_for("pending", workload="ns/sentinel")
    if not restart:
        return replica
    await replica.kill()
    replica = await start_admission(bus_config)
    await replica.wait_serving()
    return replica


def set_aside(seen: list[pb.Envelope]) -> bool:
    """`w` pending with Kueue's scheduler's word for a workload whose check says Retry or
    Rejected."""
    failed = "The workload has failed admission checks"
    return any(e.workload == "ns/w" and e.pending.message == failed for e in seen)


async def a_ready_reserves_it_again(bus: Bus, events: EventLog) -> None:
    """prov says Ready: `w`, set aside until then, is reserved a second time."""
    await publish(bus, told("Ready", "provisioned again"))

    async def reserved_again() -> bool:
        return count(events, "quota_reserved", "ns/w") == 2

    await eventually(reserved_again)


def told(state: str, message: str) -> pb.Envelope:
    return fact("admission_check", "ns/w", pb.AdmissionCheckUpdated(
        check="prov", state=state, message=message
    ))  # fmt: skip


@pytest.mark.parametrize(
    ("admitted", "state", "reason"),
    [
        (True, "Retry", "AdmissionCheck"),  # evicted, to queue again once its pods are gone
        (False, "Retry", "AdmissionCheck"),
        (True, "Rejected", "DeactivatedDueToAdmissionCheck"),  # deactivated once pods stop
        (False, "Rejected", "InactiveWorkload"),  # nothing runs yet: deactivated at once
    ],
)
async def test_a_check_told_while_no_replica_answered_is_answered_by_the_next(
    bus: Bus, bus_config: BusConfig, events: EventLog, admitted: bool, state: str, reason: str
) -> None:
    first = await start_admission(bus_config)
    try:
        await first.wait_serving()
        await checked_queue(bus, submitted(workload("w")))
        await events.wait_for("quota_reserved", workload="ns/w")
        if admitted:
            await publish(bus, told("Ready", ""))
            await events.wait_for("admitted", workload="ns/w")
    finally:
        await first.kill()
    # Stored after the replica's last decision, as when it died before answering it.
    await publish(bus, told(state, "no capacity"))

    second = await start_admission(bus_config)
    try:
        await second.wait_serving()
        evicted = await events.wait_for("evicted", workload="ns/w", timeout_s=20)
        assert evicted.evicted.reason == reason
        assert f'AdmissionCheck in {state} state: "prov" (no capacity)' in evicted.evicted.message
        assert len(events.matching("evicted", workload="ns/w")) == 1
    finally:
        await second.stop()


async def test_a_retry_told_while_queued_holds_it_out_across_a_restart(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    """`w` waits for quota behind `blocker` when prov says Retry (3 s): the replica holds it
    out of its queue (Kueue's requeueAt); it dies, `blocker` leaves, and its successor, rebuilt
    from the stream, still holds `w` out until the Retry's end and then requeues it
    (BackoffFinished); prov's Retry still stands, so `w` is not reserved until prov says
    Pending (task checkverdicts). Before, the Retry was ignored and the successor reserved `w`
    as soon as it started."""
    first = await start_admission(bus_config)
    try:
        await first.wait_serving()
        await queued_behind_blocker(bus, events)
        retry = pb.AdmissionCheckUpdated(check="prov", state="Retry", requeue_after_seconds=3)
        told_retry = fact("admission_check", "ns/w", retry)
        # One consumer reads both in order: the sentinel's answer says the Retry was applied.
        await publish(bus, told_retry, submitted(workload("sentinel", queue="nowhere")))
        await events.wait_for("pending", workload="ns/sentinel")
    finally:
        await first.kill()
    await publish(bus, fact("deleted", "ns/blocker"))

    second = await start_admission(bus_config)
    try:
        await second.wait_serving()
        requeued = await events.wait_for("requeued", workload="ns/w", timeout_s=30)
        assert requeued.requeued.reason == "BackoffFinished"
        end_ns = (told_retry.time_unix_nano // 10**9 + 3) * 10**9  # requeueAt: whole seconds
        assert requeued.time_unix_nano >= end_ns
        # prov still says Retry (Kueue's status keeps it): not reserved until it says otherwise.
        await events.wait_until(set_aside, timeout_s=10)
        assert not events.matching("quota_reserved", workload="ns/w")
        await publish(bus, told("Pending", "provisioning again"))
        reserved = await events.wait_for("quota_reserved", workload="ns/w", timeout_s=10)
        assert reserved.time_unix_nano >= requeued.time_unix_nano
    finally:
        await second.stop()
