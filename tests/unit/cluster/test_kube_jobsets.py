"""Starting and stopping a JobSet on Kubernetes (`cluster.kube.jobsets`), as Kueue's JobSet
integration does: unsuspended with each admitted podset's placement in the replicatedJob of its
name, suspended with every template as its owner wrote it."""

from __future__ import annotations

import copy
from typing import Any

from muster.api.model import Toleration
from muster.cluster.backend import PodSetStart
from muster.cluster.kube import jobsets

GPU = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


def written() -> dict[str, Any]:
    def replicated(name: str, selector: dict[str, str] | None) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
        if selector:
            spec["nodeSelector"] = selector
        return {"name": name, "template": {"spec": {"template": {"spec": spec}}}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "ml", "uid": "u"},
        "spec": {
            "suspend": True,
            "replicatedJobs": [replicated("driver", {"disk": "ssd"}), replicated("workers", None)],
        },
    }


def templates(js: dict[str, Any]) -> list[dict[str, Any]]:
    return [rj["template"]["spec"]["template"] for rj in js["spec"]["replicatedJobs"]]


POD_SETS = [
    PodSetStart(
        name="workers", count=4, requests={}, node_selector={"pool": "gpu"}, tolerations=(GPU,)
    ),
    PodSetStart(name="driver", count=1, requests={}, node_selector={"pool": "cpu"}),
]


def test_start_unsuspends_with_each_podsets_placement_in_its_replicated_job() -> None:
    started = jobsets.started_jobset(
        written(), POD_SETS, workload="jobset-train-1a2b3", admission=7
    )

    assert started is not None
    assert started["spec"]["suspend"] is False
    driver, workers = templates(started)
    assert driver["spec"]["nodeSelector"] == {"disk": "ssd", "pool": "cpu"}
    assert workers["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert workers["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert workers["metadata"]["labels"] == {
        "muster.dev/workload": "jobset-train-1a2b3",
        "muster.dev/admission": "7",
    }
    assert workers["metadata"]["annotations"]["muster.dev/pod-set"] == "workers"
    assert jobsets.admission_of_jobset(started) == 7
    assert jobsets.started_jobset(started, POD_SETS, workload="jobset-train-1a2b3") is None


def test_stop_suspends_with_the_templates_as_written_and_reads_as_written() -> None:
    original = written()
    started = jobsets.started_jobset(copy.deepcopy(original), POD_SETS, workload="w", admission=1)
    assert started is not None

    assert jobsets.as_written(started) == {
        **original,
        "spec": {**original["spec"], "suspend": False},
    }
    stopped = jobsets.suspended_jobset(started)
    assert stopped == original
    assert jobsets.admission_of_jobset(stopped) == 0
    assert jobsets.suspended_jobset(stopped) is None


def test_a_start_retried_keeps_the_first_original() -> None:
    started = jobsets.started_jobset(written(), POD_SETS, workload="w", admission=1)
    assert started is not None
    started["spec"]["suspend"] = True  # suspended by hand before muster stopped it
    again = jobsets.started_jobset(started, POD_SETS, workload="w", admission=2)
    assert again is not None

    assert jobsets.suspended_jobset(again) == written()
