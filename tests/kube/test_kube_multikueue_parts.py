"""MultiKueue on Kubernetes, piece by piece: the copy of a manager's Job made for a worker, the
kubeconfig a MultiKueueCluster names (read from its Secret, refused when unsafe), the Active
condition from heartbeats, which events about a dispatched workload count for its status, which
copies a worker's binder takes for stale, and the flags that serve a worker from the manager."""

from __future__ import annotations

import base64
import functools
from typing import Any

import pytest

from muster.binder import __main__ as binder_main
from muster.binder.copies import is_stale
from muster.binder.fences import Fences
from muster.binder.handlers import WorkloadSpecs
from muster.bus import new_event
from muster.cluster.kube.copies import copied_workload, origin_of, owner_copy
from muster.cluster.kube.settings import WorkerSource
from muster.cluster.kube.worker import (
    WorkerConfigError,
    kubeconfig_of_secret,
    kubeconfig_problems,
    parsed_kubeconfig,
)
from muster.contracts.v1 import events_pb2 as pb
from muster.core.dispatch import ClusterCapacity
from muster.core.heartbeat import ROOM_TOO_LARGE
from muster.watcher import __main__ as watcher_main
from muster.watcher.status import RunsOn
from muster.watcher.worker_status import WorkerBook

MANAGER_JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "train",
        "namespace": "ml",
        "uid": "uid-1",
        "labels": {"kueue.x-k8s.io/queue-name": "main"},
        "annotations": {"team": "a"},
    },
    "spec": {
        "suspend": True,
        "managedBy": "kueue.x-k8s.io/multikueue",
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "uid-1"}},
        "template": {
            "metadata": {"labels": {"batch.kubernetes.io/controller-uid": "uid-1", "app": "x"}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        },
    },
}


def test_a_jobs_copy_is_labelled_with_its_origin_and_left_to_the_workers_job_controller() -> None:
    made = owner_copy(MANAGER_JOB, origin="local", workload="job-train-abcde")
    meta, spec = made["metadata"], made["spec"]
    assert meta == {
        "name": "train",
        "namespace": "ml",
        "labels": {
            "kueue.x-k8s.io/queue-name": "main",
            "kueue.x-k8s.io/multikueue-origin": "local",
            "kueue.x-k8s.io/prebuilt-workload-name": "job-train-abcde",
        },
        "annotations": {"team": "a", "kueue.x-k8s.io/multikueue-origin-uid": "uid-1"},
    }
    assert "managedBy" not in spec  # the worker's Job controller runs it
    assert "selector" not in spec  # the worker's API server makes its own
    assert spec["template"]["metadata"]["labels"] == {"app": "x"}
    assert MANAGER_JOB["spec"]["managedBy"]  # the manager's Job is left as it is
    assert origin_of(made) == "local"
    assert copied_workload(made) == "ml/job-train-abcde"
    assert copied_workload(MANAGER_JOB) == ""  # not a copy


KUBECONFIG = {
    "clusters": [{"name": "east", "cluster": {"server": "https://east.example:6443"}}],
    "users": [{"name": "muster", "user": {"token": "t"}}],
}


