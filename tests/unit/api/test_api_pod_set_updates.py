"""A Ready check's podSetUpdates on a pod as the simulator makes it (`updated_pod`): over what
the template set, muster's own label and annotation kept, only the pod's own podset's."""

from __future__ import annotations

from muster.api.model import ObjectMeta, Pod, Toleration
from muster.api.pod_set_updates import ready_updates, updated_pod

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
