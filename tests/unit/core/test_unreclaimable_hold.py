"""A StrictFIFO head that needs preemption and has no victim holds quota from the heads after
it (Kueue's reserveCapacityForUnreclaimablePreempt), and only while it is that head: deleted,
deactivated, or its ClusterQueue reclaiming Any, it holds nothing and the work it held back
is admitted at once. The simulator and the services (quota held until pods stop) alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.api import decode_yaml
from muster.api.model import ApiObject, ClusterQueue, Workload, WorkloadKey
from muster.core.engine import Engine
from muster.core.events import Event, EventType

# Cohort "shared": team-a (4 cpu, StrictFIFO, reclaims from lower priorities only) and team-b
# (2 cpu). b1 (priority 5, 4 cpu) borrows 2 of team-a's; a1 (4 cpu) has no victim; b2 (1
# cpu) asks for 1 of the 2 still free. As the scenarios, whose arrival times the tests set.
SCENARIOS = Path(__file__).parents[2] / "scenarios" / "preemption"
HELD = "unreclaimable-head-holds-quota"
ANY = "unreclaimable-reclaim-any-holds-nothing"  # team-a reclaims Any and runs a0 (1 cpu)
A1, B2 = WorkloadKey("team-a/a1"), WorkloadKey("team-b/b2")
MODES = pytest.mark.parametrize("services", [False, True], ids=["simulator", "services"])


def _scenario(name: str, *edits: tuple[str, str]) -> tuple[list[ApiObject], dict[str, Workload]]:
    """The scenario's configuration objects, and its workloads by "namespace/name"."""
    text = (SCENARIOS / f"{name}.yaml").read_text()
    for old, new in edits:
        text = text.replace(old, new)
    objects, errors = decode_yaml(text)
    assert not errors, errors
    workloads = {f"{o.meta.namespace}/{o.meta.name}": o for o in objects if isinstance(o, Workload)}
    return [o for o in objects if not isinstance(o, Workload)], workloads


def _held_back(services: bool) -> tuple[Engine, list[Event]]:
    """b1 runs; a1 arrives at 5 s, b2 at 6 s."""
    objects, wl = _scenario(HELD)
    engine = Engine(objects, hold_quota_until_stopped=services)
    engine.submit(wl["team-b/b1"], now_s=0)
    engine.schedule(now_s=0)
    engine.submit(wl["team-a/a1"], now_s=5)
    events = engine.schedule(now_s=5)
    engine.submit(wl["team-b/b2"], now_s=6)
    return engine, events + engine.schedule(now_s=6)


def _admitted(events: list[Event]) -> list[str]:
    return [e.object for e in events if e.type is EventType.ADMITTED]


@MODES
def test_the_head_with_no_victim_keeps_its_nominal_quota_from_later_heads(services: bool) -> None:
    engine, events = _held_back(services)
    assert _admitted(events) == []
    assert not any(e.type is EventType.PREEMPTED for e in events)
    assert (engine.phase(A1), engine.phase(B2)) == ("Pending", "Pending")
    assert engine.records[B2].pending_message == (
        "Workload no longer fits after processing another workload"
    )
    # Nothing changes round after round: a1 is tried first in each of Kueue's cycles.
    assert _admitted(engine.schedule(now_s=7)) == []


@MODES
def test_the_head_deleted_releases_what_it_held(services: bool) -> None:
    engine, _ = _held_back(services)
    events = engine.delete(A1, now_s=8) + engine.schedule(now_s=8)
    assert _admitted(events) == [B2]


@MODES
def test_the_head_deactivated_releases_what_it_held(services: bool) -> None:
    engine, _ = _held_back(services)
    events = engine.set_active(A1, False, now_s=8) + engine.schedule(now_s=8)
    assert _admitted(events) == [B2]


@MODES
def test_the_head_holds_what_its_queue_leaves_unused_as_it_changes(services: bool) -> None:
    """a0 (priority 10, 1 cpu) passes a1 and fits: a1, the head again, holds 3 (team-a's
    nominal 4 less a0's 1) and b2 still waits; so it does once a0 is done (a1 holds 4)."""
    engine, _ = _held_back(services)
    engine.submit(_scenario(ANY)[1]["team-a/a0"], now_s=8)
    assert _admitted(engine.schedule(now_s=8)) == ["team-a/a0"]
    assert engine.phase(B2) == "Pending"
    events = engine.finish(WorkloadKey("team-a/a0"), now_s=9) + engine.schedule(now_s=9)
    assert _admitted(events) == []
    assert engine.phase(B2) == "Pending"


@MODES
def test_a_configuration_change_decides_the_hold_again(services: bool) -> None:
    """team-a turns BestEffortFIFO: its head holds for one of Kueue's cycles only, and b2,
    held back in it, is admitted in the next (one round in muster)."""
    engine, _ = _held_back(services)
    objects, _ = _scenario(HELD, ("StrictFIFO", "BestEffortFIFO"))
    (cq,) = [o for o in objects if isinstance(o, ClusterQueue) and o.meta.name == "team-a"]
    events = engine.apply(cq, now_s=8) + engine.schedule(now_s=8)
    assert _admitted(events) == [B2]


@MODES
def test_a_queue_reclaiming_any_holds_nothing(services: bool) -> None:
    """a0 (priority 10) runs in team-a: a1 could evict b1 only by borrowing (borrowWithinCohort
    Never), so it has no victim even reclaiming Any, and holds nothing."""
    objects, wl = _scenario(ANY)
    engine = Engine(objects, hold_quota_until_stopped=services)
    engine.submit(wl["team-a/a0"], now_s=0)
    engine.submit(wl["team-b/b1"], now_s=0)
    engine.schedule(now_s=0)
    engine.submit(wl["team-a/a1"], now_s=5)
    engine.submit(wl["team-b/b2"], now_s=5)
    events = engine.schedule(now_s=5)
    assert _admitted(events) == [B2]
    assert not any(e.type is EventType.PREEMPTED for e in events)
