"""A Job's finished pods become its Workload's status.reclaimablePods, as Kueue's Job
integration counts them (pkg/controller/jobs/job, `ReclaimablePods`)."""

from __future__ import annotations

import pytest

from muster.api.decode import decode_yaml
from muster.api.model import ReclaimablePod, Workload


def _reclaimable(spec: str, status: str) -> tuple[ReclaimablePod, ...]:
    objects, errors = decode_yaml(f"""
apiVersion: batch/v1
kind: Job
metadata: {{namespace: ns, name: j, uid: u1}}
spec:
  {spec}
  template: {{spec: {{containers: [{{name: c}}], restartPolicy: Never}}}}
status: {status}
""")
    assert errors == []
    (wl,) = objects
    assert isinstance(wl, Workload)
    return wl.reclaimable_pods


@pytest.mark.parametrize(
    ("spec", "status", "count"),
    [
        # 10 to do, 4 at once: reclaimable once fewer than 4 remain
        ("{parallelism: 4, completions: 10}", "{succeeded: 6}", 0),
        ("{parallelism: 4, completions: 10}", "{succeeded: 7}", 1),
        ("{parallelism: 4, completions: 10}", "{succeeded: 10}", 4),
        # completions below parallelism: the podset has 3 pods, at most 3 reclaimable
        ("{parallelism: 4, completions: 3}", "{succeeded: 3}", 3),
        # one pod at a time never gives anything back
        ("{parallelism: 1, completions: 5}", "{succeeded: 5}", 0),
        # no completions: every pod is one completion (completions = parallelism)
        ("{parallelism: 3}", "{succeeded: 1}", 1),
        ("{parallelism: 3}", "{}", 0),
    ],
)
def test_non_indexed_jobs_count_succeeded_pods(spec: str, status: str, count: int) -> None:
    spec = spec.strip("{}").replace(", ", "\n  ")
    expected = (ReclaimablePod(name="main", count=count),) if count else ()
    assert _reclaimable(spec, status) == expected


@pytest.mark.parametrize(
    ("status", "count"),
    [
        ('{completedIndexes: "0-3", succeeded: 0}', 2),  # indexes, not succeeded, count
        ('{completedIndexes: "0-2", failedIndexes: "2-3,5"}', 3),  # union: 0-3 and 5
        ('{completedIndexes: "0-3,5-20"}', 3),  # indexes from 6 on are past completions 6
        ('{completedIndexes: "5-3,x,1-"}', 0),  # malformed or descending: nothing
    ],
)
def test_indexed_jobs_count_terminal_indexes(status: str, count: int) -> None:
    spec = "parallelism: 4\n  completions: 6\n  completionMode: Indexed"
    expected = (ReclaimablePod(name="main", count=count),) if count else ()
    assert _reclaimable(spec, status) == expected
