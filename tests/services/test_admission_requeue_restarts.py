"""waitForPodsReady's requeue count survives admission restarts: rebuilt from the stream or
from a snapshot, a replica counts the PodsReadyTimeout evictions it replays (Kueue keeps them
in status.requeueState), so the back-off keeps growing and backoffLimitCount is reached."""

from __future__ import annotations

import json

import pytest
from admission_world import (
    Running,
    basic_config,
    count,
    drained,
    eventually,
    fact,
    publish,
    snapshot_written,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.bus import Bus, BusConfig, new_event
from muster.contracts.v1 import events_pb2 as pb
from muster.core.requeue_state import requeue_end_s

pytestmark = pytest.mark.timeout(90)

BASE_S, MAX_S, LIMIT = 1, 2, 3
# The replica that decides each cycle: snapshots written every 0.2 s, or none (0: rebuilt from
# the stream alone). The second restart reads the snapshot the second replica wrote.
SNAPSHOT_S = (0.0, 0.2, 0.2, 0.0)


async def configure(bus: Bus) -> None:
    """Kueue's Configuration: pods must be ready at once; back-off 1 s, 2 s, then capped."""
    configuration = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "waitForPodsReady": {
            "enable": True,
            "timeout": "1ms",
            "requeuingStrategy": {
                "backoffBaseSeconds": BASE_S,
                "backoffMaxSeconds": MAX_S,
                "backoffLimitCount": LIMIT,
            },
        },
    }
    applied = pb.ConfigApplied(
        kind="Configuration", name="kueue", manifest_json=json.dumps(configuration)
    )
    await publish(bus, new_event("config_applied", applied, cluster="local", source="test"))


async def nth(events: EventLog, event_type: str, key: str, n: int) -> pb.Envelope:
    """The `n`th `event_type` about `key` (1: the first), once it was stored."""

    async def seen() -> bool:
        return len(events.matching(event_type, workload=key)) >= n

    await eventually(seen)
    return events.matching(event_type, workload=key)[n - 1]


async def test_requeue_count_and_back_off_survive_restarts_until_the_limit_deactivates(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    key = "ns/stuck"
    replica: Running = await start_admission(bus_config, snapshot_s=SNAPSHOT_S[0])
    try:
        await replica.wait_serving()
        await configure(bus)
        await basic_config(bus, cpu="4")
        await publish(bus, submitted(workload("stuck")))  # its pods never get ready
        for n in range(1, LIMIT + 1):
            evicted = await nth(events, "evicted", key, n)
            assert evicted.evicted.reason == "PodsReadyTimeout", n
            stopped_seq = await bus.publish(
                fact("eviction_completed", key, pb.EvictionCompleted(eviction_id=evicted.event_id))
            )
            await nth(events, "eviction_completed", key, n)
            # Killed while it backs off: its successor restores the count and the back-off.
            await drained(bus, "admission-0")
            if SNAPSHOT_S[n - 1]:
                await snapshot_written(bus, at_least=stopped_seq)
            await replica.kill()
            replica = await start_admission(bus_config, snapshot_s=SNAPSHOT_S[n])
            await replica.wait_serving()
            requeued = await nth(events, "requeued", key, n)
            assert requeued.requeued.reason == "BackoffFinished", n
            # 1 s, 2 s, 2 s (capped) from the eviction, whole seconds (Kueue's requeueAt).
            back_off_s = min(BASE_S * 2 ** (n - 1), MAX_S)
            end_s = requeue_end_s(evicted.time_unix_nano / 1e9, back_off_s)
            assert requeued.time_unix_nano / 1e9 >= end_s, n
            await nth(events, "admitted", key, n + 1)
        # One more timeout would be the fourth requeue: deactivated instead.
        last = await nth(events, "evicted", key, LIMIT + 1)
        assert last.evicted.reason == "DeactivatedDueToRequeuingLimitExceeded"
        await publish(
            bus, fact("eviction_completed", key, pb.EvictionCompleted(eviction_id=last.event_id))
        )
        await drained(bus, "admission-0")
        assert count(events, "admitted", key) == LIMIT + 1
        assert count(events, "requeued", key) == LIMIT
    finally:
        await replica.stop()
