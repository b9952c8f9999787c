"""The simulated cluster's garbage collector: deletes the pods of deleted Workloads.

Runs in `muster service sim-cluster` beside the kubelet, and sees pods through the kubelet's
watch (`Kubelet(on_pod=collector.seen)`: one watch of the store, not two). It indexes each
live pod under the Workload that controls it and, for each `workload.deleted` of any cluster
(a MultiKueue copy's pods go too), deletes the pods the rule in `collection` gives up: those
indexed when the deletion comes, and any that appears later (a start that raced the delete).
Each delete names the pod's uid, so a pod of that name made again since is left alone.

Restarts lose nothing: the deletions are read again from the start of MUSTER_EVENTS and the
kubelet's watch lists every pod again. A finished pod of a workload not deleted stays, as a
Job's pods stay until the Job goes. Background propagation only: foreground (the owner kept
until its dependents are gone) and orphaning are not modelled, nor a Job's
`ttlSecondsAfterFinished` (a simulated cluster keeps no Job object, only its events).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable
from typing import Final, NamedTuple

from muster.cluster.errors import ClusterError
from muster.cluster.keys import describe
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.collection import (
    DELETIONS_KEPT,
    Deletions,
    Dependent,
    collectable,
    dependent_of,
)
from muster.cluster.sim.kubelet import waiting_out_nats
from muster.cluster.sim.store import StoreChange

log = logging.getLogger(__name__)

_DELETES_IN_FLIGHT: Final = 16


class Deletion(NamedTuple):
    """A `workload.deleted`: the workload key and the event's stream sequence."""

    workload: str
    sequence: int


class GarbageCollector:
    """Deletes the dependents of deleted Workloads in one simulated cluster; `run` until
    cancelled, fed pod changes through `seen`."""

    def __init__(self, backend: SimBackend, *, kept: int = DELETIONS_KEPT) -> None:
        self._backend = backend
        self._deletions = Deletions(kept=kept)
        self._dependents: dict[str, dict[str, Dependent]] = {}  # owner -> pod key -> pod
        self._due: asyncio.Queue[tuple[str, Dependent]] = asyncio.Queue()
        self._queued: set[tuple[str, str]] = set()  # (pod key, uid) due or being deleted

    def seen(self, change: StoreChange) -> None:
        """Index one pod change (the kubelet's watch), or queue the pod's deletion when its
        owner was deleted after it was admitted."""
        dependent = dependent_of(change.obj)
        if dependent is None:
            return
        pods = self._dependents.setdefault(dependent.owner, {})
        if change.type == "DELETED":
            pods.pop(change.key, None)
            if not pods:
                del self._dependents[dependent.owner]
            return
        pods[change.key] = dependent
        if collectable(dependent, self._deletions.of(dependent.owner)):
            self._queue(change.key, dependent)

    def deleted(self, deletion: Deletion) -> None:
        """Note one deletion and queue its owner's pods that it gives up."""
        self._deletions.record(deletion.workload, deletion.sequence)
        deleted_at = self._deletions.of(deletion.workload)
        for key, dependent in list(self._dependents.get(deletion.workload, {}).items()):
            if collectable(dependent, deleted_at):
                self._queue(key, dependent)

    def _queue(self, key: str, dependent: Dependent) -> None:
        if (key, dependent.uid) not in self._queued:
            self._queued.add((key, dependent.uid))
            self._due.put_nowait((key, dependent))

    async def run(self, deletions: AsyncIterable[Deletion]) -> None:
        """Follow `deletions` and delete what they give up; returns only by cancellation or
        error."""
        slots = asyncio.Semaphore(_DELETES_IN_FLIGHT)
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._follow(deletions))
            while True:
                key, dependent = await self._due.get()
                await slots.acquire()
                tasks.create_task(self._collect(key, dependent, slots))

    async def _follow(self, deletions: AsyncIterable[Deletion]) -> None:
        async for deletion in deletions:
            self.deleted(deletion)

    async def _collect(self, key: str, pod: Dependent, slots: asyncio.Semaphore) -> None:
        """Delete one pod (that uid only), waiting out NATS; releases a slot."""
        try:
            deleted = await waiting_out_nats(
                lambda: self._backend.delete("Pod", pod.name, namespace=pod.namespace, uid=pod.uid)
            )
            if deleted:
                log.info(
                    "collected pod %s: workload %s was deleted",
                    describe(key),
                    pod.owner,
                    extra={"workload": pod.owner},
                )
        except ClusterError:  # still changing after many tries: the watch brings it back
            log.exception("cannot collect pod %s", describe(key), extra={"workload": pod.owner})
        finally:
            self._queued.discard((key, pod.uid))
            slots.release()
