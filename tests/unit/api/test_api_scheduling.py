"""Today's Kubernetes gang API from YAML: scheduling.k8s.io Workloads, PodGroups and
CompositePodGroups of v1alpha2 (v1.36), v1beta1 and v1alpha3 (v1.37), a Pod's
`spec.schedulingGroup` and a Job's `spec.scheduling`, with the API server's refusals named by
field path. The YAML of the first tests is the official documentation's."""

from __future__ import annotations

import textwrap

import pytest

from muster.api import decode_yaml
from muster.api.model import (
    ApiObject,
    CompositePodGroup,
    Condition,
    GroupPolicy,
    GroupTemplate,
    OwnerReference,
    Pod,
    SchedulingPodGroup,
    SchedulingWorkload,
    Workload,
)


def decoded(text: str) -> list[ApiObject]:
    objects, errors = decode_yaml(textwrap.dedent(text))
    assert [str(e) for e in errors] == []
    return objects


def problems(text: str) -> list[str]:
    objects, errors = decode_yaml(textwrap.dedent(text))
    assert objects == []
    return [str(e) for e in errors]


def test_v1beta1_workload_pod_group_and_pod_of_the_workload_api_page() -> None:
    workload, group, pod = decoded(
        """
        apiVersion: scheduling.k8s.io/v1beta1
        kind: Workload
        metadata: {name: training-job-workload, namespace: some-ns}
        spec:
          controllerRef: {apiGroup: batch, kind: Job, name: training-job}
          podGroupTemplates:
          - name: workers
            schedulingPolicy: {gang: {minCount: 4}}
            priorityClassName: high-priority
            disruptionMode: {all: {}}
        ---
        apiVersion: scheduling.k8s.io/v1beta1
        kind: PodGroup
        metadata: {name: training-job-workers-0, namespace: some-ns}
        spec:
          workloadRef: {workloadName: training-job-workload, templateName: workers}
          schedulingPolicy: {gang: {minCount: 4}}
          priorityClassName: high-priority
          disruptionMode: {all: {}}
        status:
          conditions:
          - {type: PodGroupInitiallyScheduled, status: "True", reason: Scheduled}
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: worker-0, namespace: some-ns}
        spec:
          schedulingGroup: {podGroupName: training-job-workers-0}
          containers: [{name: ml-worker, image: "training:v1"}]
        """
    )
    policy = GroupPolicy(min_count=4, disruption="all", priority_class_name="high-priority")
    assert isinstance(workload, SchedulingWorkload)
    assert workload.api_version == "scheduling.k8s.io/v1beta1"
    assert workload.templates == (GroupTemplate(name="workers", policy=policy),)
    assert workload.controller_ref == OwnerReference(
        api_version="batch", kind="Job", name="training-job", controller=True
    )
    assert isinstance(group, SchedulingPodGroup)
    assert (group.workload_name, group.template_name, group.parent) == (
        "training-job-workload",
        "workers",
        "",
    )
    assert group.policy == policy
    assert group.conditions == (
        Condition(type="PodGroupInitiallyScheduled", status="True", reason="Scheduled"),
    )
    assert isinstance(pod, Pod)
    assert pod.scheduling_group == "training-job-workers-0"


def test_v1alpha3_composite_tree_of_the_composite_pod_group_page() -> None:
    workload, root, workers_a = decoded(
        """
        apiVersion: scheduling.k8s.io/v1alpha3
        kind: Workload
        metadata: {name: hierarchical-workload, namespace: default}
        spec:
          compositePodGroupTemplates:
          - name: root
            schedulingPolicy: {gang: {minGroupCount: 2}}
            schedulingConstraints: {topology: [{key: topology.example.com/zone}]}
            podGroupTemplates:
            - {name: workers-a, schedulingPolicy: {gang: {minCount: 4}}}
            - {name: workers-b, schedulingPolicy: {gang: {minCount: 4}}}
        ---
        apiVersion: scheduling.k8s.io/v1alpha3
        kind: CompositePodGroup
        metadata: {name: root-group-0, namespace: default}
        spec:
          workloadRef: {workloadName: hierarchical-workload, templateName: root}
          schedulingPolicy: {gang: {minGroupCount: 2}}
        ---
        apiVersion: scheduling.k8s.io/v1alpha3
        kind: PodGroup
        metadata: {name: workers-a-0, namespace: default}
        spec:
          parentCompositePodGroupName: root-group-0
          workloadRef: {workloadName: hierarchical-workload, templateName: workers-a}
          schedulingPolicy: {gang: {minCount: 4}}
          schedulingConstraints: {topology: [{key: topology.example.com/rack}]}
        """
    )
    assert isinstance(workload, SchedulingWorkload)
    (tree,) = workload.templates
    assert tree.composite
    assert tree.policy == GroupPolicy(min_count=2, topology_key="topology.example.com/zone")
    assert [child.name for child in tree.children] == ["workers-a", "workers-b"]
    assert isinstance(root, CompositePodGroup)
    assert root.policy.min_count == 2
    assert isinstance(workers_a, SchedulingPodGroup)
    assert workers_a.parent == "root-group-0"
    assert workers_a.policy == GroupPolicy(min_count=4, topology_key="topology.example.com/rack")


