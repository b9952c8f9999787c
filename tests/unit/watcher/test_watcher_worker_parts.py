"""The watcher's MultiKueueCluster Active condition from a room in parts: the head alone says
whether the worker is reached; part keys are no clusters (neither heard nor forgotten)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from muster.api.check_states import ChecksWanted
from muster.bus import new_event
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat_parts import encode_room, part_key
from muster.watcher.worker_status import WorkerStatuses


class Sink:
    def __init__(self) -> None:
        self.desired: list[tuple[str, str]] = []  # (name, Active reason)

    def desire(
        self, ref: ObjectRef, status: Mapping[str, Any], *, checks: ChecksWanted | None = None
    ) -> None:
        self.desired.append((ref.name, status["conditions"][0]["reason"]))


def test_part_keys_are_not_clusters_and_the_head_says_the_worker_is_active(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = Sink()
    statuses = WorkerStatuses(sink, lost_after_s=10.0, clock=lambda: 1.0)
    declared = pb.ConfigApplied(kind="MultiKueueCluster", name="east")
    statuses.apply(new_event("config_applied", declared, cluster="local", source="t"))
    nodes = tuple(NodeRoom(name=f"n-{i}", allocatable={"cpu": 1000}) for i in range(200))
    room = encode_room(ClusterCapacity(cluster="east", nodes=nodes), max_bytes=2048)
    assert len(room.parts) > 1
    sink.desired.clear()
    statuses._heard(part_key("east", 0), room.parts[0])
    statuses._heard(part_key("east", 1), None)
    assert sink.desired == []
    assert caplog.records == []  # not "bad heartbeat" at every part
    statuses._heard("east", room.head)
    assert sink.desired == [("east", "Active")]
