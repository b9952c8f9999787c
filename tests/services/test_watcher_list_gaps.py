"""What the watcher holds that a watch's list does not show is gone (task watcher5; a real
nats-server, the sim cluster). A watch lists when the watcher starts with no revision, and
when a resumed watch cannot resume (tombstones pruned past its revision); the watcher used to
list by itself first, so a deletion between its list and the watch's went unseen: a pod stayed
a ghost (its group Running for ever, its quota held), and a workload deleted while the
watcher was away, its revision lost, was never told deleted."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import pytest
from admission_world import workload
from bus_helpers import EventLog
from placement_stack import CLUSTER, Stack
from test_watcher_unseen_deletion import pod
from test_watcher_unseen_deletion import running_then_stopped as stopped_after_running

from muster.api.ids import uuid5_text
from muster.bus import Bus
from muster.bus.buckets import WATCHER_BUCKET
from muster.cluster.backend import ClusterChange
from muster.cluster.keys import bucket_name, object_key
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import PRUNED_KEY, SimStore
from muster.watcher import translate
from muster.watcher.handlers import WATCHER_ID_NAMESPACE

pytestmark = pytest.mark.timeout(60)

GROUP = "ns/w"


class DeletingBeforeItLists(SimBackend):
    """The sim cluster, where pod `doomed` is deleted as a watch from 0 begins: after every
    list the watcher made before it, before the watch's own."""

    doomed = ""

    async def watch(
        self, *, from_revision: int = 0, **options: Any
    ) -> AsyncGenerator[ClusterChange, None]:
        if from_revision == 0 and self.doomed:
            await self.delete("Pod", self.doomed, namespace="ns")
            self.doomed = ""
        async for change in super().watch(from_revision=from_revision, **options):
            yield change


async def running_then_stopped(
    bus: Bus, events: EventLog
) -> tuple[Stack, DeletingBeforeItLists, str]:
    """Group ns/w's two pods told running, then w-0 succeeded; the watcher stopped (its
    revision stored). Returns the stack, its backend, and the `running`'s id."""
    backend = DeletingBeforeItLists(await SimStore.open(bus.kv, cluster=CLUSTER))
    stack, running = await stopped_after_running(bus, events, backend)
    return stack, backend, running.event_id


async def test_a_pod_deleted_between_the_watchers_list_and_an_expired_watchs_ends_its_group(
    bus: Bus, events: EventLog
) -> None:
    stack, backend, running = await running_then_stopped(bus, events)
    # Tombstones pruned past the watcher's revision (a purge by hand, or its point rewound):
    # its resumed watch cannot resume, and lists.
    await backend.apply(pod("x-0", "Running", workload="x"))
    await backend.delete("Pod", "x-0", namespace="ns")
    pods = await bus.kv(bucket_name(CLUSTER))
    assert await pods.forget_deleted(older_than_s=0) == 1
    await pods.put(PRUNED_KEY, str(await backend.current_revision()).encode())
    backend.doomed = "w-1"  # the watcher lists w-1 at its start, the watch from 0 does not
    await stack.start_watcher()

    finished = await events.wait_for("finished", workload=GROUP, timeout_s=10)
    assert finished.finished.succeeded
    assert finished.finished.message == "1 of 1 pods succeeded"
    assert [e.event_id for e in events.matching("running", workload=GROUP)] == [running]
    await stack.stop_all()


async def test_a_workload_deleted_while_the_watcher_was_away_and_its_revision_lost_is_deleted(
    bus: Bus, events: EventLog
) -> None:
    backend = SimBackend(await SimStore.open(bus.kv, cluster=CLUSTER))
    stack = Stack(bus=bus, backend=backend, events=events)
    await backend.apply(workload("a"))
    await backend.apply(workload("b"))
    await stack.start_watcher()
    await events.wait_for("submitted", workload="ns/a")
    await events.wait_for("submitted", workload="ns/b")
    await stack.stop("watcher")
    stored = await backend.store.get(object_key("Workload", "ns", "a"))
    assert stored is not None
    wl, _ = translate.workload_of(stored.obj)
    assert wl is not None

    await backend.delete("Workload", "a", namespace="ns")
    await (await bus.kv(WATCHER_BUCKET)).delete(CLUSTER)  # its point lost: revision 0
    await stack.start_watcher()

    deleted = await events.wait_for("deleted", workload="ns/a", timeout_s=10)
    fact = f"{CLUSTER}/ns/a/deleted/{translate.incarnation(wl)}"
    assert deleted.event_id == uuid5_text(WATCHER_ID_NAMESPACE, fact)  # as if watched
    # What is still there is neither deleted nor submitted again.
    await backend.apply(pod("s-0", "Running", workload="s"))
    await events.wait_for("running", workload="ns/s")
    assert not events.matching("deleted", workload="ns/b")
    assert len(events.matching("submitted", workload="ns/b")) == 1
    await stack.stop_all()
