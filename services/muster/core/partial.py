"""Partial admission: the largest podset counts, down to each `minCount`, that fit now."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from muster.api.model import PodSet
from muster.core.flavors import Assignment, Mode


def reduced_assignment(
    pod_sets: Sequence[PodSet], assign: Callable[[list[int]], Assignment]
) -> Assignment | None:
    """Binary-search the smallest reduction that fits, shrinking podsets together.

    Kueue's rule: every podset with a `minCount` gives up pods in proportion to how far it
    may shrink; podsets without one keep their count. None if nothing down to the minimum fits.
    """
    slack = [ps.count - ps.min_count if ps.min_count is not None else 0 for ps in pod_sets]
    most = max(slack, default=0)
    if most <= 0:
        return None

    def counts(step: int) -> list[int]:
        # ceil(step * slack / most) pods fewer in each podset
        return [ps.count - (-(-step * s // most)) for ps, s in zip(pod_sets, slack, strict=True)]

    best: Assignment | None = None
    lo, hi = 1, most
    while lo <= hi:
        mid = (lo + hi) // 2
        a = assign(counts(mid))
        if a.mode is Mode.FIT:
            best, hi = a, mid - 1
        else:
            lo = mid + 1
    return best
