"""`muster run` with worker clusters, before any process starts: which services it would start
for each cluster, and what it reads from the scenario's MultiKueueClusters."""

from __future__ import annotations

from pathlib import Path

from muster.launcher.driver import Track, multikueue_clusters, render_tracks
from muster.launcher.stack import Stack

SCENARIOS = Path(__file__).parents[2] / "scenarios" / "multicluster"


def argv_of(stack: Stack, name: str) -> list[str]:
    (svc,) = [s for s in stack.services if s.name == name]
    return svc.argv


def cluster_flag(argv: list[str]) -> str:
    return argv[argv.index("--cluster") + 1]


def test_each_worker_gets_its_own_per_cluster_services(tmp_path: Path) -> None:
    stack = Stack(
        nats_url="nats://127.0.0.1:4222",
        cluster="local",
        shards=1,
        speed=10,
        log_dir=tmp_path,
        workers=["east", "west", "local"],
    )
    names = [s.name for s in stack.services]
    assert names == [
        *("sim-cluster", "watcher", "binder", "gangpermit"),
        *("sim-cluster-east", "watcher-east", "binder-east", "gangpermit-east"),
        *("sim-cluster-west", "watcher-west", "binder-west", "gangpermit-west"),
        *("admission-0", "preemption", "gateway"),
    ]
    assert cluster_flag(argv_of(stack, "gangpermit-east")) == "east"
    assert cluster_flag(argv_of(stack, "binder-west")) == "west"
    assert cluster_flag(argv_of(stack, "admission-0")) == "local"
    assert {s.cluster for s in stack.services if s.name.endswith("-west")} == {"west"}
    assert [s.cluster for s in stack.services[-3:]] == ["", "", ""]  # never stopped as a cluster


def test_without_workers_the_stack_is_unchanged(tmp_path: Path) -> None:
    stack = Stack(nats_url="nats://x:1", cluster="local", shards=2, speed=1, log_dir=tmp_path)
    assert [s.name for s in stack.services] == [
        *("sim-cluster", "watcher", "binder", "gangpermit"),
        *("admission-0", "admission-1", "preemption", "gateway"),
    ]


def test_reads_the_worker_clusters_and_when_they_are_lost() -> None:
    text = (SCENARIOS / "cluster-lost.yaml").read_text()
    assert multikueue_clusters(text) == {"east": 5.0, "west": None}
    assert multikueue_clusters((SCENARIOS / "first-fit.yaml").read_text()) == {
        "east": None,
        "west": None,
    }


def test_the_table_names_each_workloads_cluster() -> None:
    track = Track(key="ml/train", queue="main", cluster="west", outcome="Finished")
    header, row = render_tracks([track], now_s=0.0, clusters=True).splitlines()
    assert header.split() == ["WORKLOAD", "QUEUE", "CLUSTER", "WAITED", "RAN", "NODES", "OUTCOME"]
    assert row.split()[:3] == ["ml/train", "main", "west"]
    assert "CLUSTER" not in render_tracks([track], now_s=0.0)
