"""NodeTable: a column per resource, rows reused, use kept for nodes that come back."""

from __future__ import annotations

import numpy as np

from muster.core.placement.model import DEFAULT_MAX_PODS, NodeInfo, NodeName
from muster.core.placement.nodes import MISSING, NodeTable


def info(name: str, **allocatable: int) -> NodeInfo:
    return NodeInfo(name=NodeName(name), allocatable=allocatable, labels={"rack": name[0]})


def test_pods_is_always_a_column_and_new_resources_add_columns() -> None:
    table = NodeTable()
    table.upsert(info("a", cpu=4000))
    table.upsert(info("b", cpu=2000, gpu=1000))

    assert table.resource_names == ["pods", "cpu", "gpu"]
    assert table.free_of(NodeName("a")) == {"pods": DEFAULT_MAX_PODS, "cpu": 4000}
    assert table.free_of(NodeName("b")) == {"pods": DEFAULT_MAX_PODS, "cpu": 2000, "gpu": 1000}


def test_use_of_a_removed_node_comes_back_with_it_and_rows_are_reused() -> None:
    table = NodeTable()
    for name in ("a", "b", "c"):
        table.upsert(info(name, cpu=4000))
    table.add_use(NodeName("b"), table.vector({"cpu": 1500}))
    row_b = table.index[NodeName("b")]

    table.remove(NodeName("b"))
    table.add_use(NodeName("b"), table.vector({"cpu": 500}))  # a pod on it still reports
    table.upsert(info("d", cpu=4000))
    table.upsert(info("b", cpu=4000))

    assert table.index[NodeName("d")] == row_b
    assert table.free_of(NodeName("b"))["cpu"] == 2000
    assert table.size == 4


def test_rank_orders_rows_by_node_name() -> None:
    table = NodeTable()
    for name in ("c", "a", "b"):
        table.upsert(info(name))

    ranks = {name: int(table.rank[row]) for name, row in table.index.items()}
    assert ranks == {"a": 0, "b": 1, "c": 2}


def test_label_columns_follow_node_changes() -> None:
    table = NodeTable()
    table.upsert(info("a1"))
    rack = table.label("rack")
    table.upsert(info("b1"))
    table.remove(NodeName("a1"))

    codes = {name: int(rack.codes[row]) for name, row in table.index.items()}
    assert [rack.values[c] for c in codes.values()] == ["b"]
    assert int(np.sum(rack.codes != MISSING)) == 1


def test_unchanged_node_is_not_an_update() -> None:
    table = NodeTable()
    assert table.upsert(info("a", cpu=1000))
    version = table.version

    assert not table.upsert(info("a", cpu=1000))
    assert table.version == version