@pytest.mark.parametrize(
    ("cluster", "user", "problem"),
    [
        ({"insecure-skip-tls-verify": True}, {}, "insecure-skip-tls-verify is not allowed"),
        ({"certificate-authority": "/etc/ca"}, {}, "certificate-authority (a file)"),
        ({}, {"tokenFile": "/var/run/token"}, "tokenFile (a file) is not allowed"),
        ({}, {"exec": {"command": "sh"}}, "exec is not allowed"),
        ({}, {"auth-provider": {"name": "gcp"}}, "auth-provider is not allowed"),
        ({}, {"username": "u", "password": "p"}, "basic auth is not allowed"),
        ({"server": ""}, {}, "server is required"),
    ],
)
def test_an_unsafe_kubeconfig_is_refused_naming_the_entry(
    cluster: dict[str, Any], user: dict[str, Any], problem: str
) -> None:
    config = {
        "clusters": [{"name": "east", "cluster": {"server": "https://east:6443", **cluster}}],
        "users": [{"name": "muster", "user": {"token": "t", **user}}],
    }
    problems = kubeconfig_problems(config)
    assert len(problems) == 1
    assert problem in problems[0]
    assert problems[0].startswith(("clusters[0] (east)", "users[0] (muster)"))
    assert kubeconfig_problems(KUBECONFIG) == []


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("data", "reason", "message"),
    [
        ({}, "BadKubeConfig", "Secret muster/east: key 'kubeconfig' not found"),
        ({"kubeconfig": "%%%"}, "BadKubeConfig", "Secret muster/east: key 'kubeconfig': "),
        ({"kubeconfig": b64("[1, 2")}, "BadKubeConfig", "not YAML"),
        ({"kubeconfig": b64("users: []")}, "BadKubeConfig", "not a kubeconfig (no clusters)"),
    ],
)
def test_a_bad_secret_says_why_in_kueues_words(
    data: dict[str, str], reason: str, message: str
) -> None:
    with pytest.raises(WorkerConfigError) as caught:
        kubeconfig_of_secret({"data": data}, name="muster/east")
    assert caught.value.reason == reason
    assert message in caught.value.message


def test_a_kubeconfig_that_is_not_yaml_is_not_quoted() -> None:
    text = "clusters:\n- {name: c, cluster: {server: s}}\nusers: [{user: {token: SECRET-TOKEN\n"
    with pytest.raises(WorkerConfigError) as caught:
        parsed_kubeconfig(text, where="Secret muster/east: key 'kubeconfig'")
    assert "SECRET-TOKEN" not in str(caught.value)
    assert "not YAML at line" in str(caught.value)


def test_an_insecure_kubeconfig_has_its_own_reason() -> None:
    text = "clusters: [{name: c, cluster: {server: s, insecure-skip-tls-verify: true}}]\n"
    with pytest.raises(WorkerConfigError) as caught:
        parsed_kubeconfig(text, where="Secret muster/east: key 'kubeconfig'")
    assert caught.value.reason == "InsecureKubeConfig"


def test_active_says_whether_the_services_of_a_worker_reach_it() -> None:
    book = WorkerBook(lost_after_s=10.0)
    declared = new_event(
        "config_applied",
        pb.ConfigApplied(kind="MultiKueueCluster", name="east"),
        cluster="local",
        source="t",
    )
    assert book.apply(declared) == ["east"]

    def active(now_s: float) -> tuple[str, str, str]:
        (c,) = book.status_of("east", now_s=now_s)["conditions"]
        return c["status"], c["reason"], c["message"]

    assert active(0.0)[:2] == ("False", "NoHeartbeat")
    assert book.heartbeat(ClusterCapacity(cluster="east"), now_s=1.0) == ["east"]
    assert active(5.0) == ("True", "Active", "Connected")
    assert book.next_stale_s() == 11.0
    assert active(12.0)[:2] == ("False", "NoHeartbeat")  # its services went silent
    away = ClusterCapacity(cluster="east", unreachable="refused", reason="ClientConnectionFailed")
    book.heartbeat(away, now_s=13.0)
    assert active(13.0) == ("False", "ClientConnectionFailed", "refused")
    assert book.heartbeat(ClusterCapacity(cluster="west"), now_s=1.0) == []  # not declared
    # Reached, but its room too large for a NATS message: why, until its services go silent.
    too_large = ClusterCapacity(cluster="east", unreachable="over 1 MiB", reason=ROOM_TOO_LARGE)
    book.heartbeat(too_large, now_s=20.0)
    assert active(25.0) == ("False", "RoomTooLarge", "over 1 MiB")
    assert book.next_stale_s() == 30.0
    assert active(31.0)[:2] == ("False", "NoHeartbeat")


