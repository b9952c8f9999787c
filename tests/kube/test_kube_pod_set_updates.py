"""A Ready check's podSetUpdates merged into how a workload's pods start, whatever shape the
Workload's status has (a controller's writes are input like any other)."""

from __future__ import annotations

from typing import Any

import pytest

from muster.api.model import Toleration
from muster.cluster.backend import PodSetStart
from muster.cluster.errors import PodSetUpdateConflictError
from muster.cluster.pod_set_updates import with_check_updates

MAIN = PodSetStart(
    name="main",
    count=2,
    requests={"cpu": 1000},
    node_selector={"pool": "batch"},
    annotations={"keep": "me"},
)


def workload(*entries: Any) -> dict[str, Any]:
    return {"status": {"admissionChecks": list(entries)}}


def test_ready_checks_add_labels_annotations_node_selector_and_tolerations() -> None:
    update = {
        "name": "main",
        "labels": {"team": "ml"},
        "annotations": {"autoscaling.x-k8s.io/consume-provisioning-request": "wl-prov-1"},
        "nodeSelector": {"zone": "a"},
        "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    }
    other = {"name": "workers", "labels": {"not": "mine"}}
    (started,) = with_check_updates(
        [MAIN], workload({"name": "prov", "state": "Ready", "podSetUpdates": [update, other]})
    )
    assert started.labels == {"team": "ml"}
    assert started.annotations == {
        "keep": "me",
        "autoscaling.x-k8s.io/consume-provisioning-request": "wl-prov-1",
    }
    assert started.node_selector == {"pool": "batch", "zone": "a"}
    assert started.tolerations == (Toleration(key="spot", operator="Exists", effect="NoSchedule"),)


def test_only_ready_answers_count() -> None:
    update = [{"name": "main", "labels": {"x": "y"}}]
    for state in ("Pending", "Retry", "Rejected"):
        entry = {"name": "prov", "state": state, "podSetUpdates": update}
        assert with_check_updates([MAIN], workload(entry)) == [MAIN]


def test_odd_shapes_are_left_out_not_raised() -> None:
    odd: list[Any] = [
        None,
        {"status": None},
        {"status": {"admissionChecks": "x"}},
        workload(None, 7, {"state": "Ready", "podSetUpdates": {"name": "main"}}),
        workload(
            {
                "state": "Ready",
                "podSetUpdates": [
                    {"name": "main", "labels": ["a"], "nodeSelector": {"k": 1}},
                    {"name": "main", "tolerations": [{"operator": "Sideways"}, "x", None]},
                ],
            }
        ),
    ]
    for obj in odd:
        assert with_check_updates([MAIN], obj) == [MAIN]


def test_a_value_the_pods_have_repeated_is_no_conflict() -> None:
    update = {"name": "main", "nodeSelector": {"pool": "batch"}, "annotations": {"keep": "me"}}
    entry = {"name": "prov", "state": "Ready", "podSetUpdates": [update]}
    assert with_check_updates([MAIN], workload(entry), what="ml/wl") == [MAIN]


@pytest.mark.parametrize(
    ("entries", "words"),
    [
        (
            [{"nodeSelector": {"pool": "gpu"}}],
            'in admission check "c0": invalid admission check PodSetUpdate: conflict for '
            "nodeSelector: conflict for key=pool, value1=batch, value2=gpu",
        ),
        (
            [{"annotations": {"keep": "not"}}],
            'in admission check "c0": invalid admission check PodSetUpdate: conflict for '
            "annotations: conflict for key=keep, value1=me, value2=not",
        ),
        # a second check against what the first set (Kueue merges the checks' updates in turn)
        (
            [{"labels": {"team": "a"}}, {"labels": {"team": "b"}}],
            'in admission check "c1": invalid admission check PodSetUpdate: conflict for '
            "labels: conflict for key=team, value1=a, value2=b",
        ),
    ],
    ids=["nodeSelector over the template", "annotation over the template", "two checks"],
)
def test_a_value_other_than_the_pods_is_kueues_conflict(
    entries: list[dict[str, Any]], words: str
) -> None:
    """Kueue's job framework fails such a workload at start (FailedToStart); nothing is made."""
    checks = [
        {"name": f"c{i}", "state": "Ready", "podSetUpdates": [{"name": "main", **e}]}
        for i, e in enumerate(entries)
    ]
    with pytest.raises(PodSetUpdateConflictError) as raised:
        with_check_updates([MAIN], workload(*checks), what="ml/wl")
    assert str(raised.value) == f'Workload/ml/wl: {words} (podset "main")'
