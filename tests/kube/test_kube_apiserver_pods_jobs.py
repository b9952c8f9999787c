"""Pods, Jobs and PriorityClasses as the real server treats them: pods/binding, pod spec
immutability, admission defaults, and the Job template rules Kueue relies on."""

from __future__ import annotations

import pytest
from kube_helpers import api_client, as_model, http_response, job, node, pod, present, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from muster.devtools.apiserver import ApiServer, FeatureGates, ThreadedApiServer


def _bind(core: client.CoreV1Api, name: str, node: str) -> int:
    """POST pods/{name}/binding; the HTTP status. The server answers a Status, which the
    client cannot read as the V1Binding it declares, so the raw response is used."""
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name=name),
        target=client.V1ObjectReference(kind="Node", name=node),
    )
    response = http_response(
        core.create_namespaced_pod_binding(name, "default", binding, _preload_content=False)
    )
    return int(response.status)


def test_binding_sets_node_name_and_the_scheduled_condition(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod(
        "default", as_model(client.V1Pod, pod("p", scheduler="muster"))
    )
    assert _bind(core, "p", "node-1") == 201
    bound = core.read_namespaced_pod("p", "default")
    assert present(bound.spec).node_name == "node-1"
    assert [(c.type, c.status) for c in present(present(bound.status).conditions)] == [
        ("PodScheduled", "True")
    ]
    assert int(present(present(bound.metadata).resource_version)) > int(
        present(present(created.metadata).resource_version)
    )


def test_binding_answers_a_status_the_client_cannot_deserialize(core: client.CoreV1Api) -> None:
    """As against a real server: callers must pass `_preload_content=False`."""
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(name="node-1")
    )
    with pytest.raises(ValueError, match="target"):  # pydantic's ValidationError in client 37+
        core.create_namespaced_pod_binding("p", "default", binding)
    assert present(core.read_namespaced_pod("p", "default").spec).node_name == "node-1"


