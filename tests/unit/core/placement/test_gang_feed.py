"""The gang feed: objects in, which pods a change touches and which gang each pod is in out.

Membership as gang-permit and the simulator both keep it (issue 18 item 2): these tests hold
what used to be checked twice, once through each of them.
"""

from __future__ import annotations

import textwrap

from muster.api import decode_yaml
from muster.api.model import ApiObject, Pod, PriorityClass
from muster.core.placement.feed import GangFeed, GangSource, Left
from muster.core.placement.model import GangKey, GangSpec, PodKey

WORKLOAD = """
apiVersion: scheduling.k8s.io/v1alpha1
kind: Workload
metadata: {{name: train, namespace: ml}}
spec:
  podGroups:
  - {{name: workers, policy: {policy}}}
"""
GROUPS = """
apiVersion: scheduling.k8s.io/v1alpha3
kind: CompositePodGroup
metadata: {name: root, namespace: ml}
spec:
  workloadRef: {workloadName: train, templateName: root}
  schedulingPolicy: {gang: {minGroupCount: 2}}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: workers-a, namespace: ml}
spec:
  parentCompositePodGroupName: root
  workloadRef: {workloadName: train, templateName: workers-a}
  schedulingPolicy: {gang: {minCount: 2}}
"""


def objects(text: str) -> list[ApiObject]:
    found, errors = decode_yaml(textwrap.dedent(text))
    assert [str(e) for e in errors] == []
    return found


def source(text: str) -> GangSource:
    (obj,) = objects(text)
    assert not isinstance(obj, Pod)
    return obj  # type: ignore[return-value]  # only gang sources in these documents


def pod(name: str, spec: str = "", *, labels: str = "{}", namespace: str = "ml") -> Pod:
    (obj,) = objects(
        f"""
        apiVersion: v1
        kind: Pod
        metadata: {{name: {name}, namespace: {namespace}, labels: {labels}}}
        spec: {{schedulerName: muster, {spec}}}
        """
    )
    assert isinstance(obj, Pod)
    return obj


def join(feed: GangFeed, p: Pod) -> tuple[GangKey | None, GangSpec | None, int, Left]:
    """A pod as both callers feed it: its membership, then its entry into its gang."""
    found, priority = feed.membership(p)
    left = feed.enter(PodKey(p.key), found.gang)
    return found.gang, found.spec, priority, left


def test_pods_that_arrive_before_their_workload_wait_and_are_touched_when_it_arrives() -> None:
    feed = GangFeed()
    pods = [pod(f"w-{i}", "workloadRef: {name: train, podGroup: workers}") for i in (1, 0)]
    for p in pods:
        gang, spec, _, _ = join(feed, p)
        assert (gang, spec) == ("ml/train/workers", None)

    touched = feed.put(source(WORKLOAD.format(policy="{gang: {minCount: 2}}")))

    assert touched == ("ml/w-0", "ml/w-1")
    gang, spec, _, _ = join(feed, pods[0])
    assert spec is not None
    assert (gang, spec.min_count) == ("ml/train/workers", 2)
    assert list(feed.members[GangKey("ml/train/workers")]) == ["ml/w-1", "ml/w-0"]  # as joined


def test_a_basic_policy_takes_pods_out_of_the_gang_and_the_last_one_empties_it() -> None:
    feed = GangFeed()
    pods = [pod(f"w-{i}", "workloadRef: {name: train, podGroup: workers}") for i in range(2)]
    for p in pods:
        join(feed, p)

    assert feed.put(source(WORKLOAD.format(policy="{basic: {}}"))) == ("ml/w-0", "ml/w-1")

    lefts = [join(feed, p)[3] for p in pods]
    assert lefts == [
        Left(gang=GangKey("ml/train/workers"), emptied=False),
        Left(gang=GangKey("ml/train/workers"), emptied=True),
    ]
    assert feed.members == {}


def test_the_same_workload_again_touches_nothing() -> None:
    feed = GangFeed()
    join(feed, pod("w-0", "workloadRef: {name: train, podGroup: workers}"))
    workload = source(WORKLOAD.format(policy="{gang: {minCount: 1}}"))
    assert feed.put(workload) == ("ml/w-0",)
    assert feed.put(workload) == ()


def test_a_group_touches_its_own_pods_a_composite_every_group_of_its_namespace() -> None:
    feed = GangFeed()
    composite, group = (source(doc) for doc in GROUPS.split("---"))
    a = pod("a-0", "schedulingGroup: {podGroupName: workers-a}")
    b = pod("b-0", "schedulingGroup: {podGroupName: workers-b}")
    elsewhere = pod("c-0", "schedulingGroup: {podGroupName: workers-a}", namespace="other")
    for p in (a, b, elsewhere):
        join(feed, p)

    assert feed.put(group) == ("ml/a-0",)
    assert feed.put(composite) == ("ml/a-0", "ml/b-0")
    found, _ = feed.membership(a)
    assert found.spec is not None
    assert [c.key for c in found.spec.parents] == ["ml/root"]


def test_a_group_whose_conditions_alone_changed_touches_nothing() -> None:
    feed = GangFeed()
    _, group = (source(doc) for doc in GROUPS.split("---"))
    join(feed, pod("a-0", "schedulingGroup: {podGroupName: workers-a}"))
    feed.put(group)
    written = source(
        GROUPS.split("---")[1]
        + "status: {conditions: [{type: PodGroupInitiallyScheduled, status: 'True'}]}"
    )

    assert feed.put(written) == ()


def test_a_kueue_admission_gives_its_pods_the_gang_and_the_workloads_priority() -> None:
    feed = GangFeed()
    p = pod("job-main-0", "priority: 1", labels="{muster.dev/workload: job}")
    gang, spec, priority, _ = join(feed, p)
    assert (gang, spec, priority) == ("ml/job", None, 1)
    admitted = GangSpec(key=GangKey("ml/job"), min_count=1, priority=9, workload="ml/job")

    assert feed.admit(admitted) == ("ml/job-main-0",)
    assert join(feed, p)[1:3] == (admitted, 9)
    assert feed.end("ml/job") == ("ml/job-main-0",)
    assert join(feed, p)[1:3] == (None, 1)


def test_the_clusters_priority_class_wins_over_the_configured_one() -> None:
    def priority_class(value: int) -> PriorityClass:
        (obj,) = objects(
            f"{{apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, "
            f"metadata: {{name: high}}, value: {value}}}"
        )
        assert isinstance(obj, PriorityClass)
        return obj

    feed = GangFeed(configured={"high": priority_class(10)})
    p = pod("solo", "priorityClassName: high")
    assert feed.priority(p) == 10
    feed.put(priority_class(20))
    assert feed.priority(p) == 20
    feed.remove(priority_class(20))
    assert feed.priority(p) == 10


def test_a_forgotten_pod_leaves_its_gang_and_is_touched_no_more() -> None:
    feed = GangFeed()
    p = pod("w-0", "workloadRef: {name: train, podGroup: workers}")
    join(feed, p)

    assert feed.forget(PodKey(p.key)) == Left(gang=GangKey("ml/train/workers"), emptied=True)
    assert feed.put(source(WORKLOAD.format(policy="{gang: {minCount: 1}}"))) == ()
