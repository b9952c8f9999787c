"""Restart anything, any time (issue 20): the chaos run of `muster bench chaos`, at CI size.

Every service is its own process on a real nats-server; 200 Kueue workloads queue, borrow and
preempt (half of them may also run in the other ClusterQueue of their cohort, so routing moves
them: the shape that found two admission bugs), and 30 gangs outside Kueue preempt them, while
every kind of service is SIGKILLed (and started again) and nats-server restarts. The
invariants come from the event stream and from the cluster's own watch (muster.bench.chaos).
The long run is `make chaos` (2 000 workloads, 2 admission shards).
"""

from __future__ import annotations

from typing import Any

import pytest

from muster.bench.chaos import CLUSTER, ChaosConfig, Shapes, keep_cluster_history, run_chaos
from muster.bench.chaos_checks import ClusterBook
from muster.bench.sim_nodes import node_manifests
from muster.cluster.keys import pod_key
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import StoredObject

pytestmark = pytest.mark.timeout(240)

KINDS = {"admission-0", "preemption", "gateway", "binder", "gangpermit", "watcher", "sim-cluster"}


async def test_under_kills_and_a_nats_restart_every_workload_finishes_once_within_quota() -> None:
    # The run's own deadline comes well before the test's: a run that cannot finish reports
    # what is stuck, with its logs, instead of being cut off by pytest-timeout with no row.
    # 30 of the submissions are gangs outside Kueue that preempt admitted workloads to be
    # placed (the other 200 are seed 7's Kueue workloads, as before gangs were added).
    config = ChaosConfig(
        workloads=230,
        gangs=30,
        shapes=Shapes(routing=True),
        faults=True,
        submit_s=14.0,
        seed=7,
        timeout_s=150.0,
    )
    row = await run_chaos(config)

    assert set(row.kills) == KINDS, row.kills  # every kind was killed at least once
    assert row.nats_restarts == 1
    found = {
        "lost": row.lost,
        "stuck": row.stuck,
        "twice": row.twice,
        "books over quota": row.books_over_quota,
        "pods over quota": row.pods_over_quota,
        "node over-commits": row.node_overcommits,
        "pods of two admissions": row.two_places,
        "evicted pods left bound": row.left_running,
        "exits": len(row.exits),
    }
    assert set(found.values()) == {0}, (found, row.exits, row.first_breaches, row.log_dir)


def pod(name: str, *, uid: str, node: str = "", phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "chaos", "name": name, "uid": uid},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": phase},
    }


async def read_up_to_now(backend: SimBackend, book: ClusterBook, *, after: int) -> None:
    end = await backend.current_revision()
    async for change in backend.watch(from_revision=after):
        book.apply(change)
        if change.revision >= end:
            return


async def test_a_resumed_cluster_watch_judges_each_revision_on_the_cluster_of_then(
    nats_server: str,
) -> None:
    # Seed 3's "node over-commit": while the bench's watch was away (nats-server restarting),
    # pod a ended on node-0, b and c took its room, and a was made again unbound. A
    # level-triggered watch resuming skips the writes of a that were replaced: with one write
    # kept per key it showed b and c next to an a still running (3 of 2 cpu). The bench keeps
    # every write, so the watch reads the cluster as it was at each revision.
    await keep_cluster_history(nats_server)
    backend = await SimBackend.connect(nats_server, cluster=CLUSTER)
    try:
        (node,) = node_manifests(1, cpu=2, memory="8Gi", pods=10)
        await backend.apply(node)
        store = backend.store
        key_a = pod_key("chaos", "a")
        running = pod("a", uid="a-1", node="node-0")
        written = await store.create(key_a, running)
        book = ClusterBook(cohort_of_workload={}, quota={})
        await read_up_to_now(backend, book, after=0)
        seen = book.revision

        done = pod("a", uid="a-1", node="node-0", phase="Succeeded")
        written = await store.update(key_a, done, revision=written)
        await store.delete(StoredObject(key=key_a, obj=done, revision=written))
        await store.create(pod_key("chaos", "b"), pod("b", uid="b-1", node="node-0"))
        await store.create(pod_key("chaos", "c"), pod("c", uid="c-1", node="node-0"))
        await store.create(key_a, pod("a", uid="a-2", phase="Pending"))
        await read_up_to_now(backend, book, after=seen)
    finally:
        await backend.close()

    assert book.revision > seen
    assert book.node_overcommit.count == 0, book.node_overcommit.first
