"""The binder's view of workloads: specs from every cluster (MultiKueue dispatches across
clusters), and the fences its own cluster's evictions and every cluster's ends put up."""

from __future__ import annotations

import json

import pytest

from muster import payloads
from muster.api.model import Workload
from muster.binder.handlers import BinderContext, Recall, WorkloadSpecs, on_admitted
from muster.binder.pacing import BindPacer
from muster.binder.service import spec_subjects
from muster.bus import new_event
from muster.bus.errors import Reject, Retry
from muster.cluster.backend import PodSetStart, WorkloadOrigin
from muster.cluster.errors import ClusterError
from muster.contracts.v1 import events_pb2 as pb
from muster.payloads import workload_submitted

MANIFEST = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {"name": "w", "namespace": "ns"},
    "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1}]},
}


def on(cluster: str, field: str, payload: object, sequence: int) -> pb.Envelope:
    env = new_event(field, payload, cluster=cluster, workload="ns/w", source="t")  # type: ignore[arg-type]
    env.sequence = sequence
    return env


def test_follows_specs_of_every_cluster_and_evictions_of_its_own() -> None:
    # Each as stored before partitions and with its partition token, and a `submitted` on its
    # name's subject (one-write claims; docs/events.md).
    assert spec_subjects("west") == [
        "muster.v1.*.workload.submitted",
        "muster.v1.*.workload.submitted.*",
        "muster.v1.*.workload.submitted.*.>",
        "muster.v1.*.workload.deleted",
        "muster.v1.*.workload.deleted.*",
        "muster.v1.*.workload.finished",
        "muster.v1.*.workload.finished.*",
        "muster.v1.west.workload.admitted",
        "muster.v1.west.workload.admitted.*",
        "muster.v1.west.workload.evicted",
        "muster.v1.west.workload.evicted.*",
        "muster.v1.west.workload.eviction_completed",
        "muster.v1.west.workload.eviction_completed.*",
    ]
    # Without copies to collect (a simulated cluster) an admission is read by the consumer
    # alone: the follower would read every one a second time for nothing.
    assert spec_subjects("west", copies=False) == [
        s for s in spec_subjects("west") if ".workload.admitted" not in s
    ]


def test_a_spec_submitted_elsewhere_is_known_until_it_finishes() -> None:
    specs = WorkloadSpecs()
    specs.apply(
        on("local", "submitted", pb.WorkloadSubmitted(manifest_json=json.dumps(MANIFEST)), 1)
    )
    spec = specs.get("ns/w")
    assert spec is not None
    assert spec.key == "ns/w"
    specs.apply(on("west", "finished", pb.WorkloadFinished(), 12))
    assert specs.get("ns/w") is None


class _Backend:
    """Records the workloads started (the only call `on_admitted` makes), and stopped. With
    `on_nodes`, a workload's pods are created each on its node at its `gang_permitted`."""

    def __init__(self, *, on_nodes: bool = False) -> None:
        self.on_nodes = on_nodes
        self.started: dict[str, list[PodSetStart]] = {}
        self.origins: dict[str, WorkloadOrigin | None] = {}
        self.admissions: list[int] = []  # started, in order
        self.stopped: list[int] = []  # the evictions carried out, in order
        self.placed: list[tuple[str, str]] = []  # (pod, node) of each pod created on a node

    def creates_on_nodes(self, owner_kind: str) -> bool:
        # Otherwise pods created at admission, then bound (`test_binder_created_bound`).
        return self.on_nodes

    async def start_workload(
        self,
        key: str,
        *,
        pod_sets: list[PodSetStart],
        admission: int = 0,
        origin: WorkloadOrigin | None = None,
        nodes: dict[str, str] | None = None,
        checked: bool = False,
    ) -> None:
        self.started[key] = pod_sets
        self.origins[key] = origin
        self.admissions.append(admission)
        name = key.split("/")[1]
        pods = (f"{name}-{ps.name}-{i}" for ps in pod_sets for i in range(ps.count))
        self.placed += [(pod, nodes[pod]) for pod in pods if nodes is not None and pod in nodes]

    async def stop_workload(
        self, key: str, *, before: int, pod_sets: dict[str, int] | None = None
    ) -> None:
        self.stopped.append(before)


def _context(backend: _Backend, *, admissions: Recall | None = None) -> BinderContext:
    return BinderContext(
        cluster="local",
        backend=backend,  # type: ignore[arg-type]
        publisher=None,  # type: ignore[arg-type]  # on_admitted publishes nothing
        specs=WorkloadSpecs(),
        pacer=BindPacer(max_concurrent=1, per_second=0.0),
        admissions=admissions,
    )


def _admitted(manifest_json: str) -> pb.Envelope:
    assignment = pb.PodSetAssignment(name="main", count=1, flavors={"cpu": "default"})
    admission = pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    return on("local", "admitted", pb.WorkloadAdmitted(admission=admission,
                                                       manifest_json=manifest_json), 7)  # fmt: skip


async def test_an_admission_starts_a_workload_whose_submitted_this_replica_never_saw() -> None:
    backend = _Backend()
    await on_admitted(_admitted(json.dumps(MANIFEST)), _context(backend))
    assert [(s.name, s.count) for s in backend.started["ns/w"]] == [("main", 1)]


async def test_without_a_copy_of_the_spec_an_admission_waits_for_its_submitted() -> None:
    backend = _Backend()
    with pytest.raises(Retry, match="no spec known yet for ns/w"):
        await on_admitted(_admitted(""), _context(backend))
    assert backend.started == {}


