"""Semantic checks: each message names the object and the YAML path, and says what is wrong."""

from __future__ import annotations

import textwrap

import pytest

from muster.api import decode_yaml


def cluster_queue(groups: str, *, cohort: str = "shared") -> str:
    cohort_line = f"cohortName: {cohort}" if cohort else ""
    return textwrap.dedent("""
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ClusterQueue
        metadata: {{name: team-a}}
        spec:
          {cohort_line}
          resourceGroups:
        {groups}
    """).format(cohort_line=cohort_line, groups=textwrap.indent(groups.strip(), "  "))


def errors_of(text: str) -> list[str]:
    objects, errors = decode_yaml(text)
    assert objects == []
    return [str(e) for e in errors]


def test_reports_every_negative_quota() -> None:
    text = cluster_queue("""
- coveredResources: [cpu]
  flavors:
  - name: default
    resources: [{name: cpu, nominalQuota: -2, borrowingLimit: -1, lendingLimit: -500m}]
""")
    assert errors_of(text) == [
        "ClusterQueue/team-a: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota:"
        " must be >= 0, got -2",
        "ClusterQueue/team-a: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit:"
        " must be >= 0, got -1",
        "ClusterQueue/team-a: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit:"
        " must be >= 0, got -500m",
    ]


def test_reports_limits_without_a_cohort() -> None:
    text = cluster_queue(
        """
- coveredResources: [cpu]
  flavors:
  - name: default
    resources: [{name: cpu, nominalQuota: 4, borrowingLimit: 1, lendingLimit: 1}]
""",
        cohort="",
    )
    path = "ClusterQueue/team-a: spec.resourceGroups[0].flavors[0].resources[0]"
    assert errors_of(text) == [
        f"{path}.borrowingLimit: must not be set without a cohort",
        f"{path}.lendingLimit: must not be set without a cohort",
    ]


def test_reports_lending_limit_above_nominal_quota() -> None:
    text = cluster_queue("""
- coveredResources: [memory]
  flavors:
  - name: default
    resources: [{name: memory, nominalQuota: 1Gi, lendingLimit: 2Gi}]
""")
    assert errors_of(text) == [
        "ClusterQueue/team-a: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit:"
        " must be <= nominalQuota 1Gi, got 2Gi"
    ]


def test_reports_flavor_resources_that_differ_from_covered_resources() -> None:
    text = cluster_queue("""
- coveredResources: [cpu, memory]
  flavors:
  - name: default
    resources: [{name: memory, nominalQuota: 1Gi}, {name: cpu, nominalQuota: 1}]
""")
    assert errors_of(text) == [
        "ClusterQueue/team-a: spec.resourceGroups[0].flavors[0].resources: must list the covered"
        " resources in order [cpu, memory], got [memory, cpu]"
    ]


def test_reports_duplicate_flavor_and_resource_covered_twice() -> None:
    text = cluster_queue("""
- coveredResources: [cpu]
  flavors:
  - {name: default, resources: [{name: cpu, nominalQuota: 1}]}
- coveredResources: [cpu]
  flavors:
  - {name: default, resources: [{name: cpu, nominalQuota: 1}]}
""")
    assert errors_of(text) == [
        "ClusterQueue/team-a: spec.resourceGroups[1].coveredResources[0]: cpu is already covered"
        " by spec.resourceGroups[0]",
        "ClusterQueue/team-a: spec.resourceGroups[1].flavors[0].name: default is already at"
        " spec.resourceGroups[0].flavors[0]",
    ]


def test_reports_negative_fair_sharing_weight_and_bad_preemption_combination() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  fairSharing: {weight: "-1"}
  preemption:
    reclaimWithinCohort: Never
    borrowWithinCohort: {policy: LowerPriority}
"""
    assert errors_of(text) == [
        "ClusterQueue/team-a: spec.preemption.borrowWithinCohort.policy: must be Never when"
        " reclaimWithinCohort is Never, got LowerPriority",
        "ClusterQueue/team-a: spec.fairSharing.weight: must be >= 0, got -1",
    ]


def test_reports_bad_enum_value_at_its_path() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec: {queueingStrategy: Random}
"""
    assert errors_of(text) == ["ClusterQueue/team-a: spec.queueingStrategy: unknown value 'Random'"]


def test_reports_junk_quantity_with_path() -> None:
    text = cluster_queue("""
- coveredResources: [cpu]
  flavors:
  - {name: default, resources: [{name: cpu, nominalQuota: 10GB}]}
""")
    assert errors_of(text) == [
        "ClusterQueue/team-a: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota:"
        ' expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got "10GB"'
    ]


WORKLOAD = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{name: train, namespace: ml}}
spec:
  podSets:
{pod_sets}
"""


@pytest.mark.parametrize(
    ("pod_sets", "expected"),
    [
        (
            "  - {name: main, count: 3}\n  - {name: main, count: 1}",
            ["Workload/ml/train: spec.podSets[1].name: duplicate podset name main"],
        ),
        (
            "  - {name: main, count: -1}",
            ["Workload/ml/train: spec.podSets[0].count: must be >= 0, got -1"],
        ),
        (
            "  - {name: main, count: 2, minCount: 3}",
            ["Workload/ml/train: spec.podSets[0].minCount: must be >= 1 and <= count 2, got 3"],
        ),
        (
            "  - {name: main, count: 2, minCount: 0}",
            ["Workload/ml/train: spec.podSets[0].minCount: must be >= 1 and <= count 2, got 0"],
        ),
        (
            # Kueue's webhook: at most one podset with minCount (partial admission shrinks one)
            "  - {name: a, count: 2, minCount: 1}\n  - {name: b, count: 2}\n"
            "  - {name: c, count: 2, minCount: 1}\n  - {name: d, count: 2, minCount: 2}",
            [
                "Workload/ml/train: spec.podSets[2].minCount: at most one podset may set "
                "minCount; spec.podSets[0] already does",
                "Workload/ml/train: spec.podSets[3].minCount: at most one podset may set "
                "minCount; spec.podSets[0] already does",
            ],
        ),
        ("    []", ["Workload/ml/train: spec.podSets: must list at least 1 podset"]),
        (
            "  - {name: main, count: two}",
            ["Workload/ml/train: spec.podSets[0].count: expected an integer, got a string"],
        ),
    ],
)
def test_reports_bad_pod_sets(pod_sets: str, expected: list[str]) -> None:
    assert errors_of(WORKLOAD.format(pod_sets=pod_sets)) == expected


def test_allows_pod_set_of_zero_pods() -> None:
    objects, errors = decode_yaml(WORKLOAD.format(pod_sets="  - {name: main, count: 0}"))
    assert errors == []
    assert len(objects) == 1
