"""Pods created on their nodes (docs/events.md, "Pods created on their nodes"): the binder
reads an admission's podsets once, at `admitted`, and each `gang_permitted` (a permit may come
in parts) creates its pods from that reading; a permit of an admission this replica did not
read (another replica's, or before a restart) reads it then."""

from __future__ import annotations

import pytest
from test_binder_specs import _Backend, _context, _Published, on

from muster.api import load_yaml
from muster.api.decode import decode_documents
from muster.api.model import Workload
from muster.binder import handlers
from muster.binder.handlers import BinderContext, follow, on_admitted
from muster.binder.translate import pod_set_starts
from muster.cluster.backend import PodSetStart
from muster.contracts.v1 import events_pb2 as pb
from muster.payloads import workload_submitted

WORKLOAD = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {namespace: ns, name: w, annotations: {muster.dev/run-seconds: "60"}}
spec:
  queueName: q
  podSets:
  - name: main
    count: 2
    template:
      spec:
        containers: [{name: c, resources: {requests: {cpu: 250m}}}]
"""


def _submitted() -> pb.Envelope:
    documents, _ = load_yaml(WORKLOAD)
    (wl,), _ = decode_documents(documents)
    assert isinstance(wl, Workload)
    return on("local", "submitted", workload_submitted(wl), 1)


def _admitted(submitted: pb.Envelope) -> pb.Envelope:
    assignment = pb.PodSetAssignment(name="main", count=2, flavors={"cpu": "default"})
    payload = pb.WorkloadAdmitted(
        admission=pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment]),
        hints=[pb.PodSetPlacementHints(name="main", node_selector={"pool": "a"})],
        manifest_json=submitted.submitted.manifest_json,
    )
    env = on("local", "admitted", payload, 2)
    env.submitted_id = submitted.event_id
    return env


def _permit(part: int, pod: str, node: str, sequence: int) -> pb.Envelope:
    binding = pb.PodBinding(pod=pb.PodRef(namespace="ns", name=pod), node=node)
    payload = pb.GangPermitted(
        bindings=[binding], part=part, parts=2, permit_id="p", create=True, admission_sequence=2
    )
    return on("local", "gang_permitted", payload, sequence)


def _binder(recalled: pb.Envelope | None = None) -> tuple[BinderContext, _Backend, _Published]:
    cluster, published = _Backend(on_nodes=True), _Published()

    async def recall(sequence: int) -> pb.Envelope | None:
        return recalled if recalled is not None and recalled.sequence == sequence else None

    ctx = _context(cluster, admissions=recall)
    ctx.publisher = published
    return ctx, cluster, published


@pytest.fixture
def readings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The workloads whose admitted podsets the binder read, once per reading."""
    read: list[str] = []

    def counted(wl: Workload, admitted: pb.WorkloadAdmitted) -> list[PodSetStart]:
        read.append(wl.key)
        return pod_set_starts(wl, admitted)

    monkeypatch.setattr("muster.binder.handlers.pod_set_starts", counted)
    return read


async def test_a_permit_in_parts_creates_each_part_from_the_one_reading_at_admission(
    readings: list[str],
) -> None:
    ctx, cluster, published = _binder()
    submitted = _submitted()
    follow(submitted, ctx.specs, ctx.fences)
    admitted = _admitted(submitted)
    await on_admitted(admitted, ctx)
    ctx.specs.apply(admitted)  # the follower's copy of it, later (on Kubernetes) keeps the reading
    assert cluster.placed == []  # placed first: nothing made before the permit
    await handlers.on_gang_permitted(_permit(0, "w-main-0", "n1", 3), ctx)
    await handlers.on_gang_permitted(_permit(1, "w-main-1", "n2", 4), ctx)
    assert cluster.placed == [("w-main-0", "n1"), ("w-main-1", "n2")]
    assert [s.requests for s in cluster.started["ns/w"]] == [{"cpu": 250}]
    assert [(e.type, e.bound.part) for e in published.seen] == [
        ("workload.bound", 0),
        ("workload.bound", 1),
    ]
    assert readings == ["ns/w"]


async def test_a_permit_of_an_admission_another_replica_handled_reads_it_then(
    readings: list[str],
) -> None:
    submitted = _submitted()
    ctx, cluster, _ = _binder(recalled=_admitted(submitted))
    follow(submitted, ctx.specs, ctx.fences)
    await handlers.on_gang_permitted(_permit(0, "w-main-0", "n1", 3), ctx)
    await handlers.on_gang_permitted(_permit(1, "w-main-1", "n2", 4), ctx)
    assert cluster.placed == [("w-main-0", "n1"), ("w-main-1", "n2")]
    assert readings == ["ns/w", "ns/w"]
