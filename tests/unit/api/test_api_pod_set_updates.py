"""A Ready check's podSetUpdates on a pod as the simulator makes it (`updated_pod`): over what
the template set, muster's own label and annotation kept, only the pod's own podset's."""

from __future__ import annotations

import msgspec
import pytest

from muster.api.model import ObjectMeta, Pod, Toleration
from muster.api.pod_set_updates import (
    PodMaps,
    PodSetUpdate,
    ready_updates,
    start_conflict,
    template_labels,
    updated_pod,
)

SPOT = Toleration(key="spot", operator="Exists", effect="NoSchedule")
POD = Pod(
    meta=ObjectMeta(
        name="train-main-0",
        namespace="ml",
        labels={"muster.dev/workload": "train"},
        annotations={"muster.dev/pod-set": "main", "keep": "me", "zone": "template"},
    ),
    node_selector={"pool": "batch"},
    tolerations=(SPOT,),
)


def test_a_ready_update_goes_over_the_template_and_keeps_musters_own() -> None:
    entries = [
        {
            "name": "prov",
            "state": "Ready",
            "podSetUpdates": [
                {
                    "name": "main",
                    "labels": {"team": "ml", "muster.dev/workload": "other"},
                    "annotations": {"zone": "a", "muster.dev/pod-set": "workers"},
                    "nodeSelector": {"zone": "a"},
                    "tolerations": [
                        {"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "gpu", "operator": "Exists"},
                    ],
                },
                {"name": "workers", "labels": {"not": "mine"}},
            ],
        },
        {
            "name": "other",
            "state": "Pending",
            "podSetUpdates": [{"name": "main", "labels": {"x": "y"}}],
        },
    ]
    pod = updated_pod(POD, ready_updates(entries))
    assert pod.meta.labels == {"muster.dev/workload": "train", "team": "ml"}
    assert pod.meta.annotations == {"muster.dev/pod-set": "main", "keep": "me", "zone": "a"}
    assert pod.node_selector == {"pool": "batch", "zone": "a"}
    assert pod.tolerations == (SPOT, Toleration(key="gpu", operator="Exists"))


def test_updates_of_another_podset_or_of_odd_shape_leave_the_pod_as_it_was() -> None:
    odd: list[object] = [
        None,
        "x",
        [None, 7, {"state": "Ready", "podSetUpdates": {"name": "main"}}],
        [{"state": "Ready", "podSetUpdates": [{"name": "workers", "labels": {"a": "b"}}]}],
        [
            {
                "state": "Ready",
                "podSetUpdates": [
                    {"name": "main", "labels": ["a"], "tolerations": [{"operator": "Sideways"}]}
                ],
            }
        ],
    ]
    for entries in odd:
        assert updated_pod(POD, ready_updates(entries)) == POD


def _ready(*updates: dict[str, object], check: str = "prov") -> list[PodSetUpdate]:
    return ready_updates([{"name": check, "state": "Ready", "podSetUpdates": list(updates)}])


TEMPLATE: PodMaps = ({"team": "ml"}, {"keep": "me"}, {"pool": "batch"})


@pytest.mark.parametrize(
    ("update", "words"),
    [
        (
            {"labels": {"muster.dev/workload": "other"}},
            "conflict for labels: conflict for key=muster.dev/workload, value1=train, value2=other",
        ),
        (
            {"annotations": {"muster.dev/pod-set": "workers"}},
            "conflict for annotations: conflict for key=muster.dev/pod-set, value1=main, "
            "value2=workers",
        ),
    ],
    ids=["muster's workload label", "muster's podset annotation"],
)
def test_an_update_over_musters_own_keys_conflicts_as_over_kueues_podset_label(
    update: dict[str, object], words: str
) -> None:
    """Kueue's pods carry its podset label before any update merges, so an update giving it
    another value fails the start; muster's pods carry its own label and annotation so."""
    conflict = start_conflict(
        {"main": TEMPLATE}, _ready({"name": "main", **update}), workload="train"
    )
    assert conflict == (
        f'in admission check "prov": invalid admission check PodSetUpdate: {words} (podset "main")'
    )
    same = {
        "labels": {"muster.dev/workload": "train"},
        "annotations": {"muster.dev/pod-set": "main"},
    }
    assert (
        start_conflict({"main": TEMPLATE}, _ready({"name": "main", **same}), workload="train")
        is None
    )


def test_tolerations_never_conflict_and_an_empty_operator_reads_as_equal() -> None:
    """Kueue's merge adds a toleration unless one Equal to it is there (tolerations.Equal: the
    API's empty operator is Equal); two of one key with other values are both kept."""
    updates = _ready(
        {
            "name": "main",
            "tolerations": [
                {"key": "pool", "operator": "", "value": "batch", "effect": "NoSchedule"},
                {"key": "pool", "value": "gpu", "effect": "NoSchedule"},
            ],
        }
    )
    batch = Toleration(key="pool", operator="Equal", value="batch", effect="NoSchedule")
    gpu = Toleration(key="pool", operator="Equal", value="gpu", effect="NoSchedule")
    assert updates[0].tolerations == (batch, gpu)
    assert start_conflict({"main": TEMPLATE}, updates, workload="train") is None
    pod = msgspec.structs.replace(POD, tolerations=(SPOT, batch))
    assert updated_pod(pod, updates).tolerations == (SPOT, batch, gpu)


def test_template_labels_are_read_from_a_job_a_jobset_or_a_workload_as_stored() -> None:
    labels = {"metadata": {"labels": {"team": "ml", "odd": 7}}}
    job = {"spec": {"template": labels}}
    jobset = {
        "spec": {
            "replicatedJobs": [
                {"name": "leader", "template": {"spec": {"template": labels}}},
                {"name": "workers", "template": "x"},
                "y",
            ]
        }
    }
    wl = {"spec": {"podSets": [{"name": "main", "template": labels}, {"name": "side"}]}}
    assert template_labels(job) == {"main": {"team": "ml"}}
    assert template_labels(jobset) == {"leader": {"team": "ml"}, "workers": {}}
    assert template_labels(wl) == {"main": {"team": "ml"}, "side": {}}
    for odd in (None, {}, {"spec": "x"}, {"spec": {"template": ["a"]}}):
        assert all(not v for v in template_labels(odd).values())
