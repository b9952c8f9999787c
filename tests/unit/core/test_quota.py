"""Kueue's hierarchical quota arithmetic on hand-built trees."""

from __future__ import annotations

from typing import Required, TypedDict

import pytest

from muster.api.model import Cohort, FlavorQuotas, ObjectMeta, ResourceGroup, ResourceQuota
from muster.core.config import cohort_cycles
from muster.core.quota import QuotaNode, QuotaTree, borrowing_level

FR = ("default", "cpu")


class QueueSpec(TypedDict, total=False):
    nominal: Required[int]
    used: int
    borrowing: int
    lending: int
    cohort: str


class CohortSpec(TypedDict, total=False):
    nominal: int
    parent: str


def _groups(
    nominal: int, *, borrowing: int | None = None, lending: int | None = None
) -> tuple[ResourceGroup, ...]:
    quota = ResourceQuota(
        name="cpu", nominal_quota=nominal, borrowing_limit=borrowing, lending_limit=lending
    )
    return (
        ResourceGroup(
            covered_resources=("cpu",), flavors=(FlavorQuotas(name="default", resources=(quota,)),)
        ),
    )


def _tree(queues: dict[str, QueueSpec], cohorts: dict[str, CohortSpec] | None = None) -> QuotaTree:
    tree = QuotaTree()
    for name, cohort in (cohorts or {}).items():
        node = tree.cohort(name)
        node.set_groups(_groups(cohort.get("nominal", 0)))
        tree.link(node, cohort.get("parent"))
    usage: dict[str, dict[tuple[str, str], int]] = {}
    for name, spec in queues.items():
        node = tree.cluster_queues[name] = QuotaNode(name, is_cohort=False)
        node.set_groups(
            _groups(spec["nominal"], borrowing=spec.get("borrowing"), lending=spec.get("lending"))
        )
        tree.link(node, spec.get("cohort"))
        usage[name] = {FR: spec.get("used", 0)}
    tree.recompute(usage)
    return tree


def test_queue_without_cohort_has_its_nominal_minus_usage() -> None:
    tree = _tree({"a": {"nominal": 10, "used": 4}})
    assert tree.cluster_queues["a"].available(FR) == 6
    assert tree.cluster_queues["a"].potential_available(FR) == 10


def test_queue_borrows_what_its_cohort_peers_do_not_use() -> None:
    tree = _tree(
        {
            "a": {"nominal": 10, "used": 4, "cohort": "c"},
            "b": {"nominal": 10, "used": 1, "cohort": "c"},
        }
    )
    assert tree.cluster_queues["a"].available(FR) == 15
    assert tree.cluster_queues["a"].potential_available(FR) == 20


def test_borrowing_limit_caps_what_a_queue_takes_from_the_cohort() -> None:
    tree = _tree(
        {
            "a": {"nominal": 10, "used": 4, "cohort": "c", "borrowing": 2},
            "b": {"nominal": 10, "cohort": "c"},
        }
    )
    assert tree.cluster_queues["a"].available(FR) == 8
    assert tree.cluster_queues["a"].potential_available(FR) == 12


def test_lending_limit_keeps_the_rest_for_the_lender() -> None:
    tree = _tree(
        {
            "a": {"nominal": 10, "cohort": "c", "lending": 3},
            "b": {"nominal": 0, "cohort": "c"},
        }
    )
    assert tree.cluster_queues["b"].available(FR) == 3
    assert tree.cluster_queues["a"].available(FR) == 10


def test_lender_usage_within_its_guarantee_does_not_reduce_what_it_lends() -> None:
    tree = _tree(
        {
            "a": {"nominal": 10, "used": 7, "cohort": "c", "lending": 3},
            "b": {"nominal": 0, "cohort": "c"},
        }
    )
    assert tree.cluster_queues["b"].available(FR) == 3
    tree.cluster_queues["a"].add_usage(FR, 1)  # 8 used: one above its guarantee of 7
    assert tree.cluster_queues["b"].available(FR) == 2
    assert tree.cohorts["c"].usage[FR] == 1


def test_cohort_with_own_quota_and_parent_lends_to_the_whole_tree() -> None:
    tree = _tree(
        {"a": {"nominal": 2, "used": 2, "cohort": "child"}, "b": {"nominal": 0, "cohort": "root"}},
        cohorts={"root": {"nominal": 0}, "child": {"nominal": 5, "parent": "root"}},
    )
    assert tree.cohorts["root"].subtree_quota[FR] == 7
    assert tree.cluster_queues["a"].available(FR) == 5
    assert tree.cluster_queues["b"].available(FR) == 5


def test_usage_changes_propagate_up_incrementally() -> None:
    tree = _tree(
        {"a": {"nominal": 2, "cohort": "child"}},
        cohorts={"root": {"nominal": 0}, "child": {"nominal": 5, "parent": "root"}},
    )
    tree.cluster_queues["a"].add_usage(FR, 6)
    assert tree.cohorts["child"].usage[FR] == 6
    assert tree.cohorts["root"].usage[FR] == 6
    tree.cluster_queues["a"].add_usage(FR, -6)
    assert tree.cohorts["root"].usage[FR] == 0


@pytest.mark.parametrize(("first", "second"), [("a", "b"), ("b", "a"), ("z", "m")])
def test_a_cohort_cycle_is_found_and_named_whatever_the_names(first: str, second: str) -> None:
    def cohort(name: str, parent: str | None = None) -> Cohort:
        return Cohort(meta=ObjectMeta(name=name), parent=parent)

    cohorts = {
        first: cohort(first, second),
        second: cohort(second, first),
        "into": cohort("into", first),  # not on the loop, but its parents lead into it
        "free": cohort("free", "root"),
    }
    loop = tuple(sorted((first, second)))
    assert cohort_cycles(cohorts) == {first: loop, second: loop, "into": loop}


def test_borrowing_level_is_the_height_of_the_lowest_subtree_that_fits() -> None:
    # root (4) -> mid (2) -> cq (1); another cq under root.
    tree = _tree(
        {"cq": {"nominal": 1, "cohort": "mid"}, "other": {"nominal": 0, "cohort": "root"}},
        cohorts={"root": {"nominal": 4}, "mid": {"nominal": 2, "parent": "root"}},
    )
    cq = tree.cluster_queues["cq"]
    assert borrowing_level(cq, FR, 1) == (0, True)  # its own quota
    assert borrowing_level(cq, FR, 3) == (1, True)  # mid's subtree (1 + 2), below the root
    assert borrowing_level(cq, FR, 7) == (2, False)  # the whole tree (1 + 2 + 4)
    assert borrowing_level(cq, FR, 8) == (2, False)  # nowhere: the root's height