def test_v1alpha2_pod_group_of_kubernetes_1_36_names_its_template_and_renames_disruption() -> None:
    workload, group = decoded(
        """
        apiVersion: scheduling.k8s.io/v1alpha2
        kind: Workload
        metadata: {name: training-policy}
        spec:
          podGroupTemplates:
          - {name: worker, schedulingPolicy: {gang: {minCount: 4}}, disruptionMode: PodGroup}
        ---
        apiVersion: scheduling.k8s.io/v1alpha2
        kind: PodGroup
        metadata: {name: training-worker-0}
        spec:
          podGroupTemplateRef:
            workload: {workloadName: training-policy, podGroupTemplateName: worker}
          schedulingPolicy: {gang: {minCount: 4}}
          disruptionMode: Pod
        """
    )
    assert isinstance(workload, SchedulingWorkload)
    assert workload.templates[0].policy.disruption == "all"
    assert isinstance(group, SchedulingPodGroup)
    assert (group.workload_name, group.template_name) == ("training-policy", "worker")
    assert group.policy == GroupPolicy(min_count=4, disruption="single")


def test_basic_policy_and_priority_and_preemption_policy() -> None:
    (group,) = decoded(
        """
        apiVersion: scheduling.k8s.io/v1beta1
        kind: PodGroup
        metadata: {name: web}
        spec:
          schedulingPolicy: {basic: {}}
          priority: 1000
          preemptionPolicy: Never
        """
    )
    assert isinstance(group, SchedulingPodGroup)
    assert group.policy == GroupPolicy(priority=1000, preemption_policy="Never")
    assert not group.policy.gang


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        pytest.param(
            "{}",
            "PodGroup/default/g: spec.schedulingPolicy: is required",
            id="no-policy",
        ),
        pytest.param(
            "{schedulingPolicy: {basic: {}, gang: {minCount: 2}}}",
            "PodGroup/default/g: spec.schedulingPolicy: must set exactly one of basic or gang",
            id="both-policies",
        ),
        pytest.param(
            "{schedulingPolicy: {gang: {}}}",
            "PodGroup/default/g: spec.schedulingPolicy.gang.minCount: is required",
            id="gang-without-min-count",
        ),
        pytest.param(
            "{schedulingPolicy: {gang: {minCount: 0}}}",
            "PodGroup/default/g: spec.schedulingPolicy.gang.minCount: must be >= 1, got 0",
            id="min-count-zero",
        ),
        pytest.param(
            "{schedulingPolicy: {basic: {}},"
            " schedulingConstraints: {topology: [{key: a}, {key: b}]}}",
            "PodGroup/default/g: spec.schedulingConstraints.topology: must list at most 1 entry, "
            "got 2",
            id="two-topology-keys",
        ),
        pytest.param(
            "{schedulingPolicy: {basic: {}}, schedulingConstraints: {topology: [{}]}}",
            "PodGroup/default/g: spec.schedulingConstraints.topology[0].key: is required",
            id="topology-without-key",
        ),
        pytest.param(
            "{schedulingPolicy: {basic: {}}, disruptionMode: {single: {}, all: {}}}",
            "PodGroup/default/g: spec.disruptionMode: must set exactly one of single or all",
            id="both-disruption-modes",
        ),
        pytest.param(
            "{schedulingPolicy: {basic: {}}, preemptionPolicy: Sometimes}",
            'PodGroup/default/g: spec.preemptionPolicy: must be "Never" or '
            '"PreemptLowerPriority", got "Sometimes"',
            id="unknown-preemption-policy",
        ),
        pytest.param(
            "{schedulingPolicy: {basic: {}}, priority: 2000000000}",
            "PodGroup/default/g: spec.priority: must be <= 1000000000, got 2000000000",
            id="system-priority",
        ),
        pytest.param(
            "{schedulingPolicy: {basic: {}}, parentCompositePodGroupName: root}",
            "PodGroup/default/g: spec.workloadRef: is required with "
            "spec.parentCompositePodGroupName",
            id="parent-without-workload-ref",
        ),
        pytest.param(
            "{schedulingPolicy: {basic: {}}, workloadRef: {workloadName: w}}",
            "PodGroup/default/g: spec.workloadRef.templateName: is required",
            id="workload-ref-without-template",
        ),
    ],
)
def test_pod_group_refusals_name_the_field(spec: str, problem: str) -> None:
    text = "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {name: g}\n"
    assert problems(text + f"spec: {spec}\n") == [problem]


