"""A Kueue Workload admitted, the watcher stopped, the Workload deleted meanwhile and its
tombstone gone before the watcher resumed (pruned past its revision): the resumed watch never
shows the deletion, so the list of workload objects at start does (task jobdelete410; a real
nats-server, the sim cluster, admission). Before, no `workload.deleted` came: admission kept
its quota for ever, and the workload queued behind it was never admitted."""

from __future__ import annotations

import pytest
from admission_world import cluster_queue, flavor, local_queue, start_admission, workload
from bus_helpers import EventLog
from placement_stack import CLUSTER, Stack

from muster.api.ids import uuid5_text
from muster.bus import Bus, BusConfig
from muster.cluster.keys import bucket_name, object_key
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore
from muster.watcher import translate
from muster.watcher.handlers import WATCHER_ID_NAMESPACE

pytestmark = pytest.mark.timeout(60)


async def test_a_workload_deleted_and_pruned_while_the_watcher_was_stopped_frees_its_quota(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    backend = SimBackend(await SimStore.open(bus.kv, cluster=CLUSTER))
    stack = Stack(bus=bus, backend=backend, events=events)
    for manifest in (flavor(), cluster_queue(cpu="1"), local_queue()):
        await backend.apply(manifest)
    admission = await start_admission(bus_config)
    try:
        await backend.apply(workload("a", cpu="1"))
        await stack.start_watcher()
        await events.wait_for("admitted", workload="ns/a")
        await backend.apply(workload("b", cpu="1"))  # no room left: it waits for a's quota
        await events.wait_for("submitted", workload="ns/b")
        await stack.stop("watcher")  # it stores the revision it handled
        stored = await backend.store.get(object_key("Workload", "ns", "a"))
        assert stored is not None
        wl, _ = translate.workload_of(stored.obj)
        assert wl is not None

        await backend.delete("Workload", "a", namespace="ns")
        # Forgotten past the watcher's revision (a purge by hand, or a watcher point lost):
        # the resumed watch cannot show the deletion.
        objects = await bus.kv(bucket_name(CLUSTER))
        assert await objects.forget_deleted(older_than_s=0) == 1
        await stack.start_watcher()

        deleted = await events.wait_for("deleted", workload="ns/a", timeout_s=10)
        # The id its watched deletion would have had: a repeat is deduplicated.
        fact = f"{CLUSTER}/ns/a/deleted/{translate.incarnation(wl)}"
        assert deleted.event_id == uuid5_text(WATCHER_ID_NAMESPACE, fact)
        await events.wait_for("admitted", workload="ns/b", timeout_s=20)
        assert len(events.matching("deleted", workload="ns/a")) == 1
        assert not events.matching("deleted", workload="ns/b")
    finally:
        await stack.stop_all()
        await admission.stop()
