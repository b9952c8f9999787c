"""CompositePodGroups whose parents loop: the pods under them wait with a problem naming every
group of the loop (as a ClusterQueue's CohortCycle condition names the cohorts), the same
whichever group of the loop the pod's PodGroup hangs under."""

from __future__ import annotations

import textwrap

import pytest

from muster.api import decode_yaml
from muster.api.model import Pod
from muster.core.placement.feed import GangFeed

POD = """
apiVersion: v1
kind: Pod
metadata: {name: p-0, namespace: ml}
spec: {schedulerName: muster, schedulingGroup: {podGroupName: workers}}
"""


def composite(name: str, parent: str) -> str:
    above = f"parentCompositePodGroupName: {parent}" if parent else ""
    return f"""
apiVersion: scheduling.k8s.io/v1alpha3
kind: CompositePodGroup
metadata: {{name: {name}, namespace: ml}}
spec:
  {above}
  workloadRef: {{workloadName: train, templateName: {name}}}
  schedulingPolicy: {{gang: {{minGroupCount: 1}}}}
"""


def group(parent: str) -> str:
    return f"""
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {{name: workers, namespace: ml}}
spec:
  parentCompositePodGroupName: {parent}
  workloadRef: {{workloadName: train, templateName: workers}}
  schedulingPolicy: {{gang: {{minCount: 1}}}}
"""


def problem(docs: list[str]) -> str:
    found, errors = decode_yaml(textwrap.dedent("---".join([*docs, POD])))
    assert [str(e) for e in errors] == []
    feed = GangFeed()
    *sources, pod = found
    assert isinstance(pod, Pod)
    for obj in sources:
        feed.put(obj)  # type: ignore[arg-type]  # only gang sources before the pod
    membership, _ = feed.membership(pod)
    return membership.problem


@pytest.mark.parametrize("under", ["a", "b"])
def test_a_loop_of_two_is_named_whole_from_either_group(under: str) -> None:
    docs = [composite("a", "b"), composite("b", "a"), group(under)]
    assert problem(docs) == (
        "the CompositePodGroups above ml/workers form the cycle ml/a -> ml/b -> ml/a"
    )


def test_a_loop_longer_than_the_depth_limit_is_named_as_a_loop() -> None:
    names = "abcde"
    docs = [composite(n, names[(i + 1) % 5]) for i, n in enumerate(names)]
    assert problem([*docs, group("c")]) == (
        "the CompositePodGroups above ml/workers form the cycle "
        "ml/a -> ml/b -> ml/c -> ml/d -> ml/e -> ml/a"
    )


def test_a_chain_too_deep_without_a_loop_says_so() -> None:
    names = "abcde"
    docs = [composite(n, names[i + 1] if i < 4 else "") for i, n in enumerate(names)]
    assert problem([*docs, group("a")]) == "more than 4 levels of groups above ml/workers"


def test_a_group_under_a_loop_it_is_not_part_of_names_the_loop() -> None:
    docs = [composite("top", "x"), composite("x", "y"), composite("y", "x"), group("top")]
    assert problem(docs) == (
        "the CompositePodGroups above ml/workers form the cycle ml/x -> ml/y -> ml/x"
    )
