"""The stand-in's LimitRanger, as the real API server's: a new pod gets its namespace's
LimitRange defaults (limits first taken as missing requests), and a pod outside their bounds is
refused with 403 Forbidden in Kubernetes' words."""

from __future__ import annotations

from typing import Any

import pytest
from kube_helpers import as_model, present, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException


def _limit_range(name: str, *limits: dict[str, Any]) -> client.V1LimitRange:
    doc = {"metadata": {"name": name}, "spec": {"limits": list(limits)}}
    return as_model(client.V1LimitRange, doc)


def _pod(name: str, *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> Any:
    spec: dict[str, Any] = {
        "containers": [{"image": "busybox:1.36", **c} for c in containers],
        "initContainers": [{"image": "busybox:1.36", **c} for c in init],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _resources(pod: client.V1Pod) -> list[tuple[dict[str, str] | None, dict[str, str] | None]]:
    spec = present(pod.spec)
    return [
        (c.resources.requests, c.resources.limits)
        for c in (*(spec.init_containers or []), *spec.containers)
        if c.resources is not None
    ]


def test_a_limit_range_is_stored_with_its_container_defaults(core: client.CoreV1Api) -> None:
    core.create_namespaced_limit_range(
        "default",
        _limit_range("sizes", {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1Gi"}}),
    )
    (item,) = present(core.read_namespaced_limit_range("sizes", "default").spec).limits
    assert item.default == {"cpu": "2"}  # the max
    assert item.default_request == {"cpu": "2", "memory": "1Gi"}  # the default, else the min


def test_a_new_pod_gets_the_defaults_its_containers_leave_unset(core: client.CoreV1Api) -> None:
    core.create_namespaced_limit_range(
        "default",
        _limit_range(
            "sizes",
            {
                "type": "Container",
                "default": {"cpu": "2", "memory": "1Gi"},
                "defaultRequest": {"cpu": "1"},
            },
        ),
    )
    created = core.create_namespaced_pod(
        "default",
        _pod(
            "p",
            {"name": "main"},
            {"name": "side", "resources": {"limits": {"cpu": "3"}}},
            init=({"name": "setup", "resources": {"requests": {"cpu": "500m"}}},),
        ),
    )
    assert _resources(created) == [
        ({"cpu": "500m", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"}),  # setup
        ({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"}),  # main
        ({"cpu": "3", "memory": "1Gi"}, {"cpu": "3", "memory": "1Gi"}),  # its limit, not 1
    ]
    assert present(present(created.metadata).annotations)["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container main; cpu, memory limit for "
        "container main; memory request for container side; memory limit for container side; "
        "memory request for init container setup; cpu, memory limit for init container setup"
    )


@pytest.mark.parametrize(
    ("containers", "message"),
    [
        (
            [{"name": "main", "resources": {"limits": {"cpu": "3"}}}],
            "maximum cpu usage per Container is 2, but limit is 3",
        ),
        (
            [{"name": "main", "resources": {"requests": {"cpu": "100m"}}}],
            # Its default limit 2 is 20 times the request: every problem, aggregated.
            "[minimum cpu usage per Container is 250m, but request is 100m, cpu max limit to "
            "request ratio per Container is 3, but provided ratio is 20.000000]",
        ),
        (
            [{"name": "main", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}}],
            "cpu max limit to request ratio per Container is 3, but provided ratio is 4.000000",
        ),
        (
            [{"name": "a"}, {"name": "b"}, {"name": "c"}],  # 2 cpu each by default
            "maximum cpu usage per Pod is 5, but limit is 6",
        ),
    ],
)
def test_a_pod_outside_the_bounds_is_refused_with_the_limit_it_breaks(
    core: client.CoreV1Api, containers: list[dict[str, Any]], message: str
) -> None:
    core.create_namespaced_limit_range(
        "default",
        _limit_range(
            "sizes",
            {
                "type": "Container",
                "max": {"cpu": "2"},
                "min": {"cpu": "250m"},
                "maxLimitRequestRatio": {"cpu": "3"},
            },
            {"type": "Pod", "max": {"cpu": "5"}},
        ),
    )
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", _pod("p", *containers))
    assert caught.value.status == 403
    status = status_of(caught.value)
    assert (status["reason"], status["message"]) == (
        "Forbidden",
        f'pods "p" is forbidden: {message}',
    )
    assert core.list_namespaced_pod("default").items == []


def test_pods_in_other_namespaces_and_pod_updates_are_left_alone(core: client.CoreV1Api) -> None:
    core.create_namespace(as_model(client.V1Namespace, {"metadata": {"name": "other"}}))
    core.create_namespaced_pod("other", _pod("before", {"name": "main"}))
    core.create_namespaced_limit_range(
        "other", _limit_range("sizes", {"type": "Container", "default": {"cpu": "1"}})
    )
    unset = [(None, None)]
    assert _resources(core.create_namespaced_pod("default", _pod("p", {"name": "main"}))) == unset
    updated = core.patch_namespaced_pod(
        "before", "other", {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}
    )
    assert _resources(updated) == unset
    created = core.create_namespaced_pod("other", _pod("after", {"name": "main"}))
    assert _resources(created) == [({"cpu": "1"}, {"cpu": "1"})]


@pytest.mark.parametrize(
    ("limits", "causes"),
    [
        pytest.param(
            [{"type": "Container", "max": {"cpu": "1"}, "default": {"cpu": "2"}}],
            [
                (
                    "spec.limits[0].defaultRequest[cpu]",
                    'Invalid value: "2": default request value 2 is greater than max value 1',
                ),
                (
                    "spec.limits[0].default[cpu]",
                    'Invalid value: "1": default value 2 is greater than max value 1',
                ),
            ],
            id="default-above-max",
        ),
        pytest.param(
            [{"type": "Container", "min": {"memory": "2Gi"}, "max": {"memory": "1Gi"}}],
            [
                (
                    "spec.limits[0].min[memory]",
                    'Invalid value: "2Gi": min value 2Gi is greater than max value 1Gi',
                ),
                (
                    "spec.limits[0].defaultRequest[memory]",
                    'Invalid value: "1Gi": min value 2Gi is greater than default request value 1Gi',
                ),
                (
                    "spec.limits[0].default[memory]",
                    'Invalid value: "2Gi": min value 2Gi is greater than default value 1Gi',
                ),
            ],
            id="min-above-max",
        ),
        pytest.param(
            [{"type": "Pod", "maxLimitRequestRatio": {"cpu": "500m"}}],
            [
                (
                    "spec.limits[0].maxLimitRequestRatio[cpu]",
                    'Invalid value: "500m": ratio 500m is less than 1',
                )
            ],
            id="ratio-below-one",
        ),
        pytest.param(
            [
                {
                    "type": "Pod",
                    "min": {"cpu": "1"},
                    "max": {"cpu": "2"},
                    "maxLimitRequestRatio": {"cpu": "3"},
                }
            ],
            [
                (
                    "spec.limits[0].maxLimitRequestRatio[cpu]",
                    'Invalid value: "3": ratio 3 is greater than max/min = 2.000000',
                )
            ],
            id="ratio-above-max-over-min",
        ),
        pytest.param(
            [{"type": "Pod", "default": {"cpu": "1"}}, {"type": "Pod"}],
            [
                ("spec.limits[0].default", "Forbidden: may not be specified when `type` is 'Pod'"),
                ("spec.limits[1].type", 'Duplicate value: "Pod"'),
            ],
            id="pod-defaults-and-a-second-pod-entry",
        ),
    ],
)
def test_an_inconsistent_limit_range_is_refused_with_the_api_servers_field_errors(
    core: client.CoreV1Api, limits: list[dict[str, Any]], causes: list[tuple[str, str]]
) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_limit_range("default", _limit_range("sizes", *limits))
    assert caught.value.status == 422
    status = status_of(caught.value)
    assert status["reason"] == "Invalid"
    assert [(c["field"], c["message"]) for c in status["details"]["causes"]] == causes
    assert core.list_namespaced_limit_range("default").items == []


def test_a_consistent_limit_range_at_its_bounds_is_stored(core: client.CoreV1Api) -> None:
    item = {
        "type": "Container",
        "min": {"cpu": "1"},
        "max": {"cpu": "2"},
        "default": {"cpu": "2"},
        "defaultRequest": {"cpu": "1"},
        "maxLimitRequestRatio": {"cpu": "2"},
    }
    core.create_namespaced_limit_range("default", _limit_range("sizes", item))
    assert present(core.read_namespaced_limit_range("sizes", "default").spec).limits[0].max
