"""A Job's reclaimable pods: the pods its finished work no longer needs, as Kueue counts them.

Kueue (ff69552e79, pkg/controller/jobs/job/job_controller.go `ReclaimablePods`,
`terminalIndexesCount`): a Job of parallelism p > 1 with t > 0 terminal pods has
`remaining = max(completions - t, 0)` left to run; when that is less than p, `p - remaining`
pods of podset "main" are reclaimable, capped at the podset's count
(pkg/workload `LimitReclaimablePodsToPodSetSizes`). t is status.succeeded, or for an Indexed
Job the union of status.completedIndexes and status.failedIndexes below completions (a
malformed or descending interval counts nothing, as Kueue skips it).
"""

from __future__ import annotations

from typing import Final

from muster.api.model import ReclaimablePod
from muster.api.raw import RawJob

_GO_INT_MAX: Final = 2**63 - 1  # Go's int on 64-bit: a larger index fails strconv.Atoi
_GO_INT_DIGITS: Final = len(str(_GO_INT_MAX))


def job_reclaimable_pods(raw: RawJob, *, pod_set: str, count: int) -> tuple[ReclaimablePod, ...]:
    """Job `raw`'s reclaimable pods of its podset `pod_set` of `count` pods (none: empty)."""
    spec, status = raw.spec, raw.status
    parallelism = spec.parallelism if spec.parallelism is not None else 1
    completions = spec.completions if spec.completions is not None else parallelism
    if spec.completion_mode == "Indexed":
        terminal = terminal_indexes(
            status.completed_indexes, status.failed_indexes or "", completions
        )
    else:
        terminal = status.succeeded
    if parallelism <= 1 or terminal <= 0:
        return ()
    remaining = max(completions - terminal, 0)
    if remaining >= parallelism:
        return ()
    return (ReclaimablePod(name=pod_set, count=min(parallelism - remaining, count)),)


def terminal_indexes(completed: str, failed: str, completions: int) -> int:
    """How many indexes below `completions` the two interval lists ("1,3-5") name together."""
    intervals: list[tuple[int, int]] = []
    for indexes in (completed, failed):
        for interval in filter(None, indexes.split(",")):
            bounds = _bounds(interval)
            if bounds is not None and bounds[0] <= min(bounds[1], completions - 1):
                intervals.append((bounds[0], min(bounds[1], completions - 1)))
    counted, last = 0, -1
    for first, end in sorted(intervals):
        first = max(first, last + 1)
        if first <= end:
            counted += end - first + 1
            last = end
    return counted


def _bounds(interval: str) -> tuple[int, int] | None:
    """ "3" or "3-5" as inclusive bounds; None when malformed or descending."""
    first_text, dash, last_text = interval.partition("-")
    first = _number(first_text)
    last = _number(last_text) if dash else first
    if first is None or last is None:
        return None
    return (first, last) if first <= last else None


def _number(text: str) -> int | None:
    """`text` as Kueue's parser (strconv.Atoi) reads an index: None where that fails, as for
    a number past int64 (also past Python's int() limit of 4 300 digits, which would raise)."""
    if not (text.isascii() and text.isdigit()) or len(text) > _GO_INT_DIGITS:
        return None
    value = int(text)
    return value if value <= _GO_INT_MAX else None
