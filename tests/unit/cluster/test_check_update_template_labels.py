"""A Ready check's podSetUpdate label against the labels of the pod template the pods are made
from (the Job's, a JobSet's replicatedJob's, a bare Workload's), as Kueue's start merges it
over the job's template: another value is Kueue's conflict (FailedToStart), nothing is made;
the same value is none."""

from __future__ import annotations

from typing import Any

import pytest

from muster.cluster.backend import PodSetStart
from muster.cluster.errors import PodSetUpdateConflictError
from muster.cluster.pod_set_updates import with_check_updates

TEMPLATE = {"metadata": {"labels": {"team": "ml"}}, "spec": {"containers": []}}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": TEMPLATE}}
JOBSET = {
    "spec": {"replicatedJobs": [{"name": "workers", "template": {"spec": {"template": TEMPLATE}}}]}
}


def checked(podset: str, labels: dict[str, str], **workload: Any) -> dict[str, Any]:
    """A Kueue Workload whose check `prov` is Ready, asking podset `podset` for `labels`."""
    update = {"name": podset, "labels": labels}
    entry = {"name": "prov", "state": "Ready", "podSetUpdates": [update]}
    return {**workload, "status": {"admissionChecks": [entry]}}


def start(name: str) -> PodSetStart:
    return PodSetStart(name=name, count=1, requests={"cpu": 1000})


@pytest.mark.parametrize(
    ("podset", "workload", "owner"),
    [
        ("main", {}, JOB),
        ("workers", {}, JOBSET),
        ("main", {"spec": {"podSets": [{"name": "main", "template": TEMPLATE}]}}, None),
    ],
    ids=["a Job's template", "a JobSet's replicatedJob", "a bare Workload's podset"],
)
def test_a_label_other_than_the_templates_fails_the_start(
    podset: str, workload: dict[str, Any], owner: dict[str, Any] | None
) -> None:
    with pytest.raises(PodSetUpdateConflictError) as raised:
        with_check_updates(
            [start(podset)],
            checked(podset, {"team": "infra"}, **workload),
            what="ml/wl",
            owner=owner,
        )
    assert str(raised.value) == (
        'Workload/ml/wl: in admission check "prov": invalid admission check PodSetUpdate: '
        f'conflict for labels: conflict for key=team, value1=ml, value2=infra (podset "{podset}")'
    )
    assert raised.value.reason == "FailedToStart"
    # The template's own value again is no conflict; a new key goes on.
    (started,) = with_check_updates(
        [start(podset)],
        checked(podset, {"team": "ml", "zone": "a"}, **workload),
        what="ml/wl",
        owner=owner,
    )
    assert started.labels == {"team": "ml", "zone": "a"}


def test_the_label_musters_own_gives_its_pods_is_the_pods() -> None:
    """`muster.dev/workload` names the workload on every pod it starts (Kueue's podset label)."""
    with pytest.raises(PodSetUpdateConflictError) as raised:
        with_check_updates(
            [start("main")], checked("main", {"muster.dev/workload": "x"}), what="ml/wl", owner=JOB
        )
    assert "key=muster.dev/workload, value1=wl, value2=x" in str(raised.value)