def test_binding_a_bound_pod_is_409_conflict(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    _bind(core, "p", "node-1")
    with pytest.raises(ApiException) as caught:
        _bind(core, "p", "node-2")
    status = status_of(caught.value)
    assert caught.value.status == 409
    assert status["reason"] == "Conflict"
    assert 'already assigned to node "node-1"' in status["message"]
    assert present(core.read_namespaced_pod("p", "default").spec).node_name == "node-1"


def test_binding_a_gated_pod_is_409_until_its_gates_are_removed(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        "default", as_model(client.V1Pod, pod("p", gates=("muster.dev/gang",)))
    )
    with pytest.raises(ApiException) as caught:
        _bind(core, "p", "node-1")
    assert caught.value.status == 409
    core.patch_namespaced_pod(
        "p",
        "default",
        {"spec": {"schedulingGates": None}},
        _content_type="application/merge-patch+json",
    )
    assert _bind(core, "p", "node-1") == 201


def test_a_pod_created_on_its_node_is_taken_unless_it_is_gated(core: client.CoreV1Api) -> None:
    """What the binder does for a bare Kueue Workload's placed pods: one create, no Binding."""
    created = core.create_namespaced_pod(
        "default", as_model(client.V1Pod, pod("p", node="node-1", scheduler="muster"))
    )
    assert present(created.spec).node_name == "node-1"
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(
            "default", as_model(client.V1Pod, pod("g", node="node-1", gates=("muster.dev/x",)))
        )
    assert caught.value.status == 422
    cause = status_of(caught.value)["details"]["causes"][0]
    assert (cause["field"], cause["reason"]) == ("spec.nodeName", "FieldValueForbidden")
    assert "schedulingGates" in cause["message"]


def test_binding_a_missing_pod_is_404(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        _bind(core, "ghost", "node-1")
    assert caught.value.status == 404


def test_node_name_changes_only_through_binding(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("p", "default", {"spec": {"nodeName": "node-1"}})
    assert caught.value.status == 422
    assert status_of(caught.value)["details"]["causes"][0]["field"] == "spec.nodeName"


def test_a_pod_spec_is_immutable_except_images_tolerations_and_gate_removal(
    core: client.CoreV1Api,
) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p", gates=("a", "b"))))
    core.patch_namespaced_pod(
        "p", "default", {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}
    )
    core.patch_namespaced_pod("p", "default", [{"op": "remove", "path": "/spec/schedulingGates/0"}])
    current = core.read_namespaced_pod("p", "default")
    assert [g.name for g in present(present(current.spec).scheduling_gates)] == ["b"]
    for change in (
        [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "c"}}],
        [{"op": "replace", "path": "/spec/restartPolicy", "value": "Never"}],
    ):
        with pytest.raises(ApiException) as caught:
            core.patch_namespaced_pod("p", "default", change)
        assert caught.value.status == 422


def test_pods_get_the_servers_defaults_and_admission(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    spec = present(created.spec)
    assert spec.scheduler_name == "default-scheduler"
    assert spec.restart_policy == "Always"
    assert spec.priority == 0
    assert {t.key for t in present(spec.tolerations)} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
    assert present(created.status).phase == "Pending"


def test_pod_priority_comes_from_its_priority_class(
    core: client.CoreV1Api, kube: client.ApiClient
) -> None:
    scheduling = client.SchedulingV1Api(kube)
    scheduling.create_priority_class(
        as_model(client.V1PriorityClass, {"metadata": {"name": "high"}, "value": 1000})
    )
    assert (
        present(
            core.create_namespaced_pod(
                "default", as_model(client.V1Pod, pod("p", priority_class="high"))
            ).spec
        ).priority
        == 1000
    )
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(
            "default", as_model(client.V1Pod, pod("q", priority_class="missing"))
        )
    assert caught.value.status == 403
    with pytest.raises(ApiException) as immutable:
        scheduling.patch_priority_class("high", {"value": 1})
    assert immutable.value.status == 422


def test_a_job_gets_its_selector_labels_and_defaults(batch: client.BatchV1Api) -> None:
    created = batch.create_namespaced_job(
        "default", as_model(client.V1Job, job("train", queue="lq-team-a"))
    )
    uid = present(created.metadata).uid
    assert present(present(created.spec).selector).match_labels == {
        "batch.kubernetes.io/controller-uid": uid
    }
    labels = present(present(present(created.spec).template.metadata).labels)
    assert labels["batch.kubernetes.io/job-name"] == "train"
    assert labels["controller-uid"] == uid
    assert (present(created.spec).backoff_limit, present(created.spec).completion_mode) == (
        6,
        "NonIndexed",
    )
    assert present(created.spec).suspend is True


def test_a_job_needs_a_never_or_on_failure_restart_policy(batch: client.BatchV1Api) -> None:
    body = job("train")
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(ApiException) as caught:
        batch.create_namespaced_job("default", as_model(client.V1Job, body))
    assert caught.value.status == 422
    assert (
        status_of(caught.value)["details"]["causes"][0]["field"]
        == "spec.template.spec.restartPolicy"
    )


def test_a_suspended_job_that_never_started_takes_node_selector_and_tolerations(
    batch: client.BatchV1Api,
) -> None:
    batch.create_namespaced_job("default", as_model(client.V1Job, job("train", suspend=True)))
    admitted = batch.patch_namespaced_job(
        "train",
        "default",
        {
            "spec": {
                "suspend": False,
                "template": {
                    "metadata": {"labels": {"kueue.x-k8s.io/podset": "main"}},
                    "spec": {
                        "nodeSelector": {"cloud.provider.com/type": "spot"},
                        "tolerations": [
                            {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
                        ],
                    },
                },
            }
        },
    )
    assert present(admitted.spec).suspend is False
    assert present(present(admitted.spec).template.spec).node_selector == {
        "cloud.provider.com/type": "spot"
    }


def test_a_running_jobs_template_is_immutable(batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job("default", as_model(client.V1Job, job("train", suspend=False)))
    with pytest.raises(ApiException) as caught:
        batch.patch_namespaced_job(
            "train", "default", {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}}
        )
    assert caught.value.status == 422
    assert status_of(caught.value)["details"]["causes"][0]["field"] == "spec.template"


def test_a_started_job_keeps_its_template_even_when_suspended_again(
    batch: client.BatchV1Api,
) -> None:
    batch.create_namespaced_job("default", as_model(client.V1Job, job("train", suspend=False)))
    batch.patch_namespaced_job_status(
        "train", "default", {"status": {"startTime": "2025-01-01T00:00:00Z"}}
    )
    batch.patch_namespaced_job("train", "default", {"spec": {"suspend": True}})
    with pytest.raises(ApiException) as caught:
        batch.patch_namespaced_job(
            "train", "default", {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}}
        )
    assert caught.value.status == 422
    batch.patch_namespaced_job_status("train", "default", {"status": {"startTime": None}})
    batch.patch_namespaced_job(
        "train", "default", {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}}
    )


RESIZED = {
    "spec": {
        "suspend": False,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "4"}},
                    }
                ]
            }
        },
    }
}


