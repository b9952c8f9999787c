"""A gang outside Kueue applied pod by pod, with no room to run, through the watcher against a
real nats-server: what `muster events` shows of its pending pods is the whole gang, in a few
growing `pods_pending` (one per pod before, each listing every pod so far)."""

from __future__ import annotations

import math

import pytest
import yaml
from bus_helpers import EventLog
from placement_stack import gang_yaml, placement_stack

from muster.bus import Bus

pytestmark = pytest.mark.timeout(60)

GANG = "ns/train/workers"
PODS = 40


async def test_a_gang_applied_pod_by_pod_is_told_pending_whole_in_a_few_events(
    bus: Bus, events: EventLog
) -> None:
    async with placement_stack(bus, events) as stack:
        for doc in yaml.safe_load_all(gang_yaml("train", pods=PODS)):
            await stack.backend.apply(doc)  # no node: every pod stays pending

        told = await events.wait_for("pods_pending", workload=GANG, timeout_s=10)
        while told.pods_pending.count < PODS:  # the last once the pods are still for 1 s
            told = await events.wait_for_next(
                "pods_pending", after=told, workload=GANG, timeout_s=10
            )

    assert sorted(p.name for p in told.pods_pending.pods) == sorted(
        f"train-{i}" for i in range(PODS)
    )
    counts = [e.pods_pending.count for e in events.matching("pods_pending", workload=GANG)]
    assert counts == sorted(counts)  # growing
    assert len(counts) <= math.ceil(math.log2(PODS)) + 1
