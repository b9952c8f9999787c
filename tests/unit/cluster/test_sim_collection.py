"""The simulated cluster's garbage-collection rule: which pods a Workload's deletion gives up."""

from __future__ import annotations

from typing import Any

import pytest

from muster.cluster.sim.collection import Deletions, collectable, dependent_of

Pod = dict[str, Any]


def pod(
    *,
    name: str = "train-main-0",
    owner: str | None = "train",
    kind: str = "Workload",
    api_version: str = "kueue.x-k8s.io/v1beta1",
    controller: bool = True,
    admission: str | None = "10",
) -> Pod:
    """A pod as the binder makes it for workload ml/<owner> at admission `admission`."""
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": {}}
    if admission is not None:
        meta["labels"]["muster.dev/admission"] = admission
    if owner is not None:
        ref = {"apiVersion": api_version, "kind": kind, "name": owner, "controller": controller}
        meta["ownerReferences"] = [ref]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def goes(p: Pod, deleted_at: int | None) -> bool:
    dependent = dependent_of(p)
    return dependent is not None and collectable(dependent, deleted_at)


def test_a_pod_admitted_before_its_workload_was_deleted_goes() -> None:
    assert goes(pod(admission="10"), deleted_at=11)


def test_a_pod_of_a_later_admission_of_the_name_stays() -> None:
    # The workload was deleted at 11, submitted again and admitted at 12: a new pod.
    assert not goes(pod(admission="12"), deleted_at=11)


def test_a_pod_whose_workload_was_never_deleted_stays() -> None:
    assert not goes(pod(), deleted_at=None)


def test_an_unlabelled_pod_counts_as_the_oldest_admission() -> None:
    assert goes(pod(admission=None), deleted_at=1)


@pytest.mark.parametrize(
    "p",
    [
        pytest.param(pod(owner=None), id="no-owner"),
        pytest.param(pod(controller=False), id="owner-not-controller"),
        pytest.param(pod(kind="Job", api_version="batch/v1"), id="controlled-by-a-job"),
        pytest.param(pod(api_version="scheduling.k8s.io/v1alpha1"), id="another-api-group"),
        pytest.param(pod(owner=""), id="nameless-owner"),
    ],
)
def test_a_pod_no_kueue_workload_controls_is_nobodys_dependent(p: Pod) -> None:
    assert dependent_of(p) is None


def test_the_dependent_names_its_owner_by_workload_key_and_itself_by_uid() -> None:
    dependent = dependent_of(pod())
    assert dependent is not None
    assert dependent.owner == "ml/train"
    assert (dependent.namespace, dependent.name, dependent.uid) == (
        "ml",
        "train-main-0",
        "uid-train-main-0",
    )
    assert dependent.admission == 10


def test_hostile_metadata_is_nobodys_dependent() -> None:
    assert dependent_of({"metadata": "x"}) is None
    assert dependent_of({"metadata": {"name": "p", "namespace": 3}}) is None
    bad_refs = {"name": "p", "namespace": "ml", "ownerReferences": ["x", {"controller": True}]}
    assert dependent_of({"metadata": bad_refs}) is None


def test_deletions_keep_the_latest_of_each_workload_and_the_newest_workloads() -> None:
    deletions = Deletions(kept=2)
    deletions.record("ml/a", 5)
    deletions.record("ml/a", 3)  # a replay from an earlier point: older than known
    assert deletions.of("ml/a") == 5
    deletions.record("ml/b", 6)
    deletions.record("ml/a", 7)  # the newest again
    deletions.record("ml/c", 8)  # over the limit: the oldest, ml/b, goes
    assert (deletions.of("ml/a"), deletions.of("ml/b"), deletions.of("ml/c")) == (7, None, 8)
