"""The ProvisioningRequest check's rules (`muster.checks.provisioning`), one workload at a time:
which requests and templates it makes, and how each request condition answers the check."""

from __future__ import annotations

from typing import Any

import pytest

from muster.api.check_states import format_time
from muster.checks.framework import Inputs, Plan
from muster.checks.provisioning import (
    INACTIVE,
    NOT_NEEDED,
    ProvisioningController,
    request_name,
    retry_strategy,
)

T0 = 1_767_225_600.0
CONTROLLER = ProvisioningController()
CONFIG = {
    "spec": {
        "provisioningClassName": "queued-provisioning.gke.io",
        "parameters": {"maxRunDurationSeconds": "600"},
        "managedResources": ["nvidia.com/gpu"],
        "retryStrategy": {"backoffLimitCount": 2, "backoffBaseSeconds": 10},
        "podSetUpdates": {
            "nodeSelector": [{"key": "zone", "valueFromProvisioningClassDetail": "z"}]
        },
    }
}
FLAVOR = {"spec": {"nodeLabels": {"pool": "a100"}, "tolerations": [{"key": "gpu"}]}}


def workload(
    *conditions: str, check: dict[str, Any] | None = None, gpu: bool = True, **meta: Any
) -> dict[str, Any]:
    resources = (
        {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}} if gpu else {"requests": {"cpu": "1"}}
    )
    container = {"name": "c", "image": "trainer", "resources": resources}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml", "uid": "wl-uid", **meta},
        "spec": {
            "podSets": [
                {"name": "workers", "count": 4, "template": {"spec": {"containers": [container]}}},
                {"name": "empty", "count": 0, "template": {"spec": {"containers": [container]}}},
            ]
        },
        "status": {
            "conditions": [{"type": c, "status": "True"} for c in conditions],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": "workers", "flavors": {"nvidia.com/gpu": "a100"}, "count": 3}
                ],
            },
            "admissionChecks": [check or {"name": "prov", "state": "Pending"}],
        },
    }


def provreq(attempt: int, *conditions: tuple[str, str], details: Any = None) -> dict[str, Any]:
    name = request_name("train", "prov", attempt)
    return {
        "metadata": {"name": name},
        "spec": {
            "provisioningClassName": "queued-provisioning.gke.io",
            "parameters": {"maxRunDurationSeconds": "600"},
            "podSets": [{"podTemplateRef": {"name": f"ppt-{name}-workers"}, "count": 3}],
        },
        "status": {
            "conditions": [
                {"type": t, "status": "True", "message": m} for t, m in conditions
            ],
            "provisioningClassDetails": details or {},
        },
    }  # fmt: skip


def plan(
    wl: dict[str, Any],
    *owned: dict[str, Any],
    config: dict[str, Any] | None = CONFIG,
    now_s: float = T0,
) -> Plan:
    inputs = Inputs(
        workload=wl, checks={"prov": config}, owned=owned, flavors={"a100": FLAVOR}, now_s=now_s
    )
    return CONTROLLER.reconcile(inputs)


def test_nothing_is_done_before_quota_is_reserved() -> None:
    assert plan(workload()).empty


def test_a_reserved_workload_gets_a_template_per_podset_and_a_request() -> None:
    made = plan(workload("QuotaReserved", annotations={"provreq.kueue.x-k8s.io/ValidUntil": "9"}))
    template, request = (c.manifest for c in made.create)
    assert template["metadata"]["name"] == "ppt-train-prov-1-workers"
    spec = template["template"]["spec"]
    assert spec["nodeSelector"] == {"pool": "a100"}  # the flavor's, as its pods get them
    assert spec["tolerations"] == [{"key": "gpu"}]
    assert spec["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1", "cpu": "2"}
    assert request["metadata"]["name"] == "train-prov-1"
    assert request["metadata"]["ownerReferences"][0]["uid"] == "wl-uid"
    assert request["spec"] == {
        "provisioningClassName": "queued-provisioning.gke.io",
        "parameters": {"maxRunDurationSeconds": "600", "ValidUntil": "9"},
        "podSets": [{"podTemplateRef": {"name": "ppt-train-prov-1-workers"}, "count": 3}],
    }
    assert [name for _, name in made.create[-1].adopts] == ["ppt-train-prov-1-workers"]
    assert [n.reason for n in made.notes] == ["ProvisioningRequestCreated"]
    assert not made.answers


