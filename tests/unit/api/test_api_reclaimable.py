"""A Workload's status.reclaimablePods: read as Kueue's webhook admits it, written back."""

from __future__ import annotations

from muster.api.decode import decode_yaml
from muster.api.encode import workload_to_kueue
from muster.api.model import ReclaimablePod, Workload

WORKLOAD = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {namespace: ns, name: w}
spec:
  podSets:
  - {name: main, count: 2, template: {spec: {containers: [{name: c}]}}}
  - {name: aux, count: 1, template: {spec: {containers: [{name: c}]}}}
status:
  reclaimablePods: %s
"""


def test_reclaimable_pods_are_read_and_written_back() -> None:
    (wl,), errors = decode_yaml(WORKLOAD % "[{name: main, count: 2}, {name: aux, count: 0}]")
    assert errors == []
    assert isinstance(wl, Workload)
    assert wl.reclaimable_pods == (
        ReclaimablePod(name="main", count=2),
        ReclaimablePod(name="aux", count=0),
    )
    assert workload_to_kueue(wl)["status"]["reclaimablePods"] == [
        {"name": "main", "count": 2},
        {"name": "aux", "count": 0},
    ]


def test_each_names_a_podset_once_with_at_most_its_pods() -> None:
    entries = (
        "[{name: other, count: 1}, {name: main, count: 3}, {name: aux, count: -1},"
        " {name: aux, count: 1}]"
    )
    objects, errors = decode_yaml(WORKLOAD % entries)
    assert objects == []
    assert [str(e) for e in errors] == [
        'Workload/ns/w: status.reclaimablePods[0].name: "other" is not a podset of the workload'
        " (main, aux)",
        "Workload/ns/w: status.reclaimablePods[1].count: must be between 0 and 2, got 3",
        "Workload/ns/w: status.reclaimablePods[2].count: must be between 0 and 1, got -1",
        'Workload/ns/w: status.reclaimablePods[3].name: "aux" is listed twice',
    ]
