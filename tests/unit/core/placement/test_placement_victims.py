"""Victims: whole workloads in eviction order, the fewest that make room, or none."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from muster.core.placement.model import PodKey
from muster.core.placement.victims import Candidate, Pool, eviction_order, pick_victims


def workload(
    owner: str, *, priority: int = 0, created_s: float = 0.0, room: int = 1, row: int = 0
) -> Candidate:
    """One pod holding `room` on `row`."""
    return Candidate(
        owner=owner,
        priority=priority,
        created_s=created_s,
        pods=(PodKey(owner),),
        rows=np.array([row]),
        demand=np.array([[room]]),
    )


def needs(pool: Pool, room: int, *, on: int = 0) -> Callable[[Sequence[int]], list[int] | None]:
    """A gang that fits once the victims free `room` on row `on`, and uses only that row."""
    zero = np.zeros((2, 1), dtype=np.int64)

    def place(victims: Sequence[int]) -> list[int] | None:
        positions = np.asarray(victims, dtype=np.int64)
        if int(pool.room(zero, positions)[on, 0]) < room:
            return None
        touched: list[int] = pool.touching(positions, np.array([on])).tolist()
        return touched

    return place


def owners(pool: Pool, victims: list[int] | None) -> list[str] | None:
    return None if victims is None else sorted(pool.candidates[n].owner for n in victims)


def test_order_is_lowest_priority_then_newest_then_owner() -> None:
    ordered = eviction_order(
        [
            workload("b", priority=1, created_s=5),
            workload("a", priority=0, created_s=1),
            workload("c", priority=0, created_s=3),
            workload("d", priority=0, created_s=3),
        ]
    )

    assert [c.owner for c in ordered] == ["c", "d", "a", "b"]


def test_takes_just_enough_in_order() -> None:
    pool = Pool([workload(o, created_s=t) for o, t in [("x", 1), ("y", 2), ("z", 3)]])

    assert owners(pool, pick_victims(len(pool), needs(pool, 2))) == ["y", "z"]


def test_drops_early_victims_that_a_later_one_makes_unnecessary() -> None:
    pool = Pool([workload("tiny", priority=0, room=1), workload("huge", priority=1, room=5)])

    assert owners(pool, pick_victims(len(pool), needs(pool, 5))) == ["huge"]


def test_none_when_even_every_candidate_is_not_enough() -> None:
    pool = Pool([workload("a"), workload("b")])

    assert pick_victims(len(pool), needs(pool, 3)) is None
    assert pick_victims(0, needs(Pool([]), 0)) is None


def test_room_adds_up_per_row_and_skips_nodes_that_are_gone() -> None:
    pods = (PodKey("x-0"), PodKey("x-1"))
    a = Candidate("a", 0, 1.0, pods, np.array([0, 0]), np.array([[1, 2], [1, 2]]))
    b = Candidate("b", 0, 0.0, pods, np.array([1, -1]), np.array([[5, 5], [7, 7]]))
    pool = Pool([a, b])
    free = np.zeros((2, 2), dtype=np.int64)

    assert pool.room(free, np.array([0, 1])).tolist() == [[2, 4], [5, 5]]
    assert pool.room(free, np.array([1])).tolist() == [[0, 0], [5, 5]]
    assert free.tolist() == [[0, 0], [0, 0]]


def test_victims_whose_room_the_placement_does_not_use_are_spared() -> None:
    pool = Pool(
        [
            workload("elsewhere", created_s=3, room=9, row=1),
            workload("here-new", created_s=2, room=1),
            workload("here-old", created_s=1, room=1),
        ]
    )

    assert owners(pool, pick_victims(len(pool), needs(pool, 2))) == ["here-new", "here-old"]
    assert pool.touching(np.array([0, 1, 2]), np.array([1])).tolist() == [0]