def test_composite_pod_group_needs_its_workload_and_counts_groups() -> None:
    assert problems(
        """
        apiVersion: scheduling.k8s.io/v1alpha3
        kind: CompositePodGroup
        metadata: {name: root}
        spec: {schedulingPolicy: {gang: {minCount: 2}}}
        """
    ) == [
        "CompositePodGroup/default/root: spec.workloadRef: is required",
        "CompositePodGroup/default/root: spec.schedulingPolicy.gang.minGroupCount: is required",
    ]


def test_composite_pod_group_is_not_served_at_v1beta1() -> None:
    assert problems(
        """
        apiVersion: scheduling.k8s.io/v1beta1
        kind: CompositePodGroup
        metadata: {name: root}
        """
    ) == [
        "CompositePodGroup/root: apiVersion: kind CompositePodGroup in scheduling.k8s.io/v1beta1 "
        "is not supported"
    ]


def test_v1alpha2_refuses_the_v1_37_disruption_names() -> None:
    assert problems(
        """
        apiVersion: scheduling.k8s.io/v1alpha2
        kind: PodGroup
        metadata: {name: g}
        spec: {schedulingPolicy: {basic: {}}, disruptionMode: All}
        """
    ) == ['PodGroup/default/g: spec.disruptionMode: must be "Pod" or "PodGroup", got "All"']


def test_workload_templates_one_list_unique_names_at_most_four_deep() -> None:
    deep = "{name: l4, schedulingPolicy: {basic: {}}, compositePodGroupTemplates: [{name: l5, schedulingPolicy: {basic: {}}, podGroupTemplates: [{name: leaf, schedulingPolicy: {basic: {}}}]}]}"  # noqa: E501 - one flow mapping reads best
    found = problems(
        f"""
        apiVersion: scheduling.k8s.io/v1alpha3
        kind: Workload
        metadata: {{name: w}}
        spec:
          podGroupTemplates:
          - {{name: a, schedulingPolicy: {{gang: {{minCount: 1}}}}}}
          - {{name: a, schedulingPolicy: {{basic: {{}}}}}}
          compositePodGroupTemplates:
          - name: l1
            schedulingPolicy: {{basic: {{}}}}
            compositePodGroupTemplates:
            - name: l2
              schedulingPolicy: {{basic: {{}}}}
              compositePodGroupTemplates:
              - name: l3
                schedulingPolicy: {{basic: {{}}}}
                compositePodGroupTemplates: [{deep}]
        """
    )
    assert found == [
        "Workload/default/w: spec: must set exactly one of podGroupTemplates or "
        "compositePodGroupTemplates",
        "Workload/default/w: spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0]"
        ".compositePodGroupTemplates[0].compositePodGroupTemplates[0]"
        ".compositePodGroupTemplates[0]: templates may nest at most 4 deep",
        "Workload/default/w: spec: duplicate template name 'a'",
    ]


