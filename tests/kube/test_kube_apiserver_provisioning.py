"""The stand-in's kinds behind admission checks and Kubernetes Events, through the official
client: PodTemplates, the cluster-autoscaler's ProvisioningRequests, Kueue's
ProvisioningRequestConfigs, and events.k8s.io/v1 Events with their series."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kube_helpers import as_json, as_model, present, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException

AUTOSCALING = ("autoscaling.x-k8s.io", "v1")


def causes(err: ApiException) -> list[str]:
    return [c["field"] for c in status_of(err)["details"]["causes"]]


def posted(kube: client.ApiClient, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """POST `body` as it is (the typed API would refuse it before sending): status, answer."""
    method, url, headers, data, post = kube.param_serialize(
        "POST", path, header_params={"Content-Type": "application/json"}, body=body
    )
    answer = kube.call_api(method, url, headers, data, post)
    answered = answer.read()  # type: ignore[no-untyped-call]  # the client has no hints here
    return answer.status, json.loads(answered)


def template(name: str, *, containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec = {"containers": [{"name": "c", "image": "busybox"}] if containers is None else containers}
    return {"metadata": {"name": name}, "template": {"spec": spec}}


def request(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name},
        "spec": {
            "provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
            "podSets": [{"podTemplateRef": {"name": "ppt-1"}, "count": 4}],
            **spec,
        },
    }


def test_pod_templates_are_stored_and_need_containers(kube: client.ApiClient) -> None:
    core = client.CoreV1Api(kube)
    made = core.create_namespaced_pod_template(
        "default", as_model(client.V1PodTemplate, template("ppt-1"))
    )
    assert present(present(made.template).spec).containers[0].image == "busybox"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_template(
            "default", as_model(client.V1PodTemplate, template("bad", containers=[]))
        )
    assert err.value.status == 422
    assert causes(err.value) == ["template.spec.containers"]


def test_provisioning_requests_are_checked_and_their_spec_is_immutable(
    custom: client.CustomObjectsApi,
) -> None:
    made = as_json(
        custom.create_namespaced_custom_object(
            *AUTOSCALING, "default", "provisioningrequests", request("wl-prov-1")
        )
    )
    assert made["metadata"]["generation"] == 1
    bad = request("bad", podSets=[{"podTemplateRef": {}, "count": 0}])
    del bad["spec"]["provisioningClassName"]
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(*AUTOSCALING, "default", "provisioningrequests", bad)
    assert causes(err.value) == [
        "spec.podSets[0].podTemplateRef.name",
        "spec.podSets[0].count",
        "spec.provisioningClassName",
    ]
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            *AUTOSCALING, "default", "provisioningrequests", "wl-prov-1",
            {"spec": {"podSets": [{"podTemplateRef": {"name": "x"}, "count": 1}]}},
        )  # fmt: skip
    assert causes(err.value) == ["spec"]
    provisioned = {"type": "Provisioned", "status": "True", "reason": "Provisioned"}
    written = as_json(custom.patch_namespaced_custom_object_status(
        *AUTOSCALING, "default", "provisioningrequests", "wl-prov-1",
        {"status": {"conditions": [provisioned]}},
    ))  # fmt: skip
    assert written["status"]["conditions"] == [provisioned]


def test_provisioning_request_configs_are_kueue_objects_at_both_versions(
    custom: client.CustomObjectsApi,
) -> None:
    config = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ProvisioningRequestConfig",
        "metadata": {"name": "prc"},
        "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io"},
    }
    custom.create_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta1", "provisioningrequestconfigs", config
    )
    got = as_json(
        custom.get_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "provisioningrequestconfigs", "prc"
        )
    )
    assert got["spec"] == config["spec"]


def event(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "type": "Normal",
        "reason": "QuotaReserved",
        "action": "Reserve",
        "reportingController": "muster.dev/admission",
        "reportingInstance": "watcher-local",
        "note": "Quota reserved in ClusterQueue cq",
        "regarding": {"kind": "Workload", "namespace": "default", "name": "train", "uid": "u"},
        **fields,
    }


def test_events_are_checked_as_the_api_server_does_and_series_counted(
    kube: client.ApiClient,
) -> None:
    events = client.EventsV1Api(kube)
    events.create_namespaced_event("default", as_model(client.EventsV1Event, event("train.1")))
    bad = event(
        "train.2",
        type="Info",
        reportingController="",
        action="",
        note="x" * 1025,
        series={"count": 1},
        regarding={"kind": "Workload", "namespace": "other", "name": "train"},
    )
    del bad["eventTime"]
    code, answer = posted(kube, "/apis/events.k8s.io/v1/namespaces/default/events", bad)
    assert code == 422
    assert [c["field"] for c in answer["details"]["causes"]] == [
        "eventTime",
        "type",
        "reportingController",
        "action",
        "note",
        "series.count",
        "series.lastObservedTime",
        "regarding.namespace",
    ]
    series = {"count": 2, "lastObservedTime": "2026-01-01T00:00:09.000000Z"}
    patched = events.patch_namespaced_event("train.1", "default", {"series": series})
    assert present(patched.series).count == 2
    with pytest.raises(ApiException) as err:
        events.patch_namespaced_event("train.1", "default", {"reason": "Admitted"})
    assert causes(err.value) == ["reason"]
    listed = events.list_namespaced_event("default")
    assert [(present(e.metadata).name, e.reason) for e in listed.items] == [
        ("train.1", "QuotaReserved")
    ]


def test_events_are_served_as_core_v1_events_too_as_kubectl_describe_lists_them(
    kube: client.ApiClient,
) -> None:
    events = client.EventsV1Api(kube)
    core = client.CoreV1Api(kube)
    events.create_namespaced_event("default", as_model(client.EventsV1Event, event("train.1")))
    selector = "involvedObject.kind=Workload,involvedObject.name=train,involvedObject.uid=u"
    (seen,) = core.list_namespaced_event("default", field_selector=selector).items
    assert (seen.reason, seen.message, seen.type) == (
        "QuotaReserved",
        "Quota reserved in ClusterQueue cq",
        "Normal",
    )
    assert (seen.reporting_component, present(seen.source).component) == (
        "muster.dev/admission",
    ) * 2
    series = {"count": 3, "lastObservedTime": "2026-01-01T00:00:09.000000Z"}
    events.patch_namespaced_event("train.1", "default", {"series": series})
    assert present(core.read_namespaced_event("train.1", "default").series).count == 3
    events.delete_namespaced_event("train.1", "default")
    assert core.list_namespaced_event("default").items == []