@pytest.mark.parametrize("again", [False, True], ids=["deleted", "deleted-and-submitted-again"])
async def test_an_admission_of_a_workload_deleted_before_it_was_stored_starts_nothing(
    again: bool,
) -> None:
    """Admission decided before it read the deletion (and a new `submitted` of the name): the
    decision, stored after them, names the first `submitted` and is not carried out."""
    backend = _Backend()
    ctx = _context(backend)
    manifest = json.dumps(MANIFEST)
    first = on("local", "submitted", pb.WorkloadSubmitted(manifest_json=manifest), 1)
    stored = [first, on("local", "deleted", pb.WorkloadDeleted(), 2)]
    if again:
        stored.append(on("local", "submitted", pb.WorkloadSubmitted(manifest_json=manifest), 3))
    for env in stored:
        ctx.specs.apply(env)
        ctx.fences.apply(env)
    late = _admitted(manifest)
    late.submitted_id = first.event_id
    await on_admitted(late, ctx)
    assert backend.started == {}
    if again:  # the new one's own admission starts it
        late.submitted_id = stored[-1].event_id
        await on_admitted(late, ctx)
        assert list(backend.started) == ["ns/w"]


class _Refusing(_Backend):
    """A worker cluster that will not create what it is given."""

    async def start_workload(
        self,
        key: str,
        *,
        pod_sets: list[PodSetStart],
        admission: int = 0,
        origin: WorkloadOrigin | None = None,
        nodes: dict[str, str] | None = None,
        checked: bool = False,
    ) -> None:
        await super().start_workload(key, pod_sets=pod_sets, admission=admission, origin=origin)
        raise ClusterError("Job/ns/train", "Forbidden", 'jobs.batch is forbidden: user "mk"')


class _Published:
    def __init__(self) -> None:
        self.seen: list[pb.Envelope] = []

    async def publish(self, env: pb.Envelope) -> int:
        self.seen.append(env)
        return len(self.seen)


async def test_a_workload_from_another_cluster_is_copied_and_a_refusal_said_to_admission() -> None:
    backend, published = _Refusing(), _Published()
    ctx = _context(backend)
    ctx.cluster, ctx.publisher = "east", published
    admitted = _admitted(json.dumps(MANIFEST))
    admitted.admitted.origin_cluster = "local"
    admitted.admitted.owner_manifest_json = '{"kind": "Job"}'
    await on_admitted(admitted, ctx)
    origin = backend.origins["ns/w"]
    assert origin is not None
    assert (origin.cluster, origin.owner_json) == ("local", '{"kind": "Job"}')
    (rejected,) = published.seen
    assert (rejected.type, rejected.cluster) == ("workload.gang_rejected", "east")
    assert rejected.gang_rejected.reason == "StartFailed"
    assert rejected.gang_rejected.message.startswith("cluster east: Job/ns/train: jobs.batch")
    # One of its own cluster's: its objects are here, nothing is copied; a refusal is a bug
    # to retry, not a dispatch to undo.
    ctx.cluster = "local"
    with pytest.raises(Reject):
        await on_admitted(admitted, ctx)
    assert backend.origins["ns/w"] is None


async def test_a_copy_of_a_spec_known_from_its_submitted_is_the_manifest_submitted_carries() -> (
    None
):
    # A dispatch whose admission carries no copy: the binder writes the spec it holds, with the
    # one encoding a `workload.submitted` has (so the worker gets the same bytes either way).
    backend = _Backend()
    ctx = _context(backend)
    ctx.cluster = "east"
    submitted = pb.WorkloadSubmitted(manifest_json=json.dumps(MANIFEST))
    ctx.specs.apply(on("local", "submitted", submitted, 1))
    spec = ctx.specs.get("ns/w")
    assert spec is not None
    await on_admitted(_admitted(""), ctx)
    origin = backend.origins["ns/w"]
    assert origin is not None
    assert origin.workload_json == workload_submitted(spec).manifest_json
    assert origin.workload_json == json.dumps(
        json.loads(origin.workload_json), sort_keys=True, separators=(",", ":")
    )


async def test_an_admission_whose_copy_of_the_spec_does_not_decode_is_dead_lettered() -> None:
    backend = _Backend()
    with pytest.raises(Reject, match=r"^ns/w.*expected an object, got a list"):
        await on_admitted(_admitted("[1]"), _context(backend))
    assert backend.started == {}


async def test_only_a_workload_admitted_here_has_its_manifest_read(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every binder follows every cluster's `submitted`: one admitted elsewhere, or never, is
    kept as published and not read (a manifest that does not decode bothers no one here)."""
    read: list[str] = []
    written_workload = payloads.written_workload

    def counted(text: str, *, what: str) -> Workload:
        read.append(what)
        return written_workload(text, what=what)

    monkeypatch.setattr(payloads, "written_workload", counted)
    backend = _Backend()
    ctx = _context(backend)
    elsewhere = {**MANIFEST, "metadata": {"name": "x", "namespace": "ns"}}
    broken = on("west", "submitted", pb.WorkloadSubmitted(manifest_json='{"kind": 3}'), 1)
    broken.workload = "ns/broken"
    other = on("west", "submitted", pb.WorkloadSubmitted(manifest_json=json.dumps(elsewhere)), 2)
    other.workload = "ns/x"
    ours = on("local", "submitted", pb.WorkloadSubmitted(manifest_json=json.dumps(MANIFEST)), 3)
    for env in (broken, other, ours):
        ctx.specs.apply(env)
    assert read == []
    assert "undecodable" not in caplog.text

    await on_admitted(_admitted(""), ctx)  # no copy: the spec followed is read, once
    await on_admitted(_admitted(""), ctx)
    assert read == ["ns/w"]
    assert [(s.name, s.count) for s in backend.started["ns/w"]] == [("main", 1)]
    assert ctx.specs.get("ns/broken") is None  # asked for: it does not decode, as before
    assert "undecodable workload manifest" in caplog.text
