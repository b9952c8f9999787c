"""The watcher's pod path without NATS: a stream that records, and pods as the cluster stores
them (shared by the watcher's unit tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from muster.bus.errors import BusError
from muster.cluster import ClusterChange
from muster.contracts.v1 import events_pb2


class Stream:
    """Stores every event published, in order; drops no duplicate."""

    def __init__(self) -> None:
        self.stored: list[events_pb2.Envelope] = []

    async def publish_many(self, envs: Sequence[events_pb2.Envelope]) -> list[int | BusError]:
        self.stored.extend(envs)
        return list(range(len(self.stored) - len(envs) + 1, len(self.stored) + 1))

    async def replay(self) -> AsyncIterator[events_pb2.Envelope]:
        for env in self.stored:
            yield env


def pod(
    i: int, phase: str = "Pending", *, node: str = "n", ready: bool | None = None, of: str = "w"
) -> Any:
    """Pod `i` of workload ns/`of` (WL) as the cluster stores it; Running is Ready unless
    `ready` says otherwise."""
    ready = phase == "Running" if ready is None else ready
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"{of}-{i}",
            "uid": f"uid-{of}-{i}",
            "labels": {"muster.dev/workload": of},
        },
        "spec": {"nodeName": node},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def changed(obj: Any, *, deleted: bool = False) -> ClusterChange:
    name = obj["metadata"]["name"]
    return ClusterChange(
        kind="Pod",
        type="DELETED" if deleted else "MODIFIED",
        key=f"pod.ns.{name}",
        obj=obj,
        revision=0,
    )
