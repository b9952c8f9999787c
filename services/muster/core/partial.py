"""Partial admission: the largest podset counts, down to each `minCount`, that can be admitted."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from muster.api.model import PodSet

T = TypeVar("T")


def least_counts(pod_sets: Sequence[PodSet]) -> list[int]:
    """Each podset's count at its `minCount` (its full count without one): the last step."""
    return [ps.min_count if ps.min_count is not None else ps.count for ps in pod_sets]


def reduce_counts(pod_sets: Sequence[PodSet], admit: Callable[[list[int]], T | None]) -> T | None:
    """The result of `admit` at the largest reduced counts it accepts, or None.

    Kueue's PodSetReducer: step i of D (D the sum of what every podset may give up) takes
    floor(i * d / D) pods off a podset that may give up d, so podsets shrink together; a binary
    search (Go's sort.Search) finds the smallest step `admit` accepts, assuming that fewer pods
    never fit worse. `admit` may accept a count that fits only after preemption.
    """
    deltas = [ps.count - least for ps, least in zip(pod_sets, least_counts(pod_sets), strict=True)]
    total = sum(deltas)
    if total <= 0:
        return None

    def counts(step: int) -> list[int]:
        return [ps.count - d * step // total for ps, d in zip(pod_sets, deltas, strict=True)]

    lo, hi = 0, total + 1
    found: T | None = None
    found_at = 0
    while lo < hi:
        mid = (lo + hi) // 2
        result = admit(counts(mid))
        if result is None:
            lo = mid + 1
        else:
            hi, found, found_at = mid, result, mid
    return found if lo == found_at else None
