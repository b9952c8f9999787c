"""status.reclaimablePods in the status book: a Job's Workload carries its Job's finished pods
as Kueue's job reconciler writes them; a bare Workload's list is its owner's, never touched.
Pure (the end-to-end path: test_kube_reclaimable_e2e)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_kube_status_book import WL, admission, config, event

from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.kueue_status.book import StatusBook

JOB = pb.OwnerRef(api_version="batch/v1", kind="Job", name="train", uid="u1")


def told(*pods: tuple[str, int]) -> pb.Envelope:
    counts = [pb.ReclaimablePodCount(pod_set=name, count=count) for name, count in pods]
    return event("reclaimable_pods", pb.WorkloadReclaimablePods(pods=counts))


def submitted(owner: pb.OwnerRef | None, status: Any = None) -> pb.Envelope:
    manifest = json.dumps({"kind": "Workload", "status": status or {}})
    return event(
        "submitted", pb.WorkloadSubmitted(queue_name="lq", owner=owner, manifest_json=manifest)
    )


def book(first: pb.Envelope) -> StatusBook:
    made = StatusBook()
    for env in (
        config("ClusterQueue", "cq"),
        config("LocalQueue", "ml/lq", {"clusterQueue": "cq"}),
        first,
        event("quota_reserved", pb.QuotaReserved(admission=admission())),
    ):
        made.apply(env)
    return made


def reclaimable(made: StatusBook) -> Any:
    return (made.status_of(WL) or {}).get("reclaimablePods")


def test_a_jobs_workload_follows_its_finished_pods_until_it_finishes() -> None:
    made = book(submitted(JOB))
    assert reclaimable(made) is None  # none yet: nothing to write
    assert made.apply(told(("main", 1))) == {WL}
    assert reclaimable(made) == [{"name": "main", "count": 1}]
    made.apply(told(("main", 2)))
    assert reclaimable(made) == [{"name": "main", "count": 2}]
    assert made.status_of(WL)["admission"]["clusterQueue"] == "cq"  # type: ignore[index]
    made.apply(event("finished", pb.WorkloadFinished(succeeded=True)))
    assert made.apply(told(("main", 3))) == set()  # Kueue's reconciler stops at a finished one
    assert reclaimable(made) == [{"name": "main", "count": 2}]


def test_a_jobs_workload_submitted_with_finished_pods_has_them_at_once() -> None:
    made = book(submitted(JOB, {"reclaimablePods": [{"name": "main", "count": 2}]}))
    assert reclaimable(made) == [{"name": "main", "count": 2}]
    made.apply(told())  # none any more (a changed Job): the list goes, the writer removes it
    assert reclaimable(made) is None


def test_a_bare_workloads_list_is_its_owners_to_write() -> None:
    made = book(submitted(None, {"reclaimablePods": [{"name": "main", "count": 2}]}))
    assert made.apply(told(("main", 1))) == set()
    assert reclaimable(made) is None


@pytest.mark.parametrize("status", [{"reclaimablePods": 3}, {"reclaimablePods": [{"count": 1}]}])
def test_an_unreadable_list_in_a_jobs_manifest_is_none(status: Any) -> None:
    assert reclaimable(book(submitted(JOB, status))) is None
