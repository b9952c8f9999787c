"""A MultiKueue copy of a Job's Workload whose admission carries the Workload but not the Job
(its manifest over 256 KiB), met by a binder that lacks the `submitted` (restarted after it
left the stream): started with the Job the binders kept, or ended with the reason, never as a
bare Workload the manager cannot follow (docs/events.md, "Manifests too large for their
admission")."""

from __future__ import annotations

import json

from test_binder_specs import MANIFEST, _admitted, _Backend, _context, _Published, on

from muster.binder.handlers import BinderContext, WorkloadSpecs, on_admitted
from muster.contracts.v1 import events_pb2 as pb
from muster.payloads import MANIFEST_COPY_LIMIT

JOB = json.dumps(
    {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ns"},
        "spec": {"template": {"metadata": {"annotations": {"notes": "n" * MANIFEST_COPY_LIMIT}}}},
    }
)
JOBS_WORKLOAD = json.dumps(
    {
        **MANIFEST,
        "metadata": {
            "name": "w",
            "namespace": "ns",
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}
            ],
        },
    }
)


def dispatched(manifest: str) -> pb.Envelope:
    """What admission of cluster `local` publishes for `east`: the Workload copied, its Job
    (over the limit) not."""
    env = _admitted(manifest)
    env.cluster = "east"
    env.admitted.origin_cluster = "local"
    env.submitted_id = "s1"
    return env


class _Kept:
    """The binder's recovery (its replay caught up, then MUSTER_MANIFESTS_<c> read): brings
    `kept`, when any, into `specs` as the store's `submitted`."""

    def __init__(self, specs: WorkloadSpecs, kept: pb.Envelope | None) -> None:
        self.specs, self.kept, self.asked = specs, kept, 0

    async def __call__(self, admitted: pb.Envelope) -> None:
        self.asked += 1
        if self.kept is not None:
            self.specs.apply(self.kept)


def _east(backend: _Backend, kept: pb.Envelope | None) -> tuple[BinderContext, _Kept, _Published]:
    ctx, published = _context(backend), _Published()
    recover = _Kept(ctx.specs, kept)
    ctx.cluster, ctx.publisher, ctx.recover = "east", published, recover
    return ctx, recover, published


async def test_a_copy_without_its_job_starts_with_the_job_the_binders_kept() -> None:
    submitted = pb.WorkloadSubmitted(manifest_json=JOBS_WORKLOAD, owner_manifest_json=JOB)
    kept = on("local", "submitted", submitted, 0)
    kept.event_id = "s1"
    backend = _Backend()
    ctx, recover, published = _east(backend, kept)
    await on_admitted(dispatched(JOBS_WORKLOAD), ctx)
    origin = backend.origins["ns/w"]
    assert origin is not None
    assert (origin.cluster, origin.owner_json) == ("local", JOB)
    assert (recover.asked, published.seen) == (1, [])


async def test_a_copy_without_its_job_that_no_binder_kept_is_ended_not_started_bare() -> None:
    backend = _Backend()
    ctx, recover, published = _east(backend, None)
    await on_admitted(dispatched(JOBS_WORKLOAD), ctx)
    assert (backend.started, recover.asked) == ({}, 1)
    (finished,) = published.seen
    assert (finished.type, finished.cluster, finished.submitted_id) == (
        "workload.finished", "east", "s1"
    )  # fmt: skip
    assert (finished.finished.succeeded, finished.finished.reason) == (False, "FailedToStart")
    assert finished.finished.message.startswith(
        "ns/w cannot be started: its Job's manifest is no longer known"
    )


async def test_an_admission_whose_manifest_no_binder_kept_fails_to_start_as_kueues() -> None:
    """No copy in the admission (over the limit), no `submitted`, none kept: it can never
    start, and Kueue's job framework ends such a workload Finished, reason FailedToStart."""
    backend = _Backend()
    ctx, recover, published = _east(backend, None)
    ctx.cluster = "local"
    await on_admitted(_admitted(""), ctx)
    assert (backend.started, recover.asked) == ({}, 1)
    (finished,) = published.seen
    assert (finished.type, finished.workload) == ("workload.finished", "ns/w")
    assert (finished.finished.succeeded, finished.finished.reason) == (False, "FailedToStart")
    assert finished.finished.message.startswith(
        "ns/w cannot be started: its manifest is no longer known"
    )


async def test_a_copy_of_a_workload_of_its_own_needs_no_owner_and_starts() -> None:
    """A Workload submitted as one has no Job: its copy is whole without the `submitted`."""
    backend = _Backend()
    ctx, recover, published = _east(backend, None)
    await on_admitted(dispatched(json.dumps(MANIFEST)), ctx)
    origin = backend.origins["ns/w"]
    assert origin is not None
    assert (origin.cluster, origin.owner_json) == ("local", "")
    assert (recover.asked, published.seen) == (0, [])