def test_a_missing_config_is_pending_and_unmanaged_resources_need_no_request() -> None:
    assert plan(workload("QuotaReserved"), config=None).answers["prov"].message == INACTIVE
    ready = plan(workload("QuotaReserved", gpu=False)).answers["prov"]
    assert (ready.state, ready.message) == ("Ready", NOT_NEEDED)


def test_provisioned_is_ready_with_what_the_pods_need_to_consume_it() -> None:
    made = plan(
        workload("QuotaReserved"),
        provreq(1, ("Accepted", ""), ("Provisioned", "ready in zone b"), details={"z": "b"}),
    )
    answer = made.answers["prov"]
    assert (answer.state, answer.message) == ("Ready", "ready in zone b")
    assert answer.fields["podSetUpdates"] == [
        {
            "name": "workers",
            "annotations": {
                "autoscaling.x-k8s.io/consume-provisioning-request": "train-prov-1",
                "autoscaling.x-k8s.io/provisioning-class-name": "queued-provisioning.gke.io",
            },
            "nodeSelector": {"zone": "b"},
        }
    ]
    assert not made.create
    assert not made.delete


def test_accepted_waits_with_the_eta() -> None:
    request = provreq(1, ("Accepted", ""))
    request["status"]["conditions"].append(
        {"type": "Provisioned", "status": "False", "message": "ETA 5m"}
    )
    answer = plan(workload("QuotaReserved"), request).answers["prov"]
    assert (answer.state, answer.message) == ("Pending", "ETA 5m")


def test_a_failure_retries_with_back_off_and_the_last_attempt_rejects() -> None:
    failed = provreq(1, ("Failed", "out of stock"))
    answer = plan(workload("QuotaReserved"), failed).answers["prov"]
    assert (answer.state, answer.message) == ("Retry", "Retrying after failure: out of stock")
    assert answer.fields == {"requeueAfterSeconds": 10}
    # After the eviction muster reset the check (one retry counted): the next attempt waits
    # out the back-off, then is made.
    reset = {
        "name": "prov",
        "state": "Pending",
        "retryCount": 1,
        "requeueAfterSeconds": 10,
        "lastTransitionTime": format_time(T0),
    }
    early = plan(workload("QuotaReserved", check=reset), failed, now_s=T0 + 4)
    assert not early.create
    assert early.recheck_after_s == 6
    later = plan(workload("QuotaReserved", check=reset), failed, now_s=T0 + 10)
    assert later.create[-1].manifest["metadata"]["name"] == "train-prov-2"
    last = plan(workload("QuotaReserved", check=reset), provreq(3, ("Failed", "no")))
    assert (last.answers["prov"].state, last.answers["prov"].message) == ("Rejected", "no")


@pytest.mark.parametrize(
    ("conditions", "admitted", "state"),
    [
        ((("CapacityRevoked", "nodes gone"),), True, "Rejected"),
        ((("Provisioned", ""), ("BookingExpired", "")), True, None),  # served: no change
        ((("BookingExpired", "late"),), False, "Retry"),
    ],
)
def test_revoked_capacity_rejects_and_an_expired_booking_matters_before_admission(
    conditions: tuple[tuple[str, str], ...], admitted: bool, state: str | None
) -> None:
    ready = {"name": "prov", "state": "Ready", "lastTransitionTime": format_time(T0)}
    wl = workload("QuotaReserved", *(["Admitted"] if admitted else []), check=ready)
    made = plan(wl, provreq(1, *conditions))
    assert (made.answers["prov"].state if made.answers else None) == state


@pytest.mark.parametrize("condition", ["Evicted", "Finished"])
def test_an_evicted_or_finished_workloads_requests_are_deleted(condition: str) -> None:
    made = plan(workload("QuotaReserved", condition), provreq(1), provreq(2))
    assert [name for _, name in made.delete] == ["train-prov-1", "train-prov-2"]
    assert not made.create


def test_a_request_made_with_another_config_is_replaced() -> None:
    stale = provreq(1)
    stale["spec"]["provisioningClassName"] = "old-class"
    made = plan(workload("QuotaReserved"), stale)
    assert [name for _, name in made.delete] == ["train-prov-1"]
    assert made.create[-1].manifest["metadata"]["name"] == "train-prov-1"


def test_names_stay_object_names_and_defaults_are_kueues() -> None:
    long = request_name("w" * 260, "prov", 1)
    assert len(long) == 253
    assert long != request_name("w" * 261, "prov", 1)
    assert retry_strategy({}) == (3, 60, 1800)
    assert retry_strategy({}).backoff_s(7) == 1800
