"""binder.translate: an admitted workload's pods from its spec, admission and flavor hints."""

from __future__ import annotations

import json
from typing import Any

import pytest

from muster.api.model import Toleration
from muster.binder.translate import AdmissionMismatchError, pod_set_starts, workload_from_submitted
from muster.contracts.v1 import events_pb2
from muster.payloads import PayloadError


def submitted(
    *, annotations: dict[str, str] | None = None, pod_annotations: dict[str, str] | None = None
) -> events_pb2.WorkloadSubmitted:
    template: dict[str, Any] = {
        "spec": {
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"}}}
            ],
            "nodeSelector": {"pool": "train"},
            "tolerations": [{"key": "spot", "operator": "Exists"}],
        }
    }
    if pod_annotations:
        template["metadata"] = {"annotations": pod_annotations}
    manifest = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"podSets": [{"name": "workers", "count": 4, "minCount": 2, "template": template}]},
    }
    return events_pb2.WorkloadSubmitted(manifest_json=json.dumps(manifest))


def admitted(count: int = 3, *, pod_set: str = "workers") -> events_pb2.WorkloadAdmitted:
    assignment = events_pb2.PodSetAssignment(
        name=pod_set, count=count, flavors={"nvidia.com/gpu": "a100"}
    )
    hint = events_pb2.PodSetPlacementHints(
        name=pod_set,
        node_selector={"gpu": "a100"},
        tolerations=[
            events_pb2.Toleration(key="gpu", operator="Equal", value="a100", effect="NoSchedule")
        ],
    )
    return events_pb2.WorkloadAdmitted(
        admission=events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment]),
        hints=[hint],
    )


def test_pods_take_the_admitted_count_the_podset_requests_and_the_flavor_hints() -> None:
    wl = workload_from_submitted(
        submitted(annotations={"muster.dev/run-seconds": "30"}), what="ns/w"
    )
    assert wl is not None
    [start] = pod_set_starts(wl, admitted(3))
    assert (start.name, start.count) == ("workers", 3)
    assert start.requests == {"cpu": 1000, "nvidia.com/gpu": 2000}
    assert start.node_selector == {"pool": "train", "gpu": "a100"}
    assert start.tolerations == (
        Toleration(key="spot", operator="Exists"),
        Toleration(key="gpu", operator="Equal", value="a100", effect="NoSchedule"),
    )
    assert start.annotations == {"muster.dev/run-seconds": "30"}


def test_the_pod_templates_run_seconds_wins_over_the_workloads() -> None:
    payload = submitted(
        annotations={"muster.dev/run-seconds": "30"},
        pod_annotations={"muster.dev/run-seconds": "5"},
    )
    wl = workload_from_submitted(payload, what="ns/w")
    assert wl is not None
    [start] = pod_set_starts(wl, admitted())
    assert start.annotations["muster.dev/run-seconds"] == "5"


def test_an_admission_naming_an_unknown_podset_is_refused() -> None:
    wl = workload_from_submitted(submitted(), what="ns/w")
    assert wl is not None
    with pytest.raises(AdmissionMismatchError, match="podset 'driver'"):
        pod_set_starts(wl, admitted(pod_set="driver"))


def test_an_admission_the_workload_cannot_hold_is_refused_naming_it() -> None:
    # As a client holding admission's permissions could publish them: each was made (2^31
    # pods) or raised a bare "exponent out of range" naming no workload.
    wl = workload_from_submitted(submitted(), what="ns/w")
    assert wl is not None
    routed = admitted()
    routed.hints[0].requests["cpu"] = "1e400"

    with pytest.raises(AdmissionMismatchError, match=r"admitted with 2147483647 pods, outside"):
        pod_set_starts(wl, admitted(2**31 - 1))
    with pytest.raises(AdmissionMismatchError, match=r"admitted with -1 pods, outside"):
        pod_set_starts(wl, admitted(-1))
    with pytest.raises(AdmissionMismatchError, match=r"podset 'workers': routed requests: "):
        pod_set_starts(wl, routed)


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        ("not json", "manifest is not JSON"),
        ("{}", "apiVersion: is required"),
        (json.dumps({"kind": "Workload"}), "apiVersion: is required"),
        ("[" * 100_000, "manifest is not JSON"),  # deeper than Python recurses
    ],
)
def test_an_undecodable_manifest_is_an_error_naming_the_workload(
    manifest: str, problem: str
) -> None:
    with pytest.raises(PayloadError, match=f"ns/w.*{problem}") as caught:
        workload_from_submitted(events_pb2.WorkloadSubmitted(manifest_json=manifest), what="ns/w")
    assert str(caught.value).startswith("ns/w")
