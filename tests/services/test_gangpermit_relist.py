"""Gang-permit's cluster cache, its watch away while a pod is deleted and that deletion's
tombstone pruned (the sim keeps tombstones the watcher read for an hour): resuming is refused as
expired, and the cache lists again and drops the pod, its room free (on a real nats-server).
Before, the resumed watch never showed the deletion: a ghost pod held its room until restart.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from away_watch import AwayWatch, running_cache
from test_sim_pod_tombstones import watcher_read

from muster.bus import Bus
from muster.cluster.keys import bucket_name
from muster.cluster.sim import SimBackend
from muster.cluster.sim.store import SimStore
from muster.cluster.sim.tombstones import prune_once
from muster.gangpermit.state import GangPermitState

pytestmark = pytest.mark.timeout(60)

GHOST = "ns/ghost"


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "4", "pods": "110"}},
    }


def bound_pod(name: str) -> dict[str, Any]:
    container = {"name": "main", "resources": {"requests": {"cpu": "4"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"nodeName": "n1", "schedulerName": "muster", "containers": [container]},
    }


def free_cpu(state: GangPermitState) -> int:
    (room,) = [n for n in state.capacity().nodes if n.name == "n1"]
    return room.free["cpu"]


async def test_a_pod_deleted_and_pruned_while_the_watch_was_away_is_dropped(bus: Bus) -> None:
    sim = SimBackend(await SimStore.open(bus.kv, cluster="local"))
    await sim.apply(node("n1"))
    await sim.apply(bound_pod("ghost"))
    away = AwayWatch(sim)
    async with running_cache(away.backend()) as (state, cache):
        assert GHOST in state.pods
        assert free_cpu(state) == 0

        away.away.set()
        await sim.apply(node("n2"))  # a change: the watch fails at it
        await asyncio.wait_for(away.failed.wait(), 10)
        (ghost,) = [p for p in await sim.store.list("pod.")]
        await sim.store.delete(ghost)
        # The watcher read the deletion, and its tombstone is older than kept: it goes.
        watcher = await watcher_read(bus, await sim.store.last_revision())
        pods = await bus.kv(bucket_name("local"))
        assert await prune_once(pods, watcher, "local", kept_s=0) == 1
        away.away.clear()

        await cache.sync(timeout_s=20)

        assert GHOST not in state.pods
        assert free_cpu(state) == 4000
        assert cache.relists == 1


async def test_the_cache_is_read_up_to_now_when_the_last_write_is_of_another_kind(
    bus: Bus,
) -> None:
    """The placement watch does not read Jobs (nor count them as read): the cache is up to
    date at the last write of what it reads, not waiting for a revision it never sees."""
    sim = SimBackend(await SimStore.open(bus.kv, cluster="local"))
    await sim.apply(node("n1"))
    await sim.apply(bound_pod("p"))
    await sim.apply({"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": "j", "namespace": "ns"}})  # fmt: skip
    async with running_cache(sim) as (state, cache):
        assert "ns/p" in state.pods
        assert free_cpu(state) == 0
        assert cache.revision < await sim.current_revision()
