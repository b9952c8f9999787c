"""Restart anything, any time (issue 20): the chaos run of `muster bench chaos`, at CI size.

Every service is its own process on a real nats-server; 200 workloads queue, borrow and preempt
while every kind of service is SIGKILLed (and started again) and nats-server restarts. The
invariants come from the event stream and from the cluster's own watch (muster.bench.chaos).
The long run is `make chaos` (2 000 workloads, 2 admission shards).
"""

from __future__ import annotations

import pytest

from muster.bench.chaos import ChaosConfig, run_chaos

pytestmark = pytest.mark.timeout(240)

KINDS = {"admission-0", "preemption", "gateway", "binder", "gangpermit", "watcher", "sim-cluster"}


async def test_under_kills_and_a_nats_restart_every_workload_finishes_once_within_quota() -> None:
    # The run's own deadline comes well before the test's: a run that cannot finish reports
    # what is stuck, with its logs, instead of being cut off by pytest-timeout with no row.
    config = ChaosConfig(workloads=200, faults=True, submit_s=14.0, seed=7, timeout_s=150.0)
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
        "exits": len(row.exits),
    }
    assert set(found.values()) == {0}, (found, row.exits, row.first_breaches, row.log_dir)
