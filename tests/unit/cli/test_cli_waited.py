"""The WAITED column of `muster simulate` and `muster run`: every wait in the queue summed, so a
workload preempted and requeued shows the time it waited again, not only its first wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.cli.main import main
from muster.contracts.v1 import events_pb2
from muster.launcher.driver import Driver, render_tracks

PREEMPTION = """\
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: main}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team-a, name: lq}
spec: {clusterQueue: main}
"""


def job(name: str, *, after: int, runs: int, labels: str = "") -> str:
    return f"""\
apiVersion: batch/v1
kind: Job
metadata:
  namespace: team-a
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: lq{labels}}}
  annotations: {{muster.dev/submit-after: "{after}", muster.dev/run-seconds: "{runs}"}}
spec:
  template:
    spec:
      containers: [{{name: main, resources: {{requests: {{cpu: "4"}}}}}}]
"""


def rows_of(table: str) -> dict[str, list[str]]:
    """WORKLOAD → the row's other cells, of the first table (workloads) in `table`."""
    header, *rows = table.split("\n\n")[0].splitlines()
    assert "WAITED" in header.split()
    return {row.split()[0]: row.split()[1:] for row in rows}


def test_simulate_counts_the_wait_after_a_preemption_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # t=0 low admitted; t=2 urgent preempts it (requeued at once); t=7 urgent ends, low admitted
    # again, to run its 12 s from the start: it waited 0 + 5 s and ran 2 + 12 s.
    path = tmp_path / "scenario.yaml"
    urgent = ", kueue.x-k8s.io/priority-class: urgent"
    jobs = [job("low", after=0, runs=12), job("urgent", after=2, runs=5, labels=urgent)]
    path.write_text("---\n".join([PREEMPTION, *jobs]))

    assert main(["simulate", str(path)]) == 0
    rows = rows_of(capsys.readouterr().out)

    (low,) = [cells for key, cells in rows.items() if key.startswith("team-a/job-low-")]
    (urgent_row,) = [cells for key, cells in rows.items() if "job-urgent-" in key]
    # QUEUE is "lq → main", then FLAVORS, WAITED, RAN, OUTCOME
    assert low[4:7] == ["5", "14", "Finished"]
    assert urgent_row[4:7] == ["0", "5", "Finished"]


def test_simulate_shows_how_long_a_never_admitted_workload_has_waited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("---\n".join([PREEMPTION, job("big", after=0, runs=30)]))
    path.write_text(path.read_text().replace('cpu: "4"', 'cpu: "5"'))

    assert main(["simulate", str(path), "--until", "40"]) == 0
    (cells,) = rows_of(capsys.readouterr().out).values()

    assert cells[4] == "40"  # queued the whole run
    assert cells[6] == "Pending:"


def waited(header: str, row: str) -> str:
    """The WAITED cell of an aligned row (QUEUE's "lq → main" has spaces)."""
    return row[header.index("WAITED") :].split()[0]


def envelope(key: str, **payload: object) -> events_pb2.Envelope:
    return events_pb2.Envelope(workload=key, **payload)  # type: ignore[arg-type]


def test_run_counts_every_wait_of_a_requeued_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    d = Driver(gateway="127.0.0.1:1", speed=1.0, print_line=lines.append, apply_nodes=list)
    clock = [0.0]
    monkeypatch.setattr(d, "now_s", lambda: clock[0])
    admitted = events_pb2.WorkloadAdmitted(admission=events_pb2.Admission(cluster_queue="main"))
    story: list[tuple[float, events_pb2.Envelope]] = [
        (0.0, envelope("ns/w", submitted=events_pb2.WorkloadSubmitted(queue_name="lq"))),
        (3.0, envelope("ns/w", admitted=admitted)),
        (10.0, envelope("ns/w", evicted=events_pb2.WorkloadEvicted(reason="Preempted"))),
        (11.0, envelope("ns/w", eviction_completed=events_pb2.EvictionCompleted())),
        (11.0, envelope("ns/w", requeued=events_pb2.WorkloadRequeued())),
        (18.0, envelope("ns/w", admitted=admitted)),
        (20.0, envelope("ns/w", finished=events_pb2.WorkloadFinished(succeeded=True))),
    ]
    for at, env in story:
        clock[0] = at
        d._apply(env)

    header, row = render_tracks(list(d.tracks.values()), now_s=30.0).splitlines()

    assert waited(header, row) == "10"  # 3 s before the first admission, 7 s after the requeue


def test_run_counts_a_wait_still_open_up_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    d = Driver(gateway="127.0.0.1:1", speed=1.0, print_line=lambda _: None, apply_nodes=list)
    monkeypatch.setattr(d, "now_s", lambda: 2.0)
    d._apply(envelope("ns/w", submitted=events_pb2.WorkloadSubmitted(queue_name="lq")))

    header, row = render_tracks(list(d.tracks.values()), now_s=9.0).splitlines()

    assert waited(header, row) == "7"


@pytest.mark.parametrize("command", ["simulate", "run"])
def test_the_help_says_what_waited_counts(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])

    assert "WAITED is the seconds a workload was queued, summed over" in " ".join(
        capsys.readouterr().out.split()
    )
