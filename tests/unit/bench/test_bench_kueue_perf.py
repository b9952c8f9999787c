"""The generator builds Kueue's scalability configurations exactly, without running them."""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest

from muster.api.model import (
    ClusterQueue,
    Cohort,
    KueueConfig,
    LabelSelector,
    LocalQueue,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    WithinClusterQueue,
    Workload,
)
from muster.bench.kueue_perf import (
    BASELINE,
    CONFIGS,
    HIERARCHICAL_FAIR,
    LARGE_SCALE,
    PerfConfig,
    generate,
    scaled_count,
)
from muster.sim import build_scenario


def kinds(objects: tuple[object, ...]) -> Counter[str]:
    return Counter(type(obj).__name__ for obj in objects)


@pytest.mark.parametrize(
    ("config", "workloads", "cluster_queues", "per_class"),
    [
        pytest.param(BASELINE, 15_000, 30, {"small": 10_500, "medium": 3_000, "large": 1_500}),
        pytest.param(
            LARGE_SCALE, 50_000, 1_000, {"small": 35_000, "medium": 11_000, "large": 4_000}
        ),
    ],
    ids=["baseline", "large-scale"],
)
def test_generates_kueues_workload_and_queue_counts(
    config: PerfConfig, workloads: int, cluster_queues: int, per_class: dict[str, int]
) -> None:
    plan = generate(config)

    assert len(plan.workloads) == workloads
    assert plan.cluster_queues == cluster_queues
    assert kinds(plan.objects) == {
        "ResourceFlavor": 1,
        "ClusterQueue": cluster_queues,
        "LocalQueue": cluster_queues,
        "Workload": workloads,
    }
    assert Counter(wl.workload_class for wl in plan.workloads) == per_class
    assert len(plan.cohort_nominal_milli) == config.cohorts
    assert set(plan.cohort_nominal_milli.values()) == {config.cluster_queues_per_cohort * 20_000}


def test_every_cluster_queue_has_one_flavor_with_kueues_quota_and_policies() -> None:
    plan = generate(BASELINE, scale=0.01)
    queues = [obj for obj in plan.objects if isinstance(obj, ClusterQueue)]

    assert Counter(cq.cohort for cq in queues) == {f"cohort-{c}": 6 for c in range(5)}
    for cq in queues:
        ((flavor,),) = (group.flavors for group in cq.resource_groups)
        (quota,) = flavor.resources
        assert (flavor.name, quota.name, quota.nominal_quota, quota.borrowing_limit) == (
            "default",
            "cpu",
            20_000,
            100_000,
        )
        assert quota.lending_limit is None
        assert cq.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO
        assert cq.preemption.within_cluster_queue is WithinClusterQueue.LOWER_PRIORITY
        assert cq.preemption.reclaim_within_cohort is ReclaimWithinCohort.ANY
        assert cq.namespace_selector == LabelSelector()
    (flavor_object,) = [obj for obj in plan.objects if isinstance(obj, ResourceFlavor)]
    assert flavor_object.name == "default"


def test_each_cluster_queue_has_a_local_queue_in_its_own_namespace() -> None:
    plan = generate(BASELINE, scale=0.01)
    local_queues = [obj for obj in plan.objects if isinstance(obj, LocalQueue)]

    assert {(lq.meta.namespace, lq.meta.name, lq.cluster_queue) for lq in local_queues} == {
        (f"ns-{c}-{q}", "main", f"cq-{c}-{q}") for c in range(5) for q in range(6)
    }


def test_workloads_carry_class_shape_priority_and_arrival_annotations() -> None:
    plan = generate(BASELINE)
    workloads: dict[str, Workload] = {wl.key: wl for wl in plan.objects if isinstance(wl, Workload)}

    small = workloads["ns-2-3/small-349"]
    assert small.meta.annotations == {
        "muster.dev/submit-after": "34.9",
        "muster.dev/run-seconds": "0.2",
    }
    assert (small.priority, small.queue_name) == (50, "main")
    ((pod_set_name, count, requests),) = [
        (ps.name, ps.count, dict(ps.requests)) for ps in small.pod_sets
    ]
    assert (pod_set_name, count, requests) == ("main", 1, {"cpu": 1_000})
    large = workloads["ns-0-0/large-3"]
    assert large.meta.annotations["muster.dev/submit-after"] == "3.6"
    assert large.meta.annotations["muster.dev/run-seconds"] == "1.0"
    assert (large.priority, dict(large.pod_sets[0].requests)) == (200, {"cpu": 20_000})
    medium = workloads["ns-4-5/medium-0"]
    assert medium.meta.annotations["muster.dev/submit-after"] == "0.0"
    assert medium.priority == 100


def test_planned_workloads_match_the_objects_the_simulator_reads() -> None:
    plan = generate(LARGE_SCALE, scale=0.02)
    scenario = build_scenario(plan.objects)
    arrivals = {arrival.workload.key: arrival.at_s for arrival in scenario.arrivals}

    assert {wl.key: wl.arrival_s for wl in plan.workloads} == arrivals
    planned = plan.workloads[0]
    assert (planned.cluster_queue, planned.cohort, planned.cpu_milli) == (
        "cq-0-0",
        "cohort-0",
        1000,
    )


def test_same_arguments_give_identical_objects() -> None:
    first, second = generate(BASELINE, scale=0.1), generate(BASELINE, scale=0.1)

    assert msgspec.json.encode(first.objects) == msgspec.json.encode(second.objects)


@pytest.mark.parametrize(
    ("count", "scale", "expected"),
    [(350, 1.0, 350), (350, 0.1, 35), (4, 0.1, 1), (4, 0.0001, 1), (11, 0.5, 6), (50, 2.0, 100)],
)
def test_scale_multiplies_counts_and_keeps_one_per_class(
    count: int, scale: float, expected: int
) -> None:
    assert scaled_count(count, scale) == expected


def test_scale_shrinks_workloads_but_keeps_the_quota_tree() -> None:
    plan = generate(LARGE_SCALE, scale=0.001)

    assert len(plan.workloads) == 3 * 1_000
    assert plan.cluster_queues == 1_000


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan")])
def test_rejects_a_scale_that_is_not_positive(scale: float) -> None:
    with pytest.raises(ValueError, match="scale must be > 0"):
        generate(BASELINE, scale=scale)


def test_configurations_are_registered_by_name() -> None:
    assert list(CONFIGS) == ["baseline", "large-scale", "hierarchical-fair"]


def test_hierarchical_fair_nests_cohorts_three_deep_with_fair_sharing_on() -> None:
    plan = generate(HIERARCHICAL_FAIR)

    assert (len(plan.workloads), plan.cluster_queues) == (50_000, 1_000)
    (config,) = [obj for obj in plan.objects if isinstance(obj, KueueConfig)]
    assert config.fair_sharing.enable
    cohorts = {obj.name: obj.parent for obj in plan.objects if isinstance(obj, Cohort)}
    assert len(cohorts) == 5 * 4 + 5 * 4 * 5  # the roots are implicit
    queues = [obj for obj in plan.objects if isinstance(obj, ClusterQueue)]
    for cq in queues:
        leaf = cq.cohort
        assert leaf is not None
        mid = cohorts[leaf]
        assert mid is not None
        root = cohorts[mid]
        assert root is not None
        assert root not in cohorts  # implicit: a root
    assert set(Counter(cq.cohort for cq in queues).values()) == {10}
    assert set(plan.cohort_nominal_milli.values()) == {200 * 20_000}
