"""The LimitRanger on a pod's containers (core.pod_limits): Kubernetes' order (limits as
missing requests, then the LimitRanges' defaults) and its refusals, in its words."""

from __future__ import annotations

import msgspec
import pytest

from muster.api.decode import decode_yaml
from muster.api.model import ContainerResources, LimitRange, PodResources
from muster.core.limit_ranges import Summary, summarize
from muster.core.pod_limits import defaulted_pod, pod_problems, refusal

CPU = 1000  # milli-units of one cpu


def _summary(*limits: str) -> Summary | None:
    ranges = []
    for i, spec in enumerate(limits):
        objects, errors = decode_yaml(f"""
apiVersion: v1
kind: LimitRange
metadata: {{namespace: ns, name: lr-{i}}}
spec: {{limits: {spec}}}
""")
        assert errors == []
        (lr,) = objects
        assert isinstance(lr, LimitRange)
        ranges.append(lr)
    return summarize(ranges)


def _pod(*containers: ContainerResources) -> PodResources:
    return PodResources(containers=containers)


def test_a_limit_is_the_request_before_the_default_request_applies() -> None:
    """Not Kueue's order (defaults first): the pod requests its limit, 3 cpu, not 1."""
    summary = _summary("[{type: Container, default: {cpu: 2}, defaultRequest: {cpu: 1}}]")
    pod = defaulted_pod(
        _pod(ContainerResources(), ContainerResources(limits={"cpu": 3 * CPU})), summary
    )
    assert [(c.requests, c.limits) for c in pod.containers] == [
        ({"cpu": CPU}, {"cpu": 2 * CPU}),
        ({"cpu": 3 * CPU}, {"cpu": 3 * CPU}),
    ]


def test_the_first_limit_range_by_name_gives_a_default() -> None:
    summary = _summary(
        "[{type: Container, defaultRequest: {cpu: 1}}]",
        "[{type: Container, defaultRequest: {cpu: 2, memory: 1Gi}}]",
    )
    (container,) = defaulted_pod(_pod(ContainerResources()), summary).containers
    assert container.requests == {"cpu": CPU, "memory": 1024**3 * 1000}


def test_no_limit_range_changes_nothing_but_limits_as_requests() -> None:
    written = _pod(ContainerResources(limits={"cpu": CPU}))
    assert defaulted_pod(written, None).containers[0].requests == {"cpu": CPU}
    assert pod_problems(defaulted_pod(written, None), None) == []


@pytest.mark.parametrize(
    ("container", "problems"),
    [
        (ContainerResources(requests={"cpu": CPU}, limits={"cpu": 2 * CPU}), []),
        (
            ContainerResources(requests={"cpu": 100}, limits={"cpu": 200}),
            ["minimum cpu usage per Container is 250m, but request is 100m"],
        ),
        (
            ContainerResources(requests={"memory": 1000}),
            [
                "minimum cpu usage per Container is 250m.  No request is specified",
                "maximum cpu usage per Container is 2.  No limit is specified",
                "cpu max limit to request ratio per Container is 3, but no request is "
                "specified or request is 0",
            ],
        ),
        (
            ContainerResources(requests={"cpu": 500}, limits={"cpu": 2 * CPU}),
            ["cpu max limit to request ratio per Container is 3, but provided ratio is 4.000000"],
        ),
    ],
)
def test_container_bounds_in_kubernetes_words(
    container: ContainerResources, problems: list[str]
) -> None:
    summary = _summary("[{type: Container, min: {cpu: 250m}, maxLimitRequestRatio: {cpu: 3}}]")
    # The max given apart: the API server would make it the default limit and request.
    assert summary is not None
    assert summary.container is not None
    bounds = msgspec.structs.replace(summary.container, max={"cpu": 2 * CPU})
    assert pod_problems(_pod(container), Summary(container=bounds)) == problems


def test_the_pod_total_takes_the_init_peak_and_sidecars_without_overhead() -> None:
    summary = _summary("[{type: Pod, max: {cpu: 3}}]")
    sized = ContainerResources(requests={"cpu": 2 * CPU}, limits={"cpu": 2 * CPU})
    fits = PodResources(containers=(sized,), init_containers=(sized,), overhead={"cpu": 5 * CPU})
    assert pod_problems(fits, summary) == []
    sidecar = ContainerResources(requests={"cpu": CPU}, limits={"cpu": 2 * CPU}, sidecar=True)
    over = PodResources(containers=(sized,), init_containers=(sidecar,))
    assert pod_problems(over, summary) == ["maximum cpu usage per Pod is 3, but limit is 4"]
    assert refusal("train-", pod_problems(over, summary)) == (
        'pods "train-" is forbidden: maximum cpu usage per Pod is 3, but limit is 4'
    )