def envelope(field: str, cluster: str, payload: Any) -> pb.Envelope:
    return new_event(field, payload, cluster=cluster, workload="ml/w", source="t")


def test_a_dispatched_workloads_end_counts_only_from_where_it_runs_now() -> None:
    runs_on = RunsOn("local")
    assert runs_on.counts(envelope("submitted", "local", pb.WorkloadSubmitted()))
    assert runs_on.counts(envelope("admitted", "east", pb.WorkloadAdmitted()))
    assert runs_on.counts(envelope("evicted", "east", pb.WorkloadEvicted()))
    assert runs_on.counts(envelope("admitted", "west", pb.WorkloadAdmitted()))
    # east, lost and back, reports its stale copy's end: not the workload's
    assert not runs_on.counts(envelope("finished", "east", pb.WorkloadFinished()))
    assert runs_on.counts(envelope("finished", "west", pb.WorkloadFinished()))


def sequenced(field: str, cluster: str, payload: Any, sequence: int) -> pb.Envelope:
    env = envelope(field, cluster, payload)
    env.sequence = sequence
    return env


def test_a_copy_is_stale_once_evicted_finished_or_deleted_never_when_unknown() -> None:
    specs, fences = WorkloadSpecs(), Fences(cluster="east")

    def apply(field: str, payload: Any, sequence: int) -> None:
        env = sequenced(field, "east", payload, sequence)
        specs.apply(env)
        fences.apply(env)

    assert not is_stale("ml/w", specs, fences)  # nothing known: it may predate the replay
    apply("admitted", pb.WorkloadAdmitted(), 3)
    assert not is_stale("ml/w", specs, fences)
    apply("evicted", pb.WorkloadEvicted(), 5)
    assert is_stale("ml/w", specs, fences)
    apply("admitted", pb.WorkloadAdmitted(), 8)
    assert not is_stale("ml/w", specs, fences)  # admitted here again since
    apply("finished", pb.WorkloadFinished(), 9)
    assert is_stale("ml/w", specs, fences)


MANAGER_FLAGS = ["--cluster-backend", "kube", "--kube-host", "http://127.0.0.1:1"]


@pytest.mark.parametrize("module", [binder_main, watcher_main])
def test_a_worker_served_from_the_manager_is_named_by_its_multikueuecluster(
    module: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*MANAGER_FLAGS, "--cluster", "east", "--multikueue-cluster", "east"]
    config, main = module.parse([*argv, "--multikueue-refresh-seconds", "3"])
    assert config.cluster == "east"
    assert main.keywords["backend"].worker == WorkerSource(cluster="east", refresh_s=3.0)
    _, main = module.parse([*MANAGER_FLAGS, "--cluster", "east"])
    assert main.keywords["backend"].worker is None  # from inside it
    with pytest.raises(SystemExit):
        module.parse([*MANAGER_FLAGS, "--cluster", "west", "--multikueue-cluster", "east"])
    assert "--multikueue-cluster 'east' must be the cluster id (--cluster)" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        module.parse(["--cluster", "east", "--multikueue-cluster", "east"])
    assert "--multikueue-cluster needs --cluster-backend kube" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        module.parse([*argv, "--multikueue-refresh-seconds", "0"])
    assert "--multikueue-refresh-seconds must be > 0" in capsys.readouterr().err


def test_the_watcher_takes_the_cluster_lost_timeout_for_active(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, main = watcher_main.parse([*MANAGER_FLAGS, "--cluster-lost-seconds", "4"])
    assert isinstance(main, functools.partial)
    assert main.keywords["config"].cluster_lost_s == 4.0
    with pytest.raises(SystemExit):
        watcher_main.parse([*MANAGER_FLAGS, "--cluster-lost-seconds", "0"])
    assert "--cluster-lost-seconds must be > 0" in capsys.readouterr().err
