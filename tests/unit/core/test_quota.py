"""Kueue's hierarchical quota arithmetic on hand-built trees."""

from __future__ import annotations

from muster.api.model import FlavorQuotas, ResourceGroup, ResourceQuota
from muster.core.quota import QuotaNode, QuotaTree

FR = ("default", "cpu")


def _groups(nominal: int, *, borrowing: int | None = None, lending: int | None = None):
    quota = ResourceQuota(
        name="cpu", nominal_quota=nominal, borrowing_limit=borrowing, lending_limit=lending
    )
    return (
        ResourceGroup(
            covered_resources=("cpu",), flavors=(FlavorQuotas(name="default", resources=(quota,)),)
        ),
    )


def _tree(queues: dict[str, dict], cohorts: dict[str, dict] | None = None) -> QuotaTree:
    tree = QuotaTree()
    for name, spec in (cohorts or {}).items():
        node = tree.cohort(name)
        node.set_groups(_groups(spec.get("nominal", 0)))
        tree.link(node, spec.get("parent"))
    usage = {}
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


def test_cycle_detection_between_cohorts() -> None:
    tree = _tree({}, cohorts={"x": {"nominal": 0, "parent": "y"}, "y": {"nominal": 0}})
    assert tree.has_cycle("y", "x")
    assert not tree.has_cycle("y", None)
