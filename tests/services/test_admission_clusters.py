"""Admission follows the cluster registry (MUSTER_CLUSTERS) only once MultiKueue declares a
worker: without one, no replica reads or decodes the gang-permits' heartbeats.

A real nats-server; the heartbeat and the configuration are put as gang-permit and the gateway
put them.
"""

from __future__ import annotations

import msgspec
import pytest
from admission_world import (
    UNEXPIRING_LEASE_S,
    basic_config,
    config_applied,
    drained,
    eventually,
    publish,
    start_admission,
)
from multicluster_stack import watchers

from muster.bus import Bus, BusConfig
from muster.bus.buckets import CLUSTERS_BUCKET
from muster.core.dispatch import ClusterCapacity

pytestmark = pytest.mark.timeout(60)


async def test_the_registry_is_followed_once_a_worker_cluster_is_declared(
    bus: Bus, bus_config: BusConfig
) -> None:
    registry = await bus.kv(CLUSTERS_BUCKET)
    await registry.put("east", msgspec.json.encode(ClusterCapacity(cluster="east")))
    admission = await start_admission(bus_config, lease_ttl_s=UNEXPIRING_LEASE_S)
    try:
        await admission.wait_serving()
        await basic_config(bus)
        await drained(bus, "admission-0")  # serving, and its rounds ran: its loops all started
        assert await watchers(bus) == 0

        worker = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "MultiKueueCluster",
            "metadata": {"name": "east"},
        }
        await publish(bus, config_applied(worker))

        async def following() -> bool:
            return await watchers(bus) == 1

        await eventually(following)
    finally:
        await admission.stop()
