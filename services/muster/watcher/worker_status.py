"""The `Active` condition of the MultiKueueClusters of this (manager) cluster, as Kueue's
MultiKueue writes it: whether the worker is reached.

In muster the worker is reached by the services serving it (its watcher, gang-permit and
binder, from inside it or from here with its kubeconfig), and its gang-permit says how it
fares in its heartbeat (`MUSTER_CLUSTERS`, `muster.core.dispatch.ClusterCapacity`): its room,
or why the API server is not reachable (`unreachable`, with Kueue's reason: BadKubeConfig,
ClientConnectionFailed, ...). `WorkerBook` (pure) turns the heartbeats into conditions;
`follow_workers` (the watcher, on Kubernetes) feeds it and desires each changed status.

| heartbeat | Active | reason | message |
|---|---|---|---|
| room, at most `lost_after_s` old | True | Active | Connected |
| unreachable | False | its reason | why |
| too large to tell its room, fresh | False | RoomTooLarge | its size, the limit |
| none, or older than `lost_after_s` | False | NoHeartbeat | what was last heard |

Differs from Kueue: `NoHeartbeat` is muster's own: the services serving the worker are
silent (stopped, or cut off from NATS), which Kueue, reaching its workers itself, cannot be.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec

from muster.bus.buckets import CLUSTERS_BUCKET
from muster.bus.connection import Bus
from muster.bus.heartbeats import PacedHeartbeats
from muster.bus.kv import follow_bucket
from muster.bus.pulse import Pulse
from muster.bus.supervision import SupervisedGroup
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.core.conditions import condition_message
from muster.core.dispatch import ClusterCapacity
from muster.core.heartbeat import decode_heartbeat, reached
from muster.core.heartbeat_parts import cluster_of_part
from muster.watcher.status import StatusSink

log = logging.getLogger(__name__)

KIND = "MultiKueueCluster"
_IDLE_S = 5.0  # with no heartbeat to turn stale, look again this often
_PAST_S = 0.05  # wake just past a heartbeat's staleness


def _active(status: bool, reason: str, message: str) -> dict[str, Any]:
    return {
        "conditions": [
            {
                "type": "Active",
                "status": "True" if status else "False",
                "reason": reason,
                "message": condition_message(message),
            }
        ]
    }


class WorkerBook:
    """The MultiKueueClusters of one cluster and what their services last said. Pure: every
    time comes in as an argument."""

    def __init__(self, *, lost_after_s: float) -> None:
        self.lost_after_s = lost_after_s
        self.declared: set[str] = set()
        self._heard: dict[str, tuple[ClusterCapacity, float]] = {}  # last heartbeat, when

    def apply(self, env: pb.Envelope) -> list[str]:
        """Fold in a config event; the MultiKueueClusters whose status it may change."""
        field = env.WhichOneof("payload")
        if field == "config_applied" and env.config_applied.kind == KIND:
            self.declared.add(env.config_applied.name)
            return [env.config_applied.name]
        if field == "config_deleted" and env.config_deleted.kind == KIND:
            self.declared.discard(env.config_deleted.name)
        return []

    def heartbeat(self, capacity: ClusterCapacity, *, now_s: float) -> list[str]:
        self._heard[capacity.cluster] = (capacity, now_s)
        return [capacity.cluster] if capacity.cluster in self.declared else []

    def forget(self, cluster: str) -> list[str]:
        self._heard.pop(cluster, None)
        return [cluster] if cluster in self.declared else []

    def status_of(self, cluster: str, *, now_s: float) -> dict[str, Any]:
        heard = self._heard.get(cluster)
        if heard is None:
            return _active(False, "NoHeartbeat", "the services serving it have not reported yet")
        capacity, at_s = heard
        if not reached(capacity):
            return _active(False, capacity.reason or "Unreachable", capacity.unreachable)
        if now_s - at_s > self.lost_after_s:
            silent = f"the services serving it have not reported for over {self.lost_after_s:g}s"
            return _active(False, "NoHeartbeat", silent)
        if capacity.unreachable:  # reached, but its room not told (RoomTooLarge)
            return _active(False, capacity.reason, capacity.unreachable)
        return _active(True, "Active", "Connected")

    def next_stale_s(self) -> float | None:
        """When the freshest heartbeat that is not stale yet turns stale."""
        times = [
            at_s + self.lost_after_s
            for name, (capacity, at_s) in self._heard.items()
            if name in self.declared and reached(capacity)
        ]
        return min(times) if times else None


class WorkerStatuses:
    """`WorkerBook` with the status sink: each status desired when it may have changed (the
    sink skips one equal to what it wrote)."""

    def __init__(
        self, sink: StatusSink, *, lost_after_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.sink = sink
        self.book = WorkerBook(lost_after_s=lost_after_s)
        self.clock = clock

    def apply(self, env: pb.Envelope) -> None:
        self._desire(self.book.apply(env))

    def desire_all(self) -> None:
        self._desire(sorted(self.book.declared))

    def _desire(self, names: list[str]) -> None:
        now_s = self.clock()
        for name in names:
            if name in self.book.declared:
                status = self.book.status_of(name, now_s=now_s)
                self.sink.desire(ObjectRef(kind=KIND, name=name), status)

    async def follow(self, bus: Bus) -> None:
        """Follow the heartbeats, and desire again when one turns stale, until cancelled."""
        async with SupervisedGroup() as tasks:
            tasks.create_task(self._heartbeats(bus), name="watcher-worker-heartbeats")
            stale = self._stale(bus.pulses.pulse("watcher-worker-stale"))
            tasks.create_task(stale, name="watcher-worker-stale")

    async def _heartbeats(self, bus: Bus) -> None:
        """Each cluster's head decoded at most once each HEARTBEAT_GAP_S, the latest kept, as
        admission's registry reads them: a worker putting its heartbeat a thousand times a
        second would otherwise cost a decode of its head per put."""
        paced = PacedHeartbeats(self._heard)
        try:
            await follow_bucket(bus.kv, CLUSTERS_BUCKET, paced.heard)
        finally:
            paced.close()

    def _heard(self, key: str, value: bytes | None) -> None:
        """A heartbeat (None: its key was deleted); a part of a large room is not needed: the
        head alone says whether the cluster is reached."""
        if cluster_of_part(key) is not None:
            return
        if value is None:
            self._desire(self.book.forget(key))
            return
        try:
            capacity = decode_heartbeat(value, key=key)
        except msgspec.DecodeError as exc:
            log.warning("bad heartbeat of %s: %s", key, exc)
            return
        self._desire(self.book.heartbeat(capacity, now_s=self.clock()))

    async def _stale(self, pulse: Pulse) -> None:
        """Desire every status again when the next heartbeat turns stale (the writer skips
        those that did not change); `pulse` says when it wakes next."""
        while True:
            due = self.book.next_stale_s()
            wait_s = _IDLE_S if due is None else min(_IDLE_S, max(0.0, due - self.clock()))
            pulse.beat(wait_s + _PAST_S)
            await asyncio.sleep(wait_s + _PAST_S)
            self.desire_all()
