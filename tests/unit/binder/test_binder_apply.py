"""cmd.apply in the binder: objects are written as their submitter, never as the binder."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from muster.binder.handlers import BinderContext, WorkloadSpecs, on_apply
from muster.binder.pacing import BindPacer
from muster.bus import new_event
from muster.bus.errors import Reject
from muster.cluster.backend import Identity
from muster.contracts.v1 import events_pb2

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}}
GANG = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"}}


class RecordingCluster:
    """Records each write with whom it was made for (the part of a backend on_apply uses)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, Identity | None]] = []

    async def create(self, manifest: Mapping[str, Any], *, as_user: Identity | None = None) -> bool:
        self.writes.append(("create", manifest["kind"], as_user))
        return True

    async def apply(self, manifest: Mapping[str, Any], *, as_user: Identity | None = None) -> None:
        self.writes.append(("apply", manifest["kind"], as_user))


class Published:
    async def publish(self, env: events_pb2.Envelope) -> int:
        return 1


def command(submitter: events_pb2.Submitter | None) -> events_pb2.Envelope:
    payload = events_pb2.ApplyRequested(manifests_json=[json.dumps(POD), json.dumps(GANG)])
    if submitter is not None:
        payload.submitter.CopyFrom(submitter)
    return new_event("apply_requested", payload, cluster="local", source="gateway")


def context(cluster: RecordingCluster) -> BinderContext:
    return BinderContext(
        cluster="local",
        backend=cluster,  # type: ignore[arg-type]  # on_apply uses create and apply only
        publisher=Published(),
        specs=WorkloadSpecs(),
        pacer=BindPacer(max_concurrent=1, per_second=0),
    )


async def test_each_object_is_written_as_the_submitter() -> None:
    cluster = RecordingCluster()

    await on_apply(command(events_pb2.Submitter(user="alice", groups=["team-a"])), context(cluster))

    alice = Identity(user="alice", groups=("team-a",))
    assert cluster.writes == [("create", "Pod", alice), ("apply", "PodGroup", alice)]


@pytest.mark.parametrize(
    ("submitter", "why"),
    [
        pytest.param(None, "without a submitter", id="none"),
        pytest.param(
            events_pb2.Submitter(user="root", groups=["system:masters"]),
            "member of system:masters",
            id="cluster admin",
        ),
    ],
)
async def test_a_command_not_to_be_written_as_its_submitter_is_rejected(
    submitter: events_pb2.Submitter | None, why: str
) -> None:
    cluster = RecordingCluster()

    with pytest.raises(Reject, match=why):
        await on_apply(command(submitter), context(cluster))

    assert cluster.writes == []


async def test_an_object_that_is_not_a_json_object_is_rejected_naming_its_place() -> None:
    env = command(events_pb2.Submitter(user="alice"))
    env.apply_requested.manifests_json[1] = "[]"
    with pytest.raises(Reject, match=r"manifests_json\[1\]: manifest is a JSON list, not an obj"):
        await on_apply(env, context(RecordingCluster()))
