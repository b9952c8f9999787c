"""The watcher's pod path without NATS: a stream and a marks bucket that record, pods as the
cluster stores them, and a watcher over them that can be restarted (shared by the watcher's
unit tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest

from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES
from muster.bus.errors import BusError
from muster.bus.kv import Bucket, Entry
from muster.cluster import ClusterChange
from muster.contracts.v1 import events_pb2
from muster.watcher import handlers
from muster.watcher.handlers import WatcherContext, decide_still, on_pod
from muster.watcher.marks import KvMarks
from muster.watcher.outbox import Outbox
from muster.watcher.pods import Sent, due_events, pod_state
from muster.watcher.resume import know_listed, live_of

CLUSTER = "east"


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
    """A change of `obj`, a pod, or another kind's object, of namespace ns."""
    name, kind = obj["metadata"]["name"], obj.get("kind", "Pod")
    return ClusterChange(
        kind=kind,
        type="DELETED" if deleted else "MODIFIED",
        key=f"pod.ns.{name}" if kind == "Pod" else f"obj.{kind}.ns.{name}",
        obj=obj,
        revision=0,
    )


class MarksBucket:
    """The `MUSTER_WATCHER` bucket: values by key, every put and delete recorded."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.puts: list[str] = []
        self.deletes: list[str] = []

    async def put(self, key: str, value: bytes) -> int:
        self.values[key] = value
        self.puts.append(key)
        return len(self.puts)

    async def delete(self, key: str) -> bool:
        self.values.pop(key, None)
        self.deletes.append(key)
        return True

    async def snapshot(self, pattern: str, *, timeout_s: float) -> dict[str, Entry]:
        prefix = pattern.removesuffix(">")
        return {k: Entry(k, v, 1, 0.0) for k, v in self.values.items() if k.startswith(prefix)}


class Watcher:
    """The watcher's pod path over `stream` and `bucket`, started as after a restart; its
    clock (`now_s`) moves only when a test moves it."""

    def __init__(
        self,
        stream: Stream,
        bucket: MarksBucket,
        *,
        clock_s: float = 0.0,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self.stream, self.bucket, self.now_s = stream, bucket, clock_s
        self.marks = KvMarks(cast(Bucket, bucket), cluster=CLUSTER, clock_s=lambda: self.now_s)
        self.ctx = WatcherContext(
            cluster=CLUSTER,
            outbox=Outbox(stream),
            marks=self.marks,
            clock_ns=lambda: int(self.now_s * 1e9),
            monotonic_s=lambda: self.now_s,
            max_event_bytes=max_event_bytes,
        )

    async def start(self, pods: Sequence[Any]) -> None:
        """Read back what was sent, knowing the `pods` listed now (as `service._remember`),
        then know the pods and decide those gone (as `service._watch` on a resumed watch)."""
        states = [s for s in map(pod_state, pods) if s is not None]
        await self.marks.read_all()
        live = live_of(states)
        await self.marks.recall(self.stream.replay(), source=self.ctx.source, live=live)
        know_listed(self.ctx, states, gone=self.marks.gone(live))
        await self.ctx.outbox.flush()
        await self.marks.flush()

    async def handle(self, change: ClusterChange) -> None:
        """One batch of one change: handled, its events stored, then its marks."""
        await on_pod(change, self.ctx)
        await self.ctx.outbox.flush()
        await self.marks.flush()

    async def wait(self, seconds: float) -> None:
        """Let `seconds` pass with no change, as the watch loop does (`decide_still`)."""
        self.now_s += seconds
        if decide_still(self.ctx):
            await self.ctx.outbox.flush()
            await self.marks.flush()


def looks_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pods each look at a whole workload (`due_events`) read, appended as it happens."""
    looked: list[int] = []

    def counting(workload: str, pods: list[Any], sent: Sent, **kw: Any) -> Any:
        looked.append(len(pods))
        return due_events(workload, pods, sent, **kw)

    monkeypatch.setattr(handlers, "due_events", counting)
    return looked
