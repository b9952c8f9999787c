"""A preemptor's flavors once its victims are gone, as the services run the engine (an evicted
workload keeps its quota until `stopped()`): the flavor search starts from the first flavor
again and may put a podset where another no longer fits; the preemptor then runs with the
flavors it preempted for rather than leave the quota to its victim and evict it again
(tests/scenarios/preemption/preemptor-keeps-what-its-victim-freed.yaml, the simulator's case)."""

from __future__ import annotations

from pathlib import Path

from muster.api import decode_yaml
from muster.api.model import Workload, WorkloadKey
from muster.core.engine import Engine
from muster.core.events import Event, EventType

SCENARIO = (
    Path(__file__).parents[2] / "scenarios/preemption/preemptor-keeps-what-its-victim-freed.yaml"
)


def _engine_and_workloads() -> tuple[Engine, dict[str, Workload]]:
    objects, errors = decode_yaml(SCENARIO.read_text())
    assert not errors, errors
    workloads = {o.meta.name: o for o in objects if isinstance(o, Workload)}
    cluster = [o for o in objects if not isinstance(o, Workload)]
    return Engine(cluster, hold_quota_until_stopped=True), workloads


def _keys(events: list[Event], type_: EventType) -> list[str]:
    return [e.object for e in events if e.type is type_]


def test_a_preemptor_whose_flavor_search_moved_runs_with_the_flavors_it_preempted_for() -> None:
    engine, wl = _engine_and_workloads()
    engine.submit(wl["keep"], now_s=0)
    engine.submit(wl["low"], now_s=0)
    engine.schedule(now_s=0)
    engine.submit(wl["high"], now_s=2)
    preempted = engine.schedule(now_s=2)
    assert _keys(preempted, EventType.PREEMPTED) == ["ns/low"]

    # low's pods are gone; keep (priority 1, as high) still runs on default.
    engine.stopped(WorkloadKey("ns/low"), now_s=3)
    after = engine.schedule(now_s=3)
    assert _keys(after, EventType.QUOTA_RESERVED) == ["ns/high"]
    (high,) = [w for w in engine.workloads() if w.key == "ns/high"]
    assert high.admission is not None
    flavors = {ps.name: dict(ps.flavors) for ps in high.admission.pod_set_assignments}
    assert flavors == {"main": {"cpu": "spot"}, "aux": {"cpu": "default", "memory": "default"}}

    # keep ends: low comes back into what is left, and high evicts no one again.
    ended = engine.finish(WorkloadKey("ns/keep"), now_s=4) + engine.schedule(now_s=4)
    assert _keys(ended, EventType.PREEMPTED) == []
    assert _keys(ended, EventType.QUOTA_RESERVED) == ["ns/low"]