def test_a_suspended_jobs_resources_change_in_the_write_that_unsuspends_it(
    batch: client.BatchV1Api,
) -> None:
    """KEP-5440 (v1.36): requests and limits are mutable while the old Job is suspended."""
    batch.create_namespaced_job("default", as_model(client.V1Job, job("train", suspend=True)))
    started = batch.patch_namespaced_job("train", "default", RESIZED)
    assert present(
        present(present(started.spec).template.spec).containers[0].resources
    ).requests == {"cpu": "4"}
    with pytest.raises(ApiException) as caught:  # running: immutable again
        batch.patch_namespaced_job(
            "train",
            "default",
            RESIZED
            | {
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "main", "resources": {"requests": {"cpu": "1"}}}
                            ]
                        }
                    }
                }
            },
        )
    assert caught.value.status == 422


def test_a_suspended_jobs_resources_wait_for_its_active_pods_to_stop(
    batch: client.BatchV1Api,
) -> None:
    batch.create_namespaced_job("default", as_model(client.V1Job, job("train", suspend=True)))
    batch.patch_namespaced_job_status("train", "default", {"status": {"active": 3}})
    with pytest.raises(ApiException) as caught:
        batch.patch_namespaced_job("train", "default", RESIZED)
    assert caught.value.status == 422
    batch.patch_namespaced_job_status("train", "default", {"status": {"active": 0}})
    batch.patch_namespaced_job("train", "default", RESIZED)


def test_an_older_cluster_refuses_to_change_a_suspended_jobs_resources() -> None:
    gates = FeatureGates(mutable_pod_resources_for_suspended_jobs=False)
    with ThreadedApiServer(ApiServer(gates=gates)) as server:
        api = api_client(server.url)
        batch = client.BatchV1Api(api)
        batch.create_namespaced_job("default", as_model(client.V1Job, job("train", suspend=True)))
        with pytest.raises(ApiException) as caught:
            batch.patch_namespaced_job("train", "default", RESIZED)
        assert caught.value.status == 422
        assert status_of(caught.value)["details"]["causes"][0]["field"] == "spec.template"
        node_only = {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}}
        batch.patch_namespaced_job("train", "default", node_only)  # scheduling directives may
        api.close()  # type: ignore[no-untyped-call]  # the client has no hints here


def test_nodes_keep_the_status_they_are_created_with(core: client.CoreV1Api) -> None:
    created = core.create_node(
        as_model(client.V1Node, node("node-1", labels={"zone": "a"}, cpu="16"))
    )
    assert present(created.status).capacity == {"cpu": "16"}
    cordoned = core.patch_node("node-1", {"spec": {"unschedulable": True}})
    assert present(cordoned.spec).unschedulable is True
    listed = core.list_node(field_selector="spec.unschedulable=false")
    assert listed.items == []
