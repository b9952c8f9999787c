"""Hostile names and numbers in Kueue and Kubernetes YAML: each refused naming object and field."""

from __future__ import annotations

import pytest

from muster.api import decode_yaml
from muster.api.model import ClusterQueue, Workload

KUEUE = "apiVersion: kueue.x-k8s.io/v1beta2"
SUBDOMAIN = "must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each part"
LABEL = "must be a DNS-1123 label (lower-case letters, digits and '-', starting and ending"


def errors_of(text: str) -> list[str]:
    objects, errors = decode_yaml(text, source="f.yaml")
    assert objects == [] or errors == []
    return [str(e) for e in errors]


def workload(spec: str, *, name: str = "w", namespace: str = "ml") -> str:
    return (
        f"{KUEUE}\nkind: Workload\nmetadata: {{name: {name!r}, namespace: {namespace!r}}}\n"
        f"spec: {spec}\n"
    )


POD_SET = "{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param(
            f"{KUEUE}\nkind: LocalQueue\nmetadata: {{name: ../x, namespace: ml}}\n"
            "spec: {clusterQueue: cq}\n",
            "LocalQueue/ml/../x: metadata.name",
            id="dot-dot-name",
        ),
        pytest.param(
            f"{KUEUE}\nkind: LocalQueue\nmetadata: {{name: lq a, namespace: ml}}\n"
            "spec: {clusterQueue: cq}\n",
            "LocalQueue/ml/lq a: metadata.name",
            id="space-in-name",
        ),
        pytest.param(
            f"{KUEUE}\nkind: LocalQueue\nmetadata: {{name: lq, namespace: ml}}\n"
            "spec: {clusterQueue: ../cq}\n",
            "LocalQueue/ml/lq: spec.clusterQueue",
            id="cluster-queue-reference",
        ),
        pytest.param(
            workload(f"{{queueName: 'a/b', podSets: [{POD_SET}]}}"),
            "Workload/ml/w: spec.queueName",
            id="queue-name",
        ),
        pytest.param(
            f"{KUEUE}\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec: {{cohortName: 'Org A'}}\n",
            "ClusterQueue/cq: spec.cohortName",
            id="cohort",
        ),
        pytest.param(
            "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: c}\n"
            "spec: {parent: '..'}\n",
            "Cohort/c: spec.parent",
            id="cohort-parent",
        ),
        pytest.param(
            f"{KUEUE}\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec:\n  resourceGroups:\n"
            "  - coveredResources: [cpu]\n"
            "    flavors: [{name: 'x y', resources: [{name: cpu, nominalQuota: 1}]}]\n",
            "ClusterQueue/cq: spec.resourceGroups[0].flavors[0].name",
            id="flavor",
        ),
        pytest.param(
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\n  namespace: ml\n"
            "  labels: {kueue.x-k8s.io/queue-name: 'Team_Q'}\n",
            'Job/ml/j: metadata.labels["kueue.x-k8s.io/queue-name"]',
            id="job-queue-label",
        ),
        pytest.param(
            workload(f"{{queueName: q, podSets: [{POD_SET}]}}", namespace="Team_A"),
            "Workload/Team_A/w: metadata.namespace",
            id="namespace",
        ),
    ],
)
def test_a_name_is_checked_as_kubernetes_and_kueue_check_it(text: str, field: str) -> None:
    (error,) = errors_of(text)

    assert error.startswith(f"{field}: must be a DNS-1123")


def test_a_podset_name_must_be_a_label() -> None:
    text = workload("{queueName: q, podSets: [{name: main.set, count: 1}]}")

    assert errors_of(text) == [
        f"Workload/ml/w: spec.podSets[0].name: {LABEL} with a letter or digit), got 'main.set'"
    ]


