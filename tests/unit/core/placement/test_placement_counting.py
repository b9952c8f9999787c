"""Rooms: the counts, order and choice each signature's RoomCache keeps row by row equal those
computed over every node, whatever happened to the table in between (use added and freed, nodes
changed, added and removed, a new resource, more changes than the table remembers)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from muster.core.placement.counting import Rooms, choose, fit_counts, order_key
from muster.core.placement.model import NodeInfo, NodeName, PodInfo, PodKey, Scoring
from muster.core.placement.nodes import CHANGES_KEPT, NodeTable
from muster.core.placement.signature import Signature, signature_key

WANTED = (1, 3, 40, 500)


def node(name: str, cpu: int, *, ready: bool = True) -> NodeInfo:
    return NodeInfo(name=NodeName(name), allocatable={"cpu": cpu, "memory": 8_000}, ready=ready)


def signature(table: NodeTable, **requests: int) -> Signature:
    pod = PodInfo(key=PodKey("ns/p"), requests=requests)
    return Signature(signature_key(pod), pod, table)


def over_every_node(
    table: NodeTable, sig: Signature, scoring: Scoring, wanted: int
) -> tuple[list[int], list[int]]:
    free = table.free()
    counts = fit_counts(table, sig, free, sig.static_mask(table))
    keys = order_key(table, sig, free, scoring)
    rows, per_row = choose(counts, keys, table.rank, wanted, scoring)
    return rows.tolist(), per_row.tolist()


def kept(rooms: Rooms, sig: Signature, wanted: int) -> tuple[list[int], list[int]]:
    rows, per_row = rooms.of(sig).choose(wanted)
    return rows.tolist(), per_row.tolist()


def change(table: NodeTable, rng: random.Random, sig: Signature) -> None:
    """One random change of the kind the scheduler makes."""
    names = sorted(table.index)
    action = rng.random()
    if action < 0.6 and names:
        rows = np.array(sorted(rng.sample(range(len(names)), min(3, len(names)))))
        picked = np.array([table.index[NodeName(names[i])] for i in rows.tolist()])
        counts = np.array([rng.randint(-1, 3) for _ in picked], dtype=np.int64)
        table.add_use_rows(picked, counts, sig.demand(table))
    elif action < 0.8 and names:
        table.add_use(NodeName(rng.choice(names)), sig.demand(table), times=rng.randint(-2, 2))
    elif action < 0.9:
        name = f"n{rng.randint(0, 80):03d}"
        table.upsert(node(name, rng.choice((500, 1_000, 4_000)), ready=rng.random() > 0.1))
    elif names:
        table.remove(NodeName(rng.choice(names)))


@pytest.mark.parametrize("scoring", ["binpack", "spread"])
def test_kept_choice_equals_the_choice_over_every_node(scoring: Scoring) -> None:
    rng = random.Random(7)
    table = NodeTable()
    for i in range(60):
        table.upsert(node(f"n{i:03d}", rng.choice((500, 1_000, 4_000))))
    small, large = signature(table, cpu=100), signature(table, cpu=700, memory=1_000)
    rooms = Rooms(table, scoring)

    for step in range(400):
        change(table, rng, small if step % 2 else large)
        for sig in (small, large):
            for wanted in WANTED:
                assert kept(rooms, sig, wanted) == over_every_node(table, sig, scoring, wanted), (
                    step,
                    sig.requests,
                    wanted,
                )


def test_equal_nodes_are_taken_by_name_whatever_their_rows() -> None:
    table = NodeTable()
    for name in ("c", "a", "d", "b"):
        table.upsert(node(name, 1_000))
    sig = signature(table, cpu=400)

    rows, per_row = Rooms(table, "binpack").of(sig).choose(5)

    assert [table.name(r) for r in rows.tolist()] == ["a", "b", "c"]
    assert per_row.tolist() == [2, 2, 1]


def test_a_cache_older_than_the_changes_kept_starts_over() -> None:
    table = NodeTable()
    for i in range(10):
        table.upsert(node(f"n{i}", 4_000))
    sig = signature(table, cpu=100)
    rooms = Rooms(table, "binpack")
    rooms.of(sig)
    row = table.index[NodeName("n7")]
    for n in range(2 * CHANGES_KEPT + 1):  # the first of them is forgotten; one pod is left
        table.add_use(NodeName("n7"), sig.demand(table), times=1 if n % 2 == 0 else -1)

    assert table.changed_rows(0) is None
    assert kept(rooms, sig, 1) == ([row], [1])
    assert kept(rooms, sig, 1) == over_every_node(table, sig, "binpack", 1)


def test_a_new_resource_column_rebuilds_the_cache() -> None:
    table = NodeTable()
    table.upsert(node("a", 1_000))
    table.upsert(node("b", 1_000))
    sig = signature(table, cpu=300)
    table.add_use(NodeName("a"), sig.demand(table))
    rooms = Rooms(table, "binpack")
    rooms.of(sig)

    table.upsert(NodeInfo(name=NodeName("c"), allocatable={"cpu": 1_000, "gpu": 1}))
    table.add_use(NodeName("b"), sig.demand(table), times=2)

    assert kept(rooms, sig, 4) == over_every_node(table, sig, "binpack", 4)


def test_a_signature_forgotten_takes_its_counts_with_it() -> None:
    table = NodeTable()
    table.upsert(node("a", 1_000))
    rooms = Rooms(table, "binpack")
    rooms.of(signature(table, cpu=300))  # nothing else holds the signature

    assert len(rooms) == 0


@pytest.mark.parametrize("scoring", ["binpack", "spread"])
def test_a_few_rows_caught_up_one_by_one_equal_a_cache_built_afresh_bit_for_bit(
    scoring: Scoring,
) -> None:
    """A one-pod gang changes one row: its catch-up runs in Python, not numpy (FEW_ROWS).
    Its counts and float keys must be numpy's to the bit, or ties break otherwise."""
    rng = random.Random(11)
    table = NodeTable()
    for i in range(40):
        table.upsert(node(f"n{i:03d}", rng.choice((500, 1_000, 4_000)), ready=i % 9 != 0))
    sig = signature(table, cpu=300, memory=700)  # two scored columns: a sum, in order
    rooms = Rooms(table, scoring)
    rooms.of(sig)
    names = sorted(table.index)

    for _ in range(300):
        picked = rng.sample(names, rng.randint(1, 3))
        rows = np.array([table.index[NodeName(n)] for n in picked])
        counts = np.array([rng.randint(-1, 2) for _ in picked], dtype=np.int64)
        table.add_use_rows(rows, counts, sig.demand(table))
        cache = rooms.of(sig)
        fresh = Rooms(table, scoring).of(sig)
        assert cache.counts.tolist() == fresh.counts.tolist()
        assert cache.keys.tobytes() == fresh.keys.tobytes()


def test_one_row_added_to_equals_the_same_use_added_as_many_rows() -> None:
    one, many = NodeTable(), NodeTable()
    for table in (one, many):
        for name in ("a", "b"):
            table.upsert(node(name, 1_000))
    sig = signature(one, cpu=300)
    row_a, row_b = one.index[NodeName("a")], one.index[NodeName("b")]
    before = one.room_version

    one.add_use_rows(np.array([row_a]), np.array([2]), sig.demand(one))
    many.add_use_rows(np.array([row_a, row_b]), np.array([2, 0]), sig.demand(many))

    assert one.free().tolist() == many.free().tolist()
    assert one.free_of(NodeName("a"))["cpu"] == 400  # two pods of 300 on 1 000
    changed = one.changed_rows(before)  # readers look at that row again
    assert changed is not None
    assert changed.tolist() == [row_a]
