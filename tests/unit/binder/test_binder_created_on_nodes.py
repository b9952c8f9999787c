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
        with_reservation=True,  # no admission check: its pods are placed before they exist
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


def _whole_permit(sequence: int) -> pb.Envelope:
    bindings = [
        pb.PodBinding(pod=pb.PodRef(namespace="ns", name=f"w-main-{i}"), node=f"n{i + 1}")
        for i in range(2)
    ]
    payload = pb.GangPermitted(bindings=bindings, create=True, admission_sequence=2)
    return on("local", "gang_permitted", payload, sequence)


@pytest.mark.parametrize(
    ("bound_for_created", "told"),
    [(True, ["workload.bound"]), (False, [])],
    ids=["--bound-events all", "--bound-events binds"],
)
async def test_a_whole_permit_to_create_is_answered_by_bound_only_when_asked(
    bound_for_created: bool, told: list[str]
) -> None:
    """With `--bound-events binds` the pods made on their nodes are the permit's only answer
    (docs/events.md, "`bound` only for binds"); they are made all the same."""
    ctx, cluster, published = _binder()
    ctx.bound_for_created = bound_for_created
    submitted = _submitted()
    follow(submitted, ctx.specs, ctx.fences)
    await on_admitted(_admitted(submitted), ctx)

    await handlers.on_gang_permitted(_whole_permit(3), ctx)

    assert cluster.placed == [("w-main-0", "n1"), ("w-main-1", "n2")]
    assert [e.type for e in published.seen] == told


async def test_permits_in_parts_are_answered_part_by_part_even_without_bound_for_created() -> None:
    """A part's `bound` is how gang-permit counts the parts answered (a failed part makes it
    place the gang again once all are): kept under `--bound-events binds`."""
    ctx, _, published = _binder()
    ctx.bound_for_created = False
    submitted = _submitted()
    follow(submitted, ctx.specs, ctx.fences)
    await on_admitted(_admitted(submitted), ctx)

    await handlers.on_gang_permitted(_permit(0, "w-main-0", "n1", 3), ctx)
    await handlers.on_gang_permitted(_permit(1, "w-main-1", "n2", 4), ctx)

    assert [(e.type, e.bound.part) for e in published.seen] == [
        ("workload.bound", 0),
        ("workload.bound", 1),
    ]