def test_a_label_key_and_value_are_checked() -> None:
    text = (
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml\n  labels: {team: 'a b', '/x': y}\n"
    )

    assert [e.split(": ")[1] for e in errors_of(text)] == [
        "metadata.labels.team",
        'metadata.labels["/x"]',
    ]


@pytest.mark.parametrize(
    ("spec", "field", "problem"),
    [
        pytest.param(
            f"{{queueName: q, priority: 2147483648, podSets: [{POD_SET}]}}",
            "spec.priority",
            "expected an integer <= 2147483647",
            id="priority",
        ),
        pytest.param(
            "{queueName: q, podSets: [{name: main, count: -2147483649}]}",
            "spec.podSets[0].count",
            "expected an integer >= -2147483648",
            id="count",
        ),
        pytest.param(
            "{queueName: q, podSets: [{name: m, count: 1, template: {spec: {containers:"
            " [{name: c, resources: {requests: {cpu: '1e30'}}}]}}}]}",
            "spec.podSets[0].template.spec.containers[0].resources.requests.cpu",
            "must be at most 9223372036854775807m in magnitude",
            id="huge-quantity",
        ),
        pytest.param(
            "{queueName: q, podSets: [{name: m, count: 1, template: {spec: {containers:"
            " [{name: c, resources: {requests: {cpu: '١٢'}}}]}}}]}",
            "spec.podSets[0].template.spec.containers[0].resources.requests.cpu",
            "expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got '\\u0661\\u0662'",
            id="arabic-indic-digits",
        ),
    ],
)
def test_numbers_are_bounded_as_kubernetes_bounds_them(spec: str, field: str, problem: str) -> None:
    (error,) = errors_of(workload(spec))

    assert error.startswith(f"Workload/ml/w: {field}: {problem}")


def test_nineteen_podsets_are_refused_eighteen_accepted() -> None:
    def with_sets(n: int) -> str:
        sets = ", ".join(f"{{name: s{i}, count: 1}}" for i in range(n))
        return workload(f"{{queueName: q, podSets: [{sets}]}}")

    objects, errors = decode_yaml(with_sets(18))
    assert errors == []
    assert isinstance(objects[0], Workload)
    assert errors_of(with_sets(19)) == [
        "Workload/ml/w: spec.podSets: must list at most 18 podsets, got 19"
    ]


def test_arabic_indic_nominal_quota_is_not_read_as_twelve() -> None:
    text = (
        f"{KUEUE}\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec:\n  resourceGroups:\n"
        "  - coveredResources: [cpu]\n"
        "    flavors: [{name: f, resources: [{name: cpu, nominalQuota: '١٢'}]}]\n"
    )

    (error,) = errors_of(text)

    assert error.startswith(
        "ClusterQueue/cq: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: expected"
    )


def test_valid_names_and_numbers_still_decode() -> None:
    text = (
        f"{KUEUE}\nkind: ClusterQueue\nmetadata: {{name: team-a.gpu}}\nspec:\n"
        "  cohortName: org.research\n  resourceGroups:\n  - coveredResources: [cpu]\n"
        "    flavors: [{name: on-demand, resources:"
        " [{name: cpu, nominalQuota: 9223372036854775807m}]}]\n"
    )

    (cq,), errors = decode_yaml(text)

    assert errors == []
    assert isinstance(cq, ClusterQueue)
    assert cq.cohort == "org.research"


def test_an_integer_annotation_takes_ascii_digits_only() -> None:
    text = (
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\n  namespace: ml\n"
        "  annotations: {kueue.x-k8s.io/job-min-parallelism: '١'}\nspec: {parallelism: 4}\n"
    )

    assert errors_of(text) == [
        'Job/ml/j: metadata.annotations["kueue.x-k8s.io/job-min-parallelism"]:'
        ' must be an integer, got "١"'
    ]


