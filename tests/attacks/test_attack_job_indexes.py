"""An Indexed Job whose status.completedIndexes names an index too long to be a number, as the
watcher reads it from the cluster: Kueue skips an interval its parser cannot read
(strconv.Atoi past int64), so it counts nothing here either. Python's int() raised on 4 300
digits and more, out of the watcher's decoding of the Job."""

from __future__ import annotations

from typing import Any

import pytest

from muster.api.model import ReclaimablePod
from muster.watcher.translate import workload_of

HUGE = "9" * 5_000  # past Python's 4 300-digit limit on int(str)
PAST_INT64 = str(2**63)  # 19 digits, as many as int64's largest, yet past it


def indexed_job(completed: str) -> dict[str, Any]:
    """A Job as the API server lists it: 4 indexes, 4 at once, its finished ones in status."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "uid": "u1",
            "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
        },
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "completionMode": "Indexed",
            "template": {"spec": {"containers": [{"name": "c"}], "restartPolicy": "Never"}},
        },
        "status": {"completedIndexes": completed},
    }


@pytest.mark.parametrize(
    ("completed", "reclaimable"),
    [
        (HUGE, 0),
        (f"0-{HUGE}", 0),
        (f"{HUGE}-{HUGE}", 0),
        (f"0,{HUGE},2", 2),  # the readable intervals still count
        (f"1,{PAST_INT64}", 1),
        ("0-99999999999", 4),  # an int64 past completions is read, and capped at them
    ],
)
def test_an_index_too_long_for_a_number_counts_nothing(completed: str, reclaimable: int) -> None:
    wl, problems = workload_of(indexed_job(completed))

    assert problems == []
    assert wl is not None
    expected = (ReclaimablePod(name="main", count=reclaimable),) if reclaimable else ()
    assert wl.reclaimable_pods == expected
