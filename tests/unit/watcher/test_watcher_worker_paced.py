"""The watcher's MultiKueueCluster status follows the heartbeats at admission's pace
(`muster.bus.heartbeats.PacedHeartbeats`): a worker putting its heartbeat in a burst costs a
decode for the first put and one for the latest at its cluster's turn, not one per put."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, cast

import pytest

from muster.api.check_states import ChecksWanted
from muster.bus import Bus, new_event
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.core.dispatch import ClusterCapacity
from muster.core.heartbeat import encode, pack
from muster.watcher import worker_status
from muster.watcher.worker_status import WorkerStatuses

BURST = 200


class Sink:
    def __init__(self) -> None:
        self.desired: list[str] = []  # each Active message, as decoded
        self.second = asyncio.Event()

    def desire(
        self, ref: ObjectRef, status: Mapping[str, Any], *, checks: ChecksWanted | None = None
    ) -> None:
        self.desired.append(status["conditions"][0]["message"])
        if len(self.desired) == 2:
            self.second.set()


async def test_a_burst_of_heartbeats_is_decoded_twice_the_latest_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    beats = [
        encode(pack(ClusterCapacity(cluster="east", unreachable=f"down {i}", reason="Down")))
        for i in range(BURST)
    ]
    sink = Sink()

    async def burst(_kv: object, _bucket: str, heard: Callable[[str, bytes | None], None]) -> None:
        for beat in beats:  # as fast as a hostile worker puts them
            heard("east", beat)
        await sink.second.wait()  # the latest, at east's turn

    monkeypatch.setattr(worker_status, "follow_bucket", burst)
    statuses = WorkerStatuses(sink, lost_after_s=10.0, clock=lambda: 1.0)
    declared = pb.ConfigApplied(kind="MultiKueueCluster", name="east")
    statuses.apply(new_event("config_applied", declared, cluster="local", source="t"))
    sink.desired.clear()

    bus = cast(Bus, SimpleNamespace(kv=None))  # the bucket is the burst above
    await asyncio.wait_for(statuses._heartbeats(bus), timeout=30)
    assert sink.desired == ["down 0", f"down {BURST - 1}"]
