"""Configuration from a cluster that does not own the object (`muster.core.config_owners`) is
refused by a live replica and by every rebuild alike, and never kept in the snapshot log."""

from __future__ import annotations

from typing import Any

import pytest
from admission_stream import applied, cluster_queue, flavor, local_queue, submitted, workload
from snapshot_world import LiveReplica, StoredStream, rebuilt, rebuilt_from, taking_over

from muster.admission.state import AdmissionState
from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(120)


def from_cluster(env: pb.Envelope, cluster: str) -> pb.Envelope:
    env.cluster = cluster
    return env


def deleted(kind: str, name: str, cluster: str) -> pb.Envelope:
    payload = pb.ConfigDeleted(kind=kind, name=name)
    return new_event("config_deleted", payload, cluster=cluster, source="test")


def worker(name: str) -> dict[str, Any]:
    kind = "MultiKueueCluster"
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": name}}


def history() -> list[pb.Envelope]:
    """east's cq came first; the manager declared east a worker and took cq over; then east
    tried to change and delete what the manager owns; west, not a worker, has a queue of its
    own."""
    return [
        from_cluster(applied(cluster_queue(cpu="1")), "east"),
        applied(flavor()),
        applied(worker("east")),
        applied(cluster_queue(cpu="4")),
        applied(local_queue()),
        from_cluster(applied(cluster_queue(cpu="0")), "east"),
        deleted("LocalQueue", "ns/lq", "east"),
        deleted("ResourceFlavor", "default", "east"),
        from_cluster(applied(cluster_queue("west-cq", cpu="2")), "west"),
        from_cluster(applied(cluster_queue("west-cq", cpu="3")), "east"),
        submitted(workload("a", cpu="3")),
    ]


def owned(state: AdmissionState) -> dict[str, Any]:
    quotas = {
        name: [r.nominal_quota for g in cq.resource_groups for f in g.flavors for r in f.resources]
        for name, cq in state.engine.config.cluster_queues.items()
    }
    return {
        "owners": dict(state.config_owners.owners),
        "workers": set(state.config_owners.workers),
        "quotas": quotas,
    }


async def test_every_rebuild_refuses_what_the_live_replica_refused() -> None:
    stream = StoredStream()
    for env in history():
        stream.put(env)
    live = LiveReplica(stream, clock=[10.0])
    await live.catch_up()

    expected = owned(live.state)
    assert expected["owners"] == {
        ("ClusterQueue", "cq"): "local",
        ("ResourceFlavor", "default"): "local",
        ("MultiKueueCluster", "east"): "local",
        ("LocalQueue", "ns/lq"): "local",
        ("ClusterQueue", "west-cq"): "west",
    }
    assert expected["quotas"] == {"cq": [4000], "west-cq": [2000]}
    assert expected["workers"] == {"east"}
    kept = [n for f, n in stream.types(live.snapshot().sequences) if f == "config_applied"]
    assert sorted(kept) == ["cq", "default", "east", "ns/lq", "west-cq"]

    from_stream, log = rebuilt(stream)
    replayed = log.snapshot(sequence=from_stream.last_sequence)
    for state in (
        from_stream,
        await rebuilt_from("snapshot", stream, live.snapshot()),
        await rebuilt_from("service", stream, live.snapshot()),
        await rebuilt_from("snapshot", stream, replayed),
    ):
        assert owned(state) == expected
        assert taking_over(state, now_s=20.0)["cluster_queues"] == (
            live.state.engine.config.cluster_queues
        )
