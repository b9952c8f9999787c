"""A check's Retry or Rejected while the workload is inactive (spec.active false): Kueue's
status.admissionChecks keeps it (the workload controller neither resets nor acts on the checks
of an evicted workload, and deactivating one already evicted evicts it no more); reactivated,
it is queued again (Requeued, Reactivated) and the scheduler (nominate) leaves it unreserved,
"The workload has failed admission checks", until the check says otherwise. Before, muster
dropped what a check said while the workload was inactive, and forgot on deactivation what it
had said while the workload was queued after its eviction: resumed, it was reserved at once.
The live replica and one rebuilt from the stream decide the same (task checks3)."""

from __future__ import annotations

import pytest
from admission_world import count, eventually, fact, publish, start_admission, submitted, workload
from bus_helpers import EventLog
from test_admission_check_restarts import (
    a_ready_reserves_it_again,
    admitted_then_evicted,
    checked_queue,
    read_then_restarted,
    set_aside,
    told,
)

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(60)


def active(value: bool) -> pb.Envelope:
    return fact("active_changed", "ns/w", pb.WorkloadActiveChanged(active=value))


def times_set_aside(events: EventLog) -> int:
    return sum(1 for e in events.matching("pending", workload="ns/w") if set_aside([e]))


async def stopped_while_admitted(bus: Bus, events: EventLog) -> None:
    """`w` admitted (prov Ready), then stopped (kueuectl stop): evicted, its pods gone."""
    await checked_queue(bus, submitted(workload("w")))
    await events.wait_for("quota_reserved", workload="ns/w")
    await publish(bus, told("Ready", "provisioned"))
    await events.wait_for("admitted", workload="ns/w")
    await publish(bus, active(False))
    await events.wait_for("evicted", workload="ns/w")
    await publish(bus, fact("eviction_completed", "ns/w"))


@pytest.mark.parametrize("restart", [False, True], ids=["live", "rebuilt"])
@pytest.mark.parametrize("verdict", ["Rejected", "Retry"])
async def test_a_verdict_told_while_inactive_keeps_it_unreserved_once_resumed(
    bus: Bus, bus_config: BusConfig, events: EventLog, verdict: str, restart: bool
) -> None:
    replica = await start_admission(bus_config)
    try:
        await replica.wait_serving()
        await stopped_while_admitted(bus, events)
        # Inactive; prov, reset to Pending at the eviction, now says no.
        await publish(bus, told(verdict, "no capacity"))
        replica = await read_then_restarted(bus, bus_config, events, replica, restart=restart)
        await publish(bus, active(True))

        await events.wait_until(set_aside, timeout_s=20)
        assert count(events, "quota_reserved", "ns/w") == 1
        assert events.matching("requeued", workload="ns/w")[-1].requeued.reason == "Reactivated"

        await a_ready_reserves_it_again(bus, events)
    finally:
        await replica.stop()


@pytest.mark.parametrize("restart", [False, True], ids=["live", "rebuilt"])
async def test_a_retry_told_while_queued_after_its_eviction_outlives_a_stop_and_resume(
    bus: Bus, bus_config: BusConfig, events: EventLog, restart: bool
) -> None:
    """Evicted (its gang timed out), `w` is set aside once queued again by the Retry prov told
    while its pods stopped; stopped then, it is not evicted again (Kueue: it is evicted
    already), so nothing resets the Retry: resumed, it is set aside again until prov says
    Ready."""
    replica = await start_admission(bus_config)
    try:
        await replica.wait_serving()
        await admitted_then_evicted(bus, events)
        await publish(bus, told("Retry", "no capacity"), fact("eviction_completed", "ns/w"))
        await events.wait_until(set_aside, timeout_s=20)
        await publish(bus, active(False))
        replica = await read_then_restarted(bus, bus_config, events, replica, restart=restart)
        await publish(bus, active(True))

        async def set_aside_again() -> bool:
            return times_set_aside(events) >= 2

        await eventually(set_aside_again, timeout_s=20)
        assert count(events, "quota_reserved", "ns/w") == 1

        await a_ready_reserves_it_again(bus, events)
    finally:
        await replica.stop()


async def read_up_to_here(bus: Bus, events: EventLog, name: str) -> None:
    """Once the replica has read what was published so far (it answers a sentinel after)."""
    await publish(bus, submitted(workload(name, queue="nowhere")))
    await events.wait_for("pending", workload=f"ns/{name}")


@pytest.mark.parametrize("restart", ["live", "rebuilt-inactive", "rebuilt-reactivated"])
async def test_a_retry_told_while_inactive_holds_it_out_after_reactivation(
    bus: Bus, bus_config: BusConfig, events: EventLog, restart: str
) -> None:
    """Kueue clears requeueState while the workload is inactive, but once it is reactivated
    NeedsRequeueAtUpdate sets requeueAt again from the Retry still in its status: prov saying
    Ready then does not reserve it before that end (an hour here). Before, only the failed
    check held it, and the Ready reserved it at once (task leftovers3)."""
    replica = await start_admission(bus_config)
    try:
        await replica.wait_serving()
        await stopped_while_admitted(bus, events)
        retry = pb.AdmissionCheckUpdated(
            check="prov", state="Retry", message="no capacity", requeue_after_seconds=3600
        )
        await publish(bus, fact("admission_check", "ns/w", retry))
        await read_up_to_here(bus, events, "sentinel-1")
        if restart == "rebuilt-inactive":
            await replica.kill()
            replica = await start_admission(bus_config)
            await replica.wait_serving()
        await publish(bus, active(True))
        await events.wait_for("requeued", workload="ns/w")
        await read_up_to_here(bus, events, "sentinel-2")
        if restart == "rebuilt-reactivated":
            await replica.kill()
            replica = await start_admission(bus_config)
            await replica.wait_serving()

        await publish(bus, told("Ready", "provisioned again"))
        await read_up_to_here(bus, events, "sentinel-3")
        assert count(events, "quota_reserved", "ns/w") == 1  # held out until its requeueAt
        assert events.matching("requeued", workload="ns/w")[-1].requeued.reason == "Reactivated"
    finally:
        await replica.stop()
