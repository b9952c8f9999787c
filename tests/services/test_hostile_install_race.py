"""Which cluster is the MultiKueue manager is the installation's configuration, not first-come.

At install, each cluster's watcher publishes its Kueue objects as it comes up. A worker's
MultiKueueCluster naming the manager (a misconfigured or lying worker), stored before the
manager's first MultiKueueCluster, made the manager a worker: its own queues were then refused
and nothing was admitted. A MultiKueueCluster now counts only from the cluster admission runs
with (`muster.core.config_owners`), whichever order the events come in; the worker's is
dead-lettered, naming both clusters. A real nats-server, admission as in production.
"""

from __future__ import annotations

import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    flavor,
    local_queue,
    publish,
    running,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog
from test_hostile_config_owner import worker
from test_hostile_events import dead_letter_reasons

from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(60)


REFUSED = "MultiKueueCluster local: applying it from cluster east is refused: "
NOT_MANAGER = (
    "only the MultiKueue manager's MultiKueueClusters count, and east is not the manager "
    "(local: admission's --cluster)"
)
A_WORKER = (
    "east is a MultiKueue worker (a MultiKueueCluster names it); a worker's own queues do not "
    "configure admission"
)


@pytest.mark.parametrize(
    ("worker_first", "why"),
    [(True, NOT_MANAGER), (False, A_WORKER)],
    ids=["worker-first", "manager-first"],
)
async def test_a_worker_naming_the_manager_a_worker_changes_nothing_in_either_order(
    bus: Bus, bus_config: BusConfig, events: EventLog, worker_first: bool, why: str
) -> None:
    # Worker first, taken (as before): the manager was a worker, its queues were refused and
    # the workload never admitted.
    forged = config_applied(worker("local"), cluster="east")
    manager = [
        config_applied(flavor()),
        config_applied(worker("east")),
        config_applied(cluster_queue()),
        config_applied(local_queue()),
    ]
    history = [forged, *manager] if worker_first else [*manager, forged]
    admission = await start_admission(bus_config)
    async with running(admission):
        await admission.wait_serving()
        await publish(bus, *history, submitted(workload("after")))
        await events.wait_for("admitted", workload="ns/after")

    assert await dead_letter_reasons(bus) == {forged.event_id: REFUSED + why}
