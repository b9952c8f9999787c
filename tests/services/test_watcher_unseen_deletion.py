"""The watcher stopped, a pod deleted meanwhile and its tombstone gone before the watcher
resumed (pruned past the watcher's revision): the resumed watch never shows the deletion, so
the list at start does (on a real nats-server with the sim cluster). Before, the group whose
other pod had succeeded was never told finished: Running for ever, its quota held."""

from __future__ import annotations

from typing import Any

import pytest
from bus_helpers import EventLog
from placement_stack import CLUSTER, Stack

from muster.bus import Bus
from muster.cluster.keys import bucket_name
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore
from muster.contracts.v1.events_pb2 import Envelope

pytestmark = pytest.mark.timeout(60)

GROUP = "ns/w"


def pod(name: str, phase: str, *, workload: str = "w") -> dict[str, Any]:
    """A pod of workload ns/`workload`, bound, in `phase` (Ready while Running)."""
    ready = "True" if phase == "Running" else "False"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {"muster.dev/workload": workload},
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]},
    }


async def running_then_stopped(
    bus: Bus, events: EventLog, backend: SimBackend
) -> tuple[Stack, Envelope]:
    """Group ns/w's two pods told running on `backend`, then w-0 succeeded; the watcher
    stopped, its revision stored. Returns the stack and the group's `running`."""
    stack = Stack(bus=bus, backend=backend, events=events)
    await backend.apply(pod("w-0", "Running"))
    await backend.apply(pod("w-1", "Running"))
    await stack.start_watcher()
    running = await events.wait_for("running", workload=GROUP)
    await backend.apply(pod("w-0", "Succeeded"))
    # Changes are handled in order: once this one is told, w-0's end was handled too.
    await backend.apply(pod("s-0", "Running", workload="s"))
    await events.wait_for("running", workload="ns/s")
    await stack.stop("watcher")  # it stores the revision it handled
    return stack, running


async def test_a_pod_deleted_and_pruned_while_the_watcher_was_stopped_still_ends_its_group(
    bus: Bus, events: EventLog
) -> None:
    backend = SimBackend(await SimStore.open(bus.kv, cluster=CLUSTER))
    stack, running = await running_then_stopped(bus, events, backend)

    await backend.delete("Pod", "w-1", namespace="ns")
    # Forgotten past the watcher's revision (muster's pruner never goes past it; a purge by
    # hand, or a watcher point lost, does): the resumed watch cannot show the deletion.
    pods = await bus.kv(bucket_name(CLUSTER))
    assert await pods.forget_deleted(older_than_s=0) == 1
    await stack.start_watcher()

    finished = await events.wait_for("finished", workload=GROUP, timeout_s=10)
    assert finished.finished.succeeded
    assert list(finished.finished.pod_uids) == ["uid-w-0"]
    assert finished.finished.message == "1 of 1 pods succeeded"
    assert [e.event_id for e in events.matching("running", workload=GROUP)] == [running.event_id]
    await stack.stop_all()