def test_pod_scheduling_group_needs_a_name_and_replaces_workload_ref() -> None:
    assert problems(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          schedulingGroup: {}
          workloadRef: {name: w, podGroup: g}
        """
    ) == [
        "Pod/default/p: spec.schedulingGroup.podGroupName: is required",
        "Pod/default/p: spec.schedulingGroup: cannot be set together with spec.workloadRef",
    ]


def test_job_scheduling_of_the_v1_37_blog_defaults_min_count_to_parallelism() -> None:
    (wl,) = decoded(
        """
        apiVersion: batch/v1
        kind: Job
        metadata: {name: distributed-training-job}
        spec:
          parallelism: 8
          completions: 8
          scheduling:
            schedulingPolicy: {gang: {}}
            schedulingConstraints: {topology: [{key: topology.kubernetes.io/zone}]}
            disruptionMode: {all: {}}
          template:
            spec: {containers: [{name: main}]}
        """
    )
    assert isinstance(wl, Workload)
    assert wl.scheduling == GroupPolicy(
        min_count=8, topology_key="topology.kubernetes.io/zone", disruption="all"
    )


def test_job_without_scheduling_policy_is_basic_and_template_group_is_kept() -> None:
    (wl,) = decoded(
        """
        apiVersion: batch/v1
        kind: Job
        metadata: {name: j}
        spec:
          parallelism: 2
          scheduling: {disruptionMode: {single: {}}}
          template:
            spec:
              schedulingGroup: {podGroupName: pg}
              containers: [{name: main}]
        """
    )
    assert isinstance(wl, Workload)
    assert wl.scheduling == GroupPolicy()
    assert wl.pod_sets[0].scheduling_group == "pg"


def test_job_gang_larger_than_parallelism_is_refused() -> None:
    assert problems(
        """
        apiVersion: batch/v1
        kind: Job
        metadata: {name: j}
        spec:
          parallelism: 2
          scheduling: {schedulingPolicy: {gang: {minCount: 3}}}
          template: {spec: {containers: [{name: main}]}}
        """
    ) == [
        "Job/default/j: spec.scheduling.schedulingPolicy.gang.minCount: must be <= "
        "spec.parallelism 2, got 3"
    ]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param(
            """\
            apiVersion: scheduling.k8s.io/v1beta1
            kind: PodGroup
            metadata: {name: g, namespace: ml}
            spec:
              schedulingPolicy: {gang: {minCount: 2, minCuont: 3}}
            """,
            "PodGroup/ml/g: spec.schedulingPolicy.gang.minCuont: unknown field",
            id="v1beta1-podgroup",
        ),
        pytest.param(
            """\
            apiVersion: scheduling.k8s.io/v1alpha3
            kind: Workload
            metadata: {name: w, namespace: ml}
            spec:
              compositePodGroupTemplates:
              - name: root
                schedulingPolicy: {gang: {minGroupCount: 1}}
                podGroupTemplates:
                - {name: leaf, schedulingPolicy: {basic: {}}, topolgy: x}
            """,
            "Workload/ml/w: spec.compositePodGroupTemplates[0].podGroupTemplates[0].topolgy:"
            " unknown field",
            id="v1alpha3-nested-template",
        ),
        pytest.param(
            """\
            apiVersion: scheduling.k8s.io/v1alpha2
            kind: PodGroup
            metadata: {name: g, namespace: ml}
            spec:
              podGroupTemplateRef: {workload: {workloadName: w, templateName: t}}
              schedulingPolicy: {basic: {}}
            """,
            "PodGroup/ml/g: spec.podGroupTemplateRef.workload.templateName: unknown field",
            id="v1alpha2-uses-v1beta1-name",
        ),
        pytest.param(
            """\
            apiVersion: batch/v1
            kind: Job
            metadata: {name: j, namespace: ml}
            spec:
              parallelism: 2
              scheduling: {schedulingPolicy: {gang: {}}, disruptionMode: {al: {}}}
              template: {spec: {containers: [{name: c}], restartPolicy: Never}}
            """,
            "Job/ml/j: spec.scheduling.disruptionMode.al: unknown field",
            id="job-scheduling",
        ),
    ],
)
def test_gang_api_typos_are_refused_by_strict_validation(text: str, field: str) -> None:
    _, errors = decode_yaml(textwrap.dedent(text))
    assert field in [str(e) for e in errors]
