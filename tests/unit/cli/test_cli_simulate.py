"""`muster simulate`: exit codes, the three output formats, --until and --config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from muster.cli.main import main

GANG_OF_4 = Path(__file__).parents[2] / "scenarios/placement/gang-waits-for-fourth-node.yaml"

CLUSTER = """\
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: main}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 4}, {name: memory, nominalQuota: 8Gi}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team-a, name: lq}
spec: {clusterQueue: main}
"""


def job(name: str, *, cpu: str = "1", after: int = 0, runs: int = 30) -> str:
    return f"""\
apiVersion: batch/v1
kind: Job
metadata:
  namespace: team-a
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: lq}}
  annotations: {{muster.dev/submit-after: "{after}", muster.dev/run-seconds: "{runs}"}}
spec:
  template:
    spec:
      containers: [{{name: main, resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}}}]
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.yaml"
    jobs = [job("first", cpu="3", runs=20), job("second", cpu="2", after=5, runs=10)]
    path.write_text("---\n".join([CLUSTER, *jobs]))
    return path


def simulate(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    status = main(["simulate", *(str(arg) for arg in args)])
    out, err = capsys.readouterr()
    return status, out, err


def test_json_is_one_object_with_the_seven_keys(
    scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = simulate(capsys, scenario, "-o", "json")

    assert (status, err) == (0, "")
    document = json.loads(out)
    assert sorted(document) == [
        *("clusterQueues", "events", "localQueues", "nodes", "podGroups", "pods", "workloads")
    ]
    assert (document["pods"], document["nodes"], document["podGroups"]) == ([], [], [])
    assert [cq["name"] for cq in document["clusterQueues"]] == ["main"]
    assert sorted(document["clusterQueues"][0]["status"]) == [
        "admittedWorkloads",
        "conditions",
        "flavorsReservation",
        "flavorsUsage",
        "pendingWorkloads",
        "reservingWorkloads",
    ]
    assert [(lq["namespace"], lq["name"]) for lq in document["localQueues"]] == [("team-a", "lq")]
    assert document["localQueues"][0]["spec"] == {"clusterQueue": "main"}
    first_event = document["events"][0]
    assert sorted(first_event) == ["by", "message", "object", "reason", "time", "type"]
    finished = [(e["time"], e["object"]) for e in document["events"] if e["type"] == "Finished"]
    assert [time for time, _ in finished] == [20, 30]
    assert [wl["kind"] for wl in document["workloads"]] == ["Workload", "Workload"]


def test_json_is_byte_identical_across_runs(
    scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, once, _ = simulate(capsys, scenario, "-o", "json")
    _, twice, _ = simulate(capsys, scenario, "-o", "json")

    assert once == twice


def test_yaml_is_the_same_document_as_json(
    scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, as_json, _ = simulate(capsys, scenario, "-o", "json")
    status, as_yaml, _ = simulate(capsys, scenario, "-o", "yaml")

    assert status == 0
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_table_has_a_row_per_workload_and_the_cluster_queue_usage(
    scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = simulate(capsys, scenario)

    assert status == 0
    workloads, queues = out.strip().split("\n\n")
    header, *rows = workloads.splitlines()
    assert header.split() == ["WORKLOAD", "QUEUE", "FLAVORS", "WAITED", "RAN", "OUTCOME"]
    assert len(rows) == 2
    assert rows[1].startswith("team-a/job-second-")
    assert rows[1].split()[1:] == [
        *("lq", "→", "main", "default"),
        *("15", "10", "Finished"),
    ]
    assert queues.splitlines()[1].split() == [
        *("main", "0", "0", "0", "default"),
        *("cpu", "0/4", "memory", "0/8Gi"),
    ]


def test_until_cuts_the_run(scenario: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = simulate(capsys, scenario, "-o", "json", "--until", "12")

    assert status == 0
    events = json.loads(out)["events"]
    assert max(e["time"] for e in events) <= 12
    assert "Finished" not in {e["type"] for e in events}
    running = json.loads(out)["workloads"][0]["status"]
    assert running["admission"]["clusterQueue"] == "main"
    assignment = running["admission"]["podSetAssignments"][0]
    assert assignment["flavors"] == {"cpu": "default", "memory": "default"}
    assert assignment["resourceUsage"] == {"cpu": "3", "memory": "1Gi"}


def test_until_shows_running_workloads_in_the_table(
    scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = simulate(capsys, scenario, "--until", "12")

    rows = out.split("\n\n")[0].splitlines()[1:]
    assert rows[0].split()[-2:] == ["12", "Running"]
    assert "Pending" in rows[1]


def test_invalid_yaml_exits_2_naming_object_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(CLUSTER.replace("nominalQuota: 4}", "nominalQuota: -4}"))

    status, out, err = simulate(capsys, bad, "-o", "json")

    assert (status, out) == (2, "")
    assert "ClusterQueue/main: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in err


def test_bad_annotation_exits_2_naming_the_job_and_annotation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("---\n".join([CLUSTER, job("train").replace('"30"', '"soon"')]))

    status, out, err = simulate(capsys, bad)

    assert (status, out) == (2, "")
    assert err == (
        'Job/team-a/train: metadata.annotations["muster.dev/run-seconds"]: '
        "must be a number of seconds, got 'soon'\n"
    )


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = simulate(capsys, tmp_path / "missing.yaml")

    assert (status, out) == (2, "")
    assert "missing.yaml: no such file" in err


def test_config_file_sets_wait_for_pods_ready(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scenario.yaml"
    never_ready = job("stuck").replace(
        'muster.dev/run-seconds: "30"}',
        'muster.dev/run-seconds: "30", muster.dev/pods-ready-after: never}',
    )
    path.write_text("---\n".join([CLUSTER, never_ready]))
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta1\n"
        "kind: Configuration\n"
        "waitForPodsReady: {enable: true, timeout: 5s}\n"
    )

    _, without, _ = simulate(capsys, path, "-o", "json", "--until", "20")
    _, with_config, _ = simulate(capsys, path, "-o", "json", "--until", "20", "--config", config)

    def evictions(out: str) -> list[float]:
        return [e["time"] for e in json.loads(out)["events"] if e["type"] == "Evicted"]

    assert evictions(without) == []
    assert evictions(with_config)[:1] == [5]


@pytest.mark.parametrize("until", ["-1", "soon", "nan"])
def test_rejects_a_bad_until(
    scenario: Path, capsys: pytest.CaptureFixture[str], until: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["simulate", str(scenario), "--until", until])

    assert caught.value.code == 2
    assert "--until" in capsys.readouterr().err


def test_a_simulation_that_cannot_settle_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "loop.yaml"
    check = (
        "apiVersion: kueue.x-k8s.io/v1beta2\n"
        "kind: AdmissionCheck\n"
        "metadata: {name: prov, annotations: {muster.dev/check-result: Retry}}\n"
        "spec: {controllerName: example.com/prov}\n"
    )
    queue = CLUSTER.replace(
        "  namespaceSelector: {}\n", "  namespaceSelector: {}\n  admissionChecks: [prov]\n"
    )
    path.write_text("---\n".join([check, queue, job("train")]))

    status, out, err = simulate(capsys, path)

    assert (status, out) == (1, "")
    assert err.startswith("muster: simulation failed: t=0: still busy")


def test_json_lists_pods_and_nodes_of_a_placement_scenario(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = simulate(capsys, GANG_OF_4, "-o", "json", "--until", "20")

    assert (status, err) == (0, "")
    document = json.loads(out)
    assert [n["metadata"]["name"] for n in document["nodes"]] == [*("node-1", "node-2", "node-3")]
    assert document["nodes"][0]["status"]["allocatable"] == {"cpu": "1", "memory": "4Gi"}
    pods = {p["metadata"]["name"]: p for p in document["pods"]}
    assert sorted(pods) == ["probe", "train-0", "train-1", "train-2", "train-3"]
    assert pods["probe"]["spec"]["nodeName"] == "node-1"
    assert pods["probe"]["status"] == {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
    }
    worker = pods["train-0"]
    assert worker["apiVersion"] == "v1"
    assert worker["kind"] == "Pod"
    assert "nodeName" not in worker["spec"]
    assert worker["spec"]["schedulerName"] == "muster"
    assert worker["spec"]["workloadRef"] == {"name": "train", "podGroup": "workers"}
    assert worker["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}}
    assert worker["status"] == {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "3 of 4 pods fit: 0/3 nodes are available: 3 Insufficient cpu",
            }
        ],
    }


def test_table_of_a_placement_scenario_has_pod_and_node_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = simulate(capsys, GANG_OF_4, "--until", "60")

    assert status == 0
    pods, nodes = out.strip().split("\n\n")  # no Kueue objects: no workload or queue table
    header, *rows = pods.splitlines()
    assert header.split() == ["POD", "GANG", "NODE", "PHASE", "BOUND", "ENDED", "WHY"]
    assert rows[0].split() == ["team-a/probe", "-", "node-1", "Succeeded", "10", "40"]
    assert rows[1].split() == [
        *("team-a/train-0", "team-a/train/workers", "node-1", "Running", "50", "-")
    ]
    header, *rows = nodes.splitlines()
    assert header.split() == ["NODE", "PODS", "RUNNING", "REQUESTED/ALLOCATABLE"]
    assert rows[0].split() == ["node-1", "2", "1", "cpu", "1/1", "memory", "0/4Gi"]
    assert [row.split()[0] for row in rows] == ["node-1", "node-2", "node-3", "node-4"]


def test_pods_without_a_node_are_not_simulated_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "no-nodes.yaml"
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {namespace: team-a, name: p}\n"
        "spec: {schedulerName: muster, containers: [{name: main}]}\n"
    )
    path.write_text("---\n".join([CLUSTER, job("train"), pod]))

    status, out, err = simulate(capsys, path, "-o", "json")

    assert status == 0
    assert json.loads(out)["pods"] == []
    assert "no Node in the scenario" in err


COHORT_CYCLE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: a}
spec: {parentName: b}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: b}
spec: {parentName: a}
"""


def test_the_table_says_why_a_cluster_queue_is_inactive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its workloads only say "ClusterQueue main is inactive"; the reason was in -o json alone.
    path = tmp_path / "cycle.yaml"
    in_cycle = CLUSTER.replace(
        "  namespaceSelector: {}\n", "  namespaceSelector: {}\n  cohortName: a\n"
    )
    path.write_text("---\n".join([COHORT_CYCLE, in_cycle, job("first")]))

    status, out, _ = simulate(capsys, path)

    assert status == 0
    assert "Pending: ClusterQueue main is inactive" in out
    assert out.rstrip().endswith(
        "ClusterQueue main is inactive (CohortCycle): Can't admit new workloads: "
        "cohort a is part of the cohort cycle a -> b -> a"
    )


def test_a_directory_or_a_device_is_not_called_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = simulate(capsys, tmp_path)
    assert (status, out) == (2, "")
    assert (
        err
        == f"muster: {tmp_path}: is a directory: name the YAML files in it ({tmp_path}/*.yaml)\n"
    )

    status, out, err = simulate(capsys, "/dev/null")
    assert (status, out) == (2, "")
    assert err == "muster: /dev/null: not a regular file\n"


def test_a_file_too_large_is_refused_before_it_is_read(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As `muster submit` stops at 64 MiB: a scenario or --config file larger is not read."""
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:  # sparse: 64 MiB and one byte, none of them written
        f.truncate((64 << 20) + 1)

    for args in ([big], ["--config", big, scenario]):
        status, out, err = simulate(capsys, *args)
        assert (status, out) == (2, "")
        assert err == (
            f"muster: {big}: larger than 64 MiB: not read"
            " (split a scenario this large into several files)\n"
        )


def test_a_wrong_type_is_said_in_plain_words_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "wrong.yaml"
    path.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w, namespace: ml}\n"
        "spec:\n  priority: high\n"
        "  podSets: [{name: main, count: two, template: {spec: {containers: []}}}]\n"
    )

    status, out, err = simulate(capsys, path)

    assert (status, out) == (2, "")
    assert err.splitlines() == [
        "Workload/ml/w: spec.priority: expected an integer or null, got a string",
        "Workload/ml/w: spec.podSets[0].count: expected an integer, got a string",
    ]
