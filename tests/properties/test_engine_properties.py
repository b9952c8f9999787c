"""Laws of the admission engine over random cohort trees and arrival streams.

Each test plays scenarios from `engine_scenarios` against a real `Engine` and checks one law
with its own bookkeeping of the events and admissions and with `quota_reference`, which
restates Kueue's quota rules from the objects alone, never from engine state.
"""

from __future__ import annotations

import msgspec
from engine_scenarios import Scenario, Step, Trace, play, scenarios
from hypothesis import given
from hypothesis import strategies as st
from quota_reference import QuotaForest, admission_problems, usage_by_queue

from muster.api.model import (
    BorrowWithinCohortPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from muster.core.events import EventType

RECLAIM_REASONS = {"InCohortReclamation", "InCohortReclaimWhileBorrowing", "InCohortFairSharing"}
# None: the simulator's engine (an evicted workload's quota is free at once); n: the services'
# (it is held until the workload's pods stop, n seconds after the eviction).
stop_delays = st.sampled_from([None, 1, 3])


def _specs(scn: Scenario) -> dict[str, Workload]:
    return {a.workload.key: a.workload for a in scn.arrivals}


def _order(scn: Scenario) -> dict[str, tuple[int, int, int]]:
    """Kueue's queue order per workload: priority high first, then arrival, then submission."""
    return {
        a.workload.key: (-(a.workload.priority or 0), a.at_s, i) for i, a in enumerate(scn.arrivals)
    }


def _where(step: Step) -> str:
    return f"after {step.call} {step.target} at t={step.now_s:g}"


def _pending_after(trace: Trace) -> list[set[str]]:
    """Per step, the workloads submitted, not holding quota and not finished afterwards."""
    submitted: set[str] = set()
    finished: set[str] = set()
    found = []
    for step in trace.steps:
        if step.call == "submit":
            submitted.add(step.target)
        finished |= {e.object for e in step.events if e.type is EventType.FINISHED}
        found.append(submitted - finished - set(step.held))
    return found


# 1. quota ----------------------------------------------------------------------------------


@given(scenarios(), stop_delays)
def test_usage_never_exceeds_what_the_quota_tree_allows(
    scn: Scenario, stop_after_s: int | None
) -> None:
    trace = play(scn, stop_after_s=stop_after_s)
    forest = QuotaForest(scn.objects)
    specs = _specs(scn)
    queues = scn.cluster_queues()
    for step in trace.steps:
        for key, admission in sorted(step.held.items()):
            cq = queues[scn.cluster_queue_of(specs[key]) or ""]
            problems = list(admission_problems(specs[key], admission, cluster_queue=cq))
            assert not problems, f"{_where(step)}: {problems}"
        violations = forest.violations(usage_by_queue(step.held, specs))
        assert not violations, f"{_where(step)}: {violations}"


# 2. no double admission ----------------------------------------------------------------------


@given(scenarios())
def test_no_workload_holds_quota_twice_or_after_finishing(scn: Scenario) -> None:
    trace = play(scn)
    state: dict[str, str] = {}  # "pending" | "holding" | "finished" | "inactive"
    previous: dict[str, object] = {}
    for step in trace.steps:
        reserved_now: set[str] = set()
        for e in step.events:
            now = state.get(e.object, "pending")
            assert now != "finished", f"{_where(step)}: {e.type} for finished {e.object}"
            if e.type is EventType.QUOTA_RESERVED:
                assert now == "pending", f"{_where(step)}: {e.object} reserved twice"
                state[e.object] = "holding"
                reserved_now.add(e.object)
            elif e.type in (EventType.ADMITTED, EventType.PREEMPTED):
                assert now == "holding", f"{_where(step)}: {e.type} for {now} {e.object}"
            elif e.type is EventType.EVICTED:
                assert now == "holding", f"{_where(step)}: evicted {now} {e.object}"
                state[e.object] = "pending"
            elif e.type is EventType.FINISHED:
                assert now == "holding", f"{_where(step)}: finished {now} {e.object}"
                state[e.object] = "finished"
            elif e.type is EventType.DEACTIVATED:
                state[e.object] = "inactive"
        holding = {k for k, s in state.items() if s == "holding"}
        assert holding == set(step.held), (
            f"{_where(step)}: events say {sorted(holding)} hold quota, "
            f"statuses say {sorted(step.held)}"
        )
        for key in sorted(holding - reserved_now):
            assert step.held[key] == previous.get(key), f"{_where(step)}: {key} admission changed"
        previous = dict(step.held)


# 3. StrictFIFO order ------------------------------------------------------------------------


@given(
    scenarios(
        max_cohorts=0,
        max_queues=1,
        preemption=False,
        strategy=QueueingStrategy.STRICT_FIFO,
        max_workloads=12,
    )
)
def test_strict_fifo_admits_by_priority_then_arrival(scn: Scenario) -> None:
    trace = play(scn)
    order = _order(scn)
    for step, pending in zip(trace.steps, _pending_after(trace), strict=True):
        for e in step.events:
            if e.type is not EventType.QUOTA_RESERVED:
                continue
            ahead = sorted(p for p in pending if order[p] < order[e.object])
            assert not ahead, f"{_where(step)}: {e.object} admitted while {ahead} wait ahead"


# 4. determinism -----------------------------------------------------------------------------


def _encoded(trace: Trace) -> bytes:
    return msgspec.json.encode([[step.events, step.held] for step in trace.steps])


@given(scenarios(), stop_delays)
def test_same_scenario_gives_byte_identical_events(scn: Scenario, stop_after_s: int | None) -> None:
    first = _encoded(play(scn, stop_after_s=stop_after_s))

    assert _encoded(play(scn, stop_after_s=stop_after_s)) == first
    reordered = Scenario(tuple(reversed(scn.objects)), scn.config, scn.arrivals)
    assert _encoded(play(reordered, stop_after_s=stop_after_s)) == first, (
        "objects declared in another order"
    )


# 5. lawful preemption -----------------------------------------------------------------------


@given(scenarios(max_cohorts=1, max_queues=2, shared=True) | scenarios(), stop_delays)
def test_preemption_victims_are_lawful(scn: Scenario, stop_after_s: int | None) -> None:
    trace = play(scn, stop_after_s=stop_after_s)
    forest = QuotaForest(scn.objects)
    specs = _specs(scn)
    order = _order(scn)
    queues = scn.cluster_queues()
    fair = scn.config.fair_sharing.enable
    for step in trace.steps:
        for e in step.events:
            if e.type is not EventType.PREEMPTED:
                continue
            victim, by = e.object, e.by
            where = f"{_where(step)}: {by} preempted {victim} ({e.reason})"
            assert by in specs, where
            v_cq, p_cq = scn.cluster_queue_of(specs[victim]), scn.cluster_queue_of(specs[by])
            policy = queues[p_cq or ""].preemption
            v_prio, p_prio = -order[victim][0], -order[by][0]
            if e.reason == "InClusterQueue":
                assert v_cq == p_cq, where
                assert policy.within_cluster_queue is not WithinClusterQueue.NEVER, where
                if policy.within_cluster_queue is WithinClusterQueue.LOWER_PRIORITY:
                    assert v_prio < p_prio, where
                else:
                    assert v_prio < p_prio or (v_prio == p_prio and order[victim] > order[by]), (
                        where
                    )
                continue
            assert e.reason in RECLAIM_REASONS, where
            assert v_cq != p_cq, where
            assert forest.root_of(f"cq/{v_cq}") == forest.root_of(f"cq/{p_cq}"), where
            assert policy.reclaim_within_cohort is not ReclaimWithinCohort.NEVER, where
            if policy.reclaim_within_cohort is ReclaimWithinCohort.LOWER_PRIORITY:
                assert v_prio < p_prio, where
            if fair:  # FairSharingPreemptWithinNominal: within nominal quota it reclaims
                assert e.reason in ("InCohortFairSharing", "InCohortReclamation"), where
            else:
                assert e.reason != "InCohortFairSharing", where
            if e.reason == "InCohortReclaimWhileBorrowing":
                borrow = policy.borrow_within_cohort
                assert borrow.policy is BorrowWithinCohortPolicy.LOWER_PRIORITY, where
                assert v_prio < p_prio, where
                threshold = borrow.max_priority_threshold
                assert threshold is None or v_prio <= threshold, where


@given(scenarios(max_cohorts=1, max_queues=2, shared=True) | scenarios(), stop_delays)
def test_no_victim_is_evicted_twice_by_one_preemptor_for_one_need(
    scn: Scenario, stop_after_s: int | None
) -> None:
    """Issue 20: while a preemptor waits for its victims (or, without holding, at once) the
    quota they free is its own; it never evicts the same workload again before it has run."""
    trace = play(scn, stop_after_s=stop_after_s)
    since: dict[str, set[str]] = {}  # preemptor -> its victims since its last reservation
    for step in trace.steps:
        for e in step.events:
            if e.type is EventType.QUOTA_RESERVED:
                since.pop(e.object, None)
            elif e.type is EventType.PREEMPTED:
                victims = since.setdefault(e.by, set())
                assert e.object not in victims, f"{_where(step)}: {e.by} evicts {e.object} again"
                victims.add(e.object)


# 6. nothing is lost -------------------------------------------------------------------------


def _kueue_tried(scn: Scenario, pending: list[str]) -> list[str]:
    """Pending workloads Kueue would have tried: all in BestEffortFIFO, the head in StrictFIFO."""
    order = _order(scn)
    specs = _specs(scn)
    queues = scn.cluster_queues()
    tried: list[str] = []
    by_queue: dict[str | None, list[str]] = {}
    for key in pending:
        by_queue.setdefault(scn.cluster_queue_of(specs[key]), []).append(key)
    for cq, keys in sorted(by_queue.items(), key=lambda kv: kv[0] or ""):
        keys.sort(key=order.__getitem__)
        strict = cq in queues and queues[cq].queueing_strategy is QueueingStrategy.STRICT_FIFO
        tried += keys[:1] if strict else keys
    return tried


@given(scenarios())
def test_every_workload_finishes_or_pends_with_a_message(scn: Scenario) -> None:
    trace = play(scn)
    engine = trace.engine
    assert not trace.steps or not trace.steps[-1].held, "quota still held after the run drained"
    pending = []
    for key in sorted(_specs(scn)):
        conditions = {c.type: c for c in engine.workload(WorkloadKey(key)).conditions}
        finished = conditions.get("Finished")
        if finished is not None and finished.status == "True":
            continue
        pending.append(key)
    for key in _kueue_tried(scn, pending):
        conditions = {c.type: c for c in engine.workload(WorkloadKey(key)).conditions}
        reserved = conditions.get("QuotaReserved")
        assert reserved is not None, f"{key} pends without a QuotaReserved condition"
        assert reserved.status == "False", f"{key} pends with QuotaReserved {reserved.status}"
        assert reserved.message, f"{key} pends with an empty message"


def _fits_idle_queue(scn: Scenario, wl: Workload) -> bool:
    """True if the whole request fits the nominal quota of its queue's first flavor."""
    cq = scn.cluster_queues().get(scn.cluster_queue_of(wl) or "")
    if cq is None or not cq.resource_groups:
        return False
    first = {q.name: q.nominal_quota for q in cq.resource_groups[0].flavors[0].resources}
    needed: dict[str, int] = {}
    for ps in wl.pod_sets:
        for resource, amount in ps.requests.items():
            needed[resource] = needed.get(resource, 0) + amount * ps.count
    return all(
        resource in first and amount <= first[resource] for resource, amount in needed.items()
    )


@given(scenarios())
def test_workload_that_fits_its_idle_queue_is_admitted_once_work_drains(scn: Scenario) -> None:
    trace = play(scn)
    specs = _specs(scn)
    pending = sorted(_pending_after(trace)[-1]) if trace.steps else []
    stuck = [key for key in _kueue_tried(scn, pending) if _fits_idle_queue(scn, specs[key])]
    assert not stuck, f"{stuck} still pend with nothing running: {[specs[k] for k in stuck]}"