@pytest.mark.parametrize(
    ("requests", "field"),
    [
        ("{'../gpu': 1}", 'requests["../gpu"]'),
        ("{'': 1}", 'requests[""]'),
        ("{'nvidia.com/': 1}", 'requests["nvidia.com/"]'),
    ],
)
def test_a_resource_name_is_a_qualified_name(requests: str, field: str) -> None:
    spec = (
        "{queueName: q, podSets: [{name: m, count: 1, template: {spec: {containers:"
        f" [{{name: c, resources: {{requests: {requests}}}}}]}}}}}}]}}"
    )

    (error,) = errors_of(workload(spec))

    assert error.startswith(
        f"Workload/ml/w: spec.podSets[0].template.spec.containers[0].resources.{field}:"
        " resource name: "
    )


def test_covered_resource_names_are_qualified_names() -> None:
    text = (
        f"{KUEUE}\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec:\n  resourceGroups:\n"
        "  - coveredResources: ['a b']\n"
        "    flavors: [{name: f, resources: [{name: 'a b', nominalQuota: 1}]}]\n"
    )

    assert [e.split(": ")[1] for e in errors_of(text)] == [
        "spec.resourceGroups[0].coveredResources[0]",
        "spec.resourceGroups[0].flavors[0].resources[0].name",
    ]


def test_pod_template_labels_are_checked_as_a_pods() -> None:
    text = (
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ml}\nspec:\n"
        "  template:\n    metadata:\n      labels: {scheduling.x-k8s.io/pod-group: 'x y'}\n"
    )

    (error,) = errors_of(text)

    assert error.startswith(
        'Job/ml/j: spec.template.metadata.labels["scheduling.x-k8s.io/pod-group"]:'
        " must be a label value"
    )


# The gateway answers at most 600 characters a line: a hostile name or key must not push the
# problem, which ends the line, out of it (nor make the line hard to read).
LINE_SHOWN = 300


def test_a_name_too_long_leaves_the_problem_in_view() -> None:
    name = "a" * 5000
    text = f"{KUEUE}\nkind: ResourceFlavor\nmetadata: {{name: {name}}}\n"

    (line,) = errors_of(text)

    assert len(line) < LINE_SHOWN
    assert line.startswith("ResourceFlavor/aaaa")
    assert "...(5015 characters): " in line  # "ResourceFlavor/" and the name
    assert line.endswith("metadata.name: must be no more than 253 characters, got 5000")


def test_an_unknown_field_with_a_huge_key_leaves_the_problem_in_view() -> None:
    key = "k" * 1000  # YAML allows an implicit key up to 1024 characters
    text = f"{KUEUE}\nkind: ResourceFlavor\nmetadata: {{name: f}}\nspec: {{{key}: 1}}\n"

    (line,) = errors_of(text)

    assert len(line) < LINE_SHOWN
    assert line.startswith("ResourceFlavor/f: spec.kkkk")
    assert line.endswith(": unknown field")


def test_every_wrong_type_of_an_object_is_named_in_one_pass() -> None:
    # msgspec stops at an object's first wrong type: a newcomer fixed them one run at a time.
    text = workload(
        "{queueName: lq, priority: high, podSets: [{name: main, count: lots,"
        " template: {spec: {containers: [{name: c}]}}}]}"
    )

    assert errors_of(text) == [
        "Workload/ml/w: spec.priority: expected an integer or null, got a string",
        "Workload/ml/w: spec.podSets[0].count: expected an integer, got a string",
    ]


def test_a_wrong_top_level_field_is_named_once() -> None:
    text = f"{KUEUE}\nkind: WorkloadPriorityClass\nmetadata: {{name: p}}\nvalue: -2147483649\n"

    assert errors_of(text) == ["WorkloadPriorityClass/p: value: expected an integer >= -2147483648"]


def test_a_missing_top_level_field_names_it() -> None:
    text = f"{KUEUE}\nkind: WorkloadPriorityClass\nmetadata: {{name: p}}\n"

    assert errors_of(text) == ["WorkloadPriorityClass/p: value: is required"]
