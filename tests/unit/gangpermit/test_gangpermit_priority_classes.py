"""Gang-permit serves one cluster: the PriorityClasses its pods' priorities resolve against are
that cluster's own. Another cluster's PriorityClass of the same name (each cluster has its own,
as a MultiKueue worker and its manager do) changes nothing, applied or deleted."""

from __future__ import annotations

import json

import msgspec
import pytest
from cluster_docs import objects, pod

from muster.api.model import Pod
from muster.bus import new_event
from muster.contracts.v1 import events_pb2
from muster.gangpermit.state import GangPermitState


def priority_class(value: int, *, cluster: str) -> events_pb2.Envelope:
    manifest = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": value,
    }
    payload = events_pb2.ConfigApplied(
        kind="PriorityClass", name="high", manifest_json=json.dumps(manifest)
    )
    return new_event("config_applied", payload, cluster=cluster, source=f"watcher/{cluster}")


def priority_class_deleted(*, cluster: str) -> events_pb2.Envelope:
    payload = events_pb2.ConfigDeleted(kind="PriorityClass", name="high")
    return new_event("config_deleted", payload, cluster=cluster, source=f"watcher/{cluster}")


@pytest.mark.parametrize(
    "west",
    [
        [priority_class(5, cluster="west")],
        [priority_class_deleted(cluster="west")],
        [priority_class(5, cluster="west"), priority_class_deleted(cluster="west")],
    ],
    ids=["applies", "deletes", "applies-then-deletes"],
)
def test_gangpermit_of_east_reads_east_priority_classes_only(
    west: list[events_pb2.Envelope],
) -> None:
    state = GangPermitState(cluster="east")
    for env in [priority_class(1000, cluster="east"), *west]:
        state.apply_event(env)
    state.restored()
    (member,) = objects(pod("p"))
    assert isinstance(member, Pod)

    assert state.feed.priority(msgspec.structs.replace(member, priority_class_name="high")) == 1000
