"""What the scenario tables cannot say about several clusters: each workload's
`status.clusterName` and MultiKueue check message in `muster simulate -o json`, the CLUSTER
column, and over every scenario here that no workload runs twice at once or finishes twice."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from muster.cli.main import main

HERE = Path(__file__).parent
SCENARIOS = sorted(p for p in HERE.glob("*.yaml") if not p.name.endswith(".expect.yaml"))
RUNNABLE = [p for p in SCENARIOS if not p.name.startswith("bad-")]


def simulate(path: Path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["simulate", str(path), *args])
    return status, out.getvalue(), err.getvalue()


def document(path: Path, *args: str) -> dict[str, Any]:
    status, out, err = simulate(path, "-o", "json", *args)
    assert status == 0, err
    found: dict[str, Any] = json.loads(out)
    return found


def status_of(doc: dict[str, Any], name: str) -> dict[str, Any]:
    for wl in doc["workloads"]:
        if wl["metadata"]["name"] == name:
            found: dict[str, Any] = wl["status"]
            return found
    raise AssertionError(f"no workload {name}")


def test_each_workload_names_its_cluster_and_why() -> None:
    doc = document(HERE / "first-fit.yaml")
    assert status_of(doc, "small")["clusterName"] == "east"
    assert status_of(doc, "second")["clusterName"] == "west"
    assert status_of(doc, "big")["clusterName"] == "west"
    assert status_of(doc, "small")["admissionChecks"] == [
        {
            "name": "dispatch",
            "state": "Ready",
            "message": "dispatched to cluster east: the first listed with room",
        }
    ]


def test_a_workload_that_fits_nowhere_says_why_and_names_no_cluster() -> None:
    doc = document(HERE / "first-fit.yaml", "--until", "5")
    big = status_of(doc, "big")
    assert "clusterName" not in big
    assert big["admissionChecks"] == [
        {
            "name": "dispatch",
            "state": "Pending",
            "message": "no worker cluster can run it now: east: 1 of 7 pods fit; "
            "west: 6 of 7 pods fit",
        }
    ]


def test_a_workload_moved_off_a_lost_cluster_names_the_cluster_it_finished_on() -> None:
    doc = document(HERE / "cluster-lost.yaml")
    assert status_of(doc, "train")["clusterName"] == "west"
    # While it still ran on east, east was its cluster.
    during = document(HERE / "cluster-lost.yaml", "--until", "4")
    assert status_of(during, "train")["clusterName"] == "east"
    # A workload without MultiKueue names none, as in Kueue.
    mixed = document(HERE / "local-and-workers.yaml", "--until", "20")
    assert "clusterName" not in status_of(mixed, "etl")
    assert status_of(mixed, "train")["clusterName"] == "gpu"


def test_the_table_shows_the_cluster_column_only_with_multikueue() -> None:
    status, out, _ = simulate(HERE / "cluster-lost.yaml")
    assert status == 0
    header, *rows = out.splitlines()[:3]
    assert header.split()[:4] == ["WORKLOAD", "QUEUE", "FLAVORS", "CLUSTER"]
    assert rows[0].split()[0] == "ml/train"
    assert "west" in rows[0].split()
    single = HERE.parent / "placement" / "gang-waits-for-fourth-node.yaml"
    status, out, _ = simulate(single)
    assert status == 0
    assert "CLUSTER" not in out.splitlines()[0]
    assert "clusterName" not in simulate(single, "-o", "json")[1]


@pytest.mark.parametrize("path", RUNNABLE, ids=[p.stem for p in RUNNABLE])
def test_no_workload_runs_twice_at_once_nor_finishes_twice(path: Path) -> None:
    doc = document(path, "--until", "100")
    running: set[str] = set()
    finished: set[str] = set()
    for event in doc["events"]:
        key, kind = event["object"], event["type"]
        if kind == "Admitted":
            assert key not in running, f"{key} admitted again while running at {event['time']}"
            running.add(key)
        elif kind in ("Evicted", "Finished"):
            running.discard(key)
        if kind == "Finished":
            assert key not in finished, f"{key} finished twice"
            finished.add(key)
    # None is lost: every workload with a run time that was admitted has finished.
    for wl in doc["workloads"]:
        key = f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
        if key in running or any(
            e["object"] == key for e in doc["events"] if e["type"] == "Evicted"
        ):
            assert key in finished, f"{key} was admitted but never finished"


def test_cluster_annotations_need_multikueue(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        """
apiVersion: v1
kind: Node
metadata:
  name: n1
  annotations: {muster.dev/cluster: east}
status: {capacity: {cpu: "1"}}
"""
    )
    status, out, err = simulate(scenario)
    assert (status, out) == (2, "")
    assert err.strip() == (
        "Node/n1: metadata.annotations[\"muster.dev/cluster\"]: no MultiKueueCluster 'east' "
        "(clusters: local)"
    )
