"""Pending pages against a list sorted afresh: same order, bounded pages, counts per LocalQueue,
and the ids each change reports cover every page whose content changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core.pending_pages import PendingPages
from muster.core.records import WorkloadRecord


@dataclass(frozen=True)
class Waiting:
    """What pages read of a record."""

    key: str
    order_key: tuple[int, float, int]
    local_queue: str


def contents(pages: PendingPages) -> dict[int, list[str]]:
    return {p.id: [r.key for r in p.records] for p in pages.pages}


def check(pages: PendingPages, expected: list[Waiting]) -> None:
    assert [r.key for r in pages] == [w.key for w in sorted(expected, key=lambda w: w.order_key)]
    assert len(pages) == len(expected)
    ids = [p.id for p in pages.pages]
    assert len(set(ids)) == len(ids)
    for page in pages.pages:
        assert 1 <= len(page.records) <= pages.page_max
        if len(pages.pages) > 1:
            assert len(page.records) >= pages.page_min
        counts: dict[str, int] = {}
        for r in page.records:
            counts[r.local_queue] = counts.get(r.local_queue, 0) + 1
        assert page.local_queues == counts


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 40), st.integers(0, 2)),
        max_size=120,
    ),
    st.sampled_from([(1, 2), (2, 4), (3, 8)]),
)
def test_pages_hold_the_order_afresh_and_report_every_page_they_change(
    ops: list[tuple[bool, int, int, int]], bounds: tuple[int, int]
) -> None:
    pages = PendingPages(page_min=bounds[0], page_max=bounds[1])
    waiting: list[Waiting] = []
    for seq, (arrive, priority, pick, lq) in enumerate(ops):
        before = contents(pages)
        if arrive or not waiting:
            w = Waiting(f"w{seq}", (-priority, float(pick), seq), f"ns/lq{lq}")
            waiting.append(w)
            touched = pages.insert(cast(WorkloadRecord, w))
        else:
            w = waiting.pop(pick % len(waiting))
            touched = pages.remove(cast(WorkloadRecord, w), "cq")
        after = contents(pages)
        changed = {i for i in before.keys() | after.keys() if before.get(i) != after.get(i)}
        assert changed <= set(touched)
        check(pages, waiting)


def test_an_arrival_at_the_head_of_a_long_queue_changes_one_page() -> None:
    pages = PendingPages()
    for seq in range(1000):
        pages.insert(cast(WorkloadRecord, Waiting(f"w{seq}", (0, 0.0, seq), "ns/lq")))
    first = pages.pages[0].id
    urgent = Waiting("urgent", (-1, 0.0, 1000), "ns/lq")
    assert pages.insert(cast(WorkloadRecord, urgent)) == [first]
    assert next(iter(pages)) is cast(WorkloadRecord, urgent)


def test_removing_what_is_not_waiting_names_it() -> None:
    pages = PendingPages()
    pages.insert(cast(WorkloadRecord, Waiting("ns/a", (0, 0.0, 1), "ns/lq")))
    with pytest.raises(AssertionError, match="ns/b is not waiting in ClusterQueue 'cq'"):
        pages.remove(cast(WorkloadRecord, Waiting("ns/b", (0, 0.0, 2), "ns/lq")), "cq")


def test_bounds_that_cannot_hold_a_split_are_refused() -> None:
    with pytest.raises(ValueError, match="min"):
        PendingPages(page_min=3, page_max=4)
