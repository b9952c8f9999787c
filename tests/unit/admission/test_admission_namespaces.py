"""Each cluster's Namespaces are its own: a worker's Namespace of the manager's name changes
neither the labels a ClusterQueue's namespaceSelector reads for the manager's workloads nor the
namespaces dispatch knows the manager has, and a rebuild from the stream or from a snapshot
keeps every cluster's (`muster.core.config_owners.config_key`). Pure: no NATS."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from admission_stream import KUEUE, applied, flavor, local_queue, submitted, workload
from snapshot_world import LiveReplica, StoredStream, rebuilt_from

from muster.admission.state import AdmissionState
from muster.api.model import WorkloadKey
from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def selecting_queue(**labels: str) -> dict[str, Any]:
    """ClusterQueue cq, 4 cpu, for the namespaces labelled `labels` only."""
    flavors = [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "namespaceSelector": {"matchLabels": labels},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": flavors}],
        },
    }


def of(cluster: str, env: pb.Envelope) -> pb.Envelope:
    env.cluster = cluster
    return env


def deleted(kind: str, name: str, *, cluster: str) -> pb.Envelope:
    payload = pb.ConfigDeleted(kind=kind, name=name)
    return new_event("config_deleted", payload, cluster=cluster, source="test")


W = WorkloadKey("ns/w")
WORKER = {"apiVersion": KUEUE, "kind": "MultiKueueCluster", "metadata": {"name": "east"}}


def manager_and_worker(*, worker_deletes: bool) -> list[pb.Envelope]:
    """The manager's queues for namespaces labelled team=a and its Namespace ns so labelled;
    then east (a worker) applies its own ns, labelled team=b, and its own "east-only" (and,
    when `worker_deletes`, deletes its ns); then a workload in ns is submitted to the manager."""
    worker_side = [
        of("east", applied(namespace("ns", team="b"))),
        of("east", applied(namespace("east-only"))),
    ]
    if worker_deletes:
        worker_side.append(deleted("Namespace", "ns", cluster="east"))
    return [
        applied(flavor()),
        applied(WORKER),
        applied(selecting_queue(team="a")),
        applied(local_queue()),
        applied(namespace("ns", team="a")),
        *worker_side,
        submitted(workload("w")),
    ]


def stored(envs: list[pb.Envelope]) -> tuple[StoredStream, LiveReplica]:
    stream = StoredStream()
    for env in envs:
        stream.put(env)
    live = LiveReplica(stream, clock=[1.0])
    asyncio.run(live.catch_up())
    return stream, live


@pytest.mark.parametrize("worker_deletes", [False, True], ids=["applies", "deletes"])
def test_a_workers_namespace_of_the_managers_name_leaves_the_managers_alone(
    worker_deletes: bool,
) -> None:
    _, live = stored(manager_and_worker(worker_deletes=worker_deletes))

    assert live.state.engine.phase(W) == "Admitted"  # the manager's ns: team=a
    assert live.state.engine.config.namespaces["local"]["ns"].meta.labels == {"team": "a"}


@pytest.mark.parametrize("source", ["stream", "snapshot", "service"])
@pytest.mark.parametrize("worker_deletes", [False, True], ids=["applies", "deletes"])
def test_a_rebuild_keeps_each_clusters_namespaces(source: str, worker_deletes: bool) -> None:
    stream, live = stored(manager_and_worker(worker_deletes=worker_deletes))
    east = {"east-only"} if worker_deletes else {"ns", "east-only"}

    state = asyncio.run(rebuilt_from(source, stream, live.snapshot()))

    assert namespaces_of(state) == namespaces_of(live.state) == {"local": {"ns"}, "east": east}
    assert state.dispatch.namespaces == {"local": {"ns"}, "east": east}
    state.take_ownership(now_s=2.0)
    assert state.engine.phase(W) == "Admitted"


def test_the_snapshot_log_keeps_one_namespace_event_per_cluster_and_name() -> None:
    _, live = stored(manager_and_worker(worker_deletes=False))

    kept = [
        (env.cluster, env.config_applied.name)
        for env in map(pb.Envelope.FromString, live.snapshot().events)
        if env.config_applied.kind == "Namespace"
    ]

    assert kept == [("local", "ns"), ("east", "ns"), ("east", "east-only")]


def namespaces_of(state: AdmissionState) -> dict[str, set[str]]:
    return {c: set(names) for c, names in state.engine.config.namespaces.items() if names}
