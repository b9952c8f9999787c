"""The admission service against a real nats-server: admit, pend, finish, duplicates."""

from __future__ import annotations

import pytest
from admission_world import (
    basic_config,
    fact,
    publish,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(30)


async def test_admits_what_fits_and_pends_the_rest_until_quota_is_released(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        await basic_config(bus, cpu="4")
        await publish(bus, submitted(workload("a", cpu="3")), submitted(workload("b", cpu="2")))

        admitted = await events.wait_for("admitted", workload="ns/a")
        assert admitted.admitted.admission.cluster_queue == "cq"
        assert admitted.source == "admission/0"
        # No check to pass: one event tells the reservation and the admission (events.md).
        assert admitted.admitted.with_reservation
        assert events.matching("quota_reserved") == []
        assert dict(admitted.admitted.admission.pod_set_assignments[0].flavors) == {
            "cpu": "default"
        }
        pending = await events.wait_for("pending", workload="ns/b")
        assert pending.pending.message == (
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
            "flavor default, 1 more needed"
        )
        assert pending.pending.cluster_queue == "cq"

        await publish(bus, fact("finished", "ns/a"))
        await events.wait_for("admitted", workload="ns/b")
    finally:
        await admission.stop()
