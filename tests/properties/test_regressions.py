"""Minimal reproducers of engine bugs found by the property tests, as plain examples.

A test skipped here names a bug still open in `muster.core`: remove the skip with the fix.
"""

from __future__ import annotations

from engine_scenarios import cluster_queue, flavors, local_queue, workload

from muster.api.model import WorkloadKey
from muster.core.engine import Engine


def _quota_reserved(engine: Engine, key: str) -> tuple[str, str] | None:
    for c in engine.workload(WorkloadKey(key)).conditions:
        if c.type == "QuotaReserved":
            return c.status, c.message
    return None


def test_every_pending_workload_in_best_effort_queue_gets_a_pending_message() -> None:
    # Kueue tries each BestEffortFIFO workload in turn (an inadmissible head steps aside), so
    # both get QuotaReserved=False with the reason; muster parks the second, identical one
    # behind the first and never tells it why it waits.
    engine = Engine([*flavors(), cluster_queue("q0", cpu=0), local_queue("q0")])
    engine.submit(workload("w00", cpu=500), now_s=0)
    engine.submit(workload("w01", cpu=500), now_s=0)
    engine.schedule(now_s=0)

    first = _quota_reserved(engine, "ns/w00")
    assert first is not None
    assert first[0] == "False"
    assert "insufficient quota for cpu in flavor default" in first[1]
    assert _quota_reserved(engine, "ns/w01") == first
