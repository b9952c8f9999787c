"""`muster simulate --validate`: unknown fields as kubectl's strict field validation treats them,
`generateName`, and hostile input answered with exit 2 and one line per problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile import alias_bomb

from muster.cli.main import main

CLUSTER = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cluster-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 9}, {name: memory, nominalQuota: 36Gi}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: default, name: user-queue}
spec: {clusterQueue: cluster-queue}
"""
# Shaped as Kueue's own sample Job: no name, a generateName.
SAMPLE_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  generateName: sample-job-
  namespace: default
  labels: {kueue.x-k8s.io/queue-name: user-queue}
spec:
  parallelism: 3
  completions: 3
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: dummy-job
        image: registry.k8s.io/e2e-test-images/agnhost:2.53
        args: ["pause"]
        resources: {requests: {cpu: "1", memory: 200Mi}}
"""
TYPOS = CLUSTER.replace(
    "  namespaceSelector: {}", "  namespaceSelector: {}\n  resourceGroup: []"
) + ("---\n" + SAMPLE_JOB.replace("  suspend: true", "  suspnd: true")).replace(
    "      - name: dummy-job", "      - name: dummy-job\n        resource: {}"
)


def simulate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, *args: str
) -> tuple[int, str, str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    status = main(["simulate", str(path), *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_every_unknown_field_of_a_file_is_refused_in_one_pass(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = simulate(capsys, tmp_path, TYPOS)

    assert (status, out) == (2, "")
    lines = err.splitlines()
    assert "ClusterQueue/cluster-queue: spec.resourceGroup: unknown field" in lines
    job_lines = [line for line in lines if line.startswith("Job/default/sample-job-")]
    assert [line.split(": ", 1)[1] for line in job_lines] == [
        "spec.suspnd: unknown field",
        "spec.template.spec.containers[0].resource: unknown field",
    ]


def test_warn_runs_and_prints_each_unknown_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = simulate(capsys, tmp_path, TYPOS, "--validate", "warn", "-o", "json")

    assert status == 0
    assert "Warning: ClusterQueue/cluster-queue: spec.resourceGroup: unknown field" in err
    assert len(err.splitlines()) == 3
    assert len(json.loads(out)["workloads"]) == 1


def test_ignore_runs_silently(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = simulate(capsys, tmp_path, TYPOS, "--validate", "ignore", "-o", "json")

    assert (status, err) == (0, "")
    assert len(json.loads(out)["workloads"]) == 1


def test_a_key_written_twice_is_refused_under_strict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = CLUSTER.replace(
        "  namespaceSelector: {}", "  namespaceSelector: {}\n  stopPolicy: None\n  stopPolicy: Hold"
    )

    status, _, err = simulate(capsys, tmp_path, text)

    assert status == 2
    assert err == (
        f"{tmp_path / 'scenario.yaml'}: line 11: duplicate key 'stopPolicy':"
        " the later value replaces the earlier\n"
    )


def test_kueues_sample_job_with_generate_name_runs_under_a_deterministic_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = f"{CLUSTER}---\n{SAMPLE_JOB}"

    status, out, err = simulate(capsys, tmp_path, text, "-o", "json")
    _, again, _ = simulate(capsys, tmp_path, text, "-o", "json")

    assert (status, err) == (0, "")
    (wl,) = json.loads(out)["workloads"]
    job_name = wl["metadata"]["ownerReferences"][0]["name"]
    assert job_name.startswith("sample-job-")
    assert len(job_name) == len("sample-job-") + 5
    assert wl["status"]["admission"]["clusterQueue"] == "cluster-queue"
    assert out == again


def test_an_alias_bomb_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = simulate(capsys, tmp_path, alias_bomb())

    assert (status, out) == (2, "")
    assert err.endswith(
        ": line 11: aliases expand to more than the input's own values + 10000 (an alias bomb?)\n"
    )


def test_run_seconds_in_arabic_indic_digits_are_not_twelve_seconds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = SAMPLE_JOB.replace(
        "  namespace: default\n",
        "  namespace: default\n  annotations: {muster.dev/run-seconds: '١٢'}\n",
    )

    status, _, err = simulate(capsys, tmp_path, f"{CLUSTER}---\n{job}")

    assert status == 2
    assert err.endswith(
        ': metadata.annotations["muster.dev/run-seconds"]:'
        " must be a number of seconds, got '١٢'\n"
    )


def test_a_workload_admitted_with_more_pods_than_it_has_is_a_field_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Scenarios keep status.admission; with Nodes its pods are made, one object each: 50
    # million of them ended in MemoryError (or the machine's memory) before the check.
    node = (
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"
        "status: {capacity: {cpu: '8', memory: 8Gi, pods: '110'}}\n"
    )
    admitted = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: pre, namespace: default}
spec:
  queueName: user-queue
  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}]
status:
  admission:
    clusterQueue: cluster-queue
    podSetAssignments: [{name: main, count: 50000000, flavors: {cpu: default-flavor}}]
"""
    status, out, err = simulate(capsys, tmp_path, f"{CLUSTER}---\n{node}---\n{admitted}")

    assert (status, out) == (2, "")
    assert err == (
        "Workload/default/pre: status.admission.podSetAssignments[0].count:"
        " must be between 0 and the podset's count 1, got 50000000\n"
    )
