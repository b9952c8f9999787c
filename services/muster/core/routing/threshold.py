"""The `threshold` policy: the published gateway's rule, decided once at submission.

A workload leaves its declared ClusterQueue for an alternative only if
(a) the declared queue has no quota available (nominal minus reserved <= 0) for the resources the
    alternative gives up (for an alternative that gives up none: the workload does not fit now),
(b) at least `min_pending` workloads are pending in the declared queue,
(c) the alternative's ClusterQueue has what the alternative requests available, and
(d) fewer than `max_reserving` workloads hold quota in the alternative's ClusterQueue.
Alternatives are tried in order of preference; the first that passes all four wins.
"""

from __future__ import annotations

from collections.abc import Sequence

from muster.api.encode import is_byte_resource
from muster.api.quantity import format_quantity
from muster.core.routing.model import (
    Ask,
    Candidate,
    Choice,
    QueueLoad,
    RoutingSettings,
    ThresholdRule,
)


def rule(candidates: Sequence[Candidate], _ask: Ask, settings: RoutingSettings) -> Choice:
    """The policy's entry in the registry (`policies.RULES`)."""
    return decide(candidates[0], candidates[1:], rule=settings.threshold)


def decide(
    declared: Candidate, alternatives: Sequence[Candidate], *, rule: ThresholdRule
) -> Choice:
    """The first alternative that passes (a)-(d), else the declared queue; says why."""
    failures: list[str] = []
    for alternative in alternatives:
        passed, failed = conditions(declared, alternative, rule=rule)
        if not failed:
            to = alternative.cluster_queue
            message = (
                f"routed from ClusterQueue {declared.cluster_queue} to {to} "
                f"(LocalQueue {alternative.option.queue_name}): {'; '.join(passed)}"
            )
            return Choice(index=alternative.option.index, message=message)
        failures.append("; ".join(failed))
    where = declared.cluster_queue or declared.option.queue_name
    return Choice(index=0, message=f"stays in ClusterQueue {where}: {' | '.join(failures)}")


def conditions(
    declared: Candidate, alternative: Candidate, *, rule: ThresholdRule
) -> tuple[list[str], list[str]]:
    """(the conditions that hold, those that do not), each as the user reads it."""
    if declared.load is None:
        return [], [declared.problem]
    if alternative.load is None:
        return [], [alternative.problem]
    passed: list[str] = []
    failed: list[str] = []
    for ok, text in (
        _declared_is_full(declared.load, declared, alternative),
        _declared_is_long(declared.load, rule),
        _alternative_has_room(alternative.load, alternative),
        _alternative_is_quiet(alternative.load, rule),
    ):
        (passed if ok else failed).append(text)
    return passed, failed


def _declared_is_full(
    load: QueueLoad, declared: Candidate, alternative: Candidate
) -> tuple[bool, str]:
    """(a): no quota left for what the alternative gives up."""
    given_up = sorted(
        resource
        for resource, amount in declared.option.demand.items()
        if amount > 0 and alternative.option.demand.get(resource, 0) == 0
    )
    if given_up:
        left = [r for r in given_up if load.available(r) > 0]
        shown = ", ".join(f"{r} {_amount(r, load.available(r))}" for r in left or given_up)
        if left:
            return False, f"(a) {shown} still available in {load.name}"
        return True, f"(a) no {', '.join(given_up)} available in {load.name}"
    short = [
        r for r, amount in sorted(declared.option.demand.items()) if load.available(r) < amount
    ]
    if short:
        return True, f"(a) not enough {', '.join(short)} available in {load.name}"
    return False, f"(a) the workload fits in {load.name} now"


def _declared_is_long(load: QueueLoad, rule: ThresholdRule) -> tuple[bool, str]:
    """(b): enough workloads are pending in the declared ClusterQueue."""
    if load.pending >= rule.min_pending:
        return True, f"(b) {load.pending} pending in {load.name} (>= {rule.min_pending})"
    return False, f"(b) only {load.pending} pending in {load.name} (< {rule.min_pending})"


def _alternative_has_room(load: QueueLoad, alternative: Candidate) -> tuple[bool, str]:
    """(c): the alternative's requests are available in its ClusterQueue."""
    demand = sorted(alternative.option.demand.items())
    short = [(r, amount) for r, amount in demand if load.available(r) < amount]
    shown = short or demand
    text = ", ".join(
        f"{r} {_amount(r, load.available(r))} available for {_amount(r, amount)}"
        for r, amount in shown
    )
    return not short, f"(c) {text} in {load.name}"


def _alternative_is_quiet(load: QueueLoad, rule: ThresholdRule) -> tuple[bool, str]:
    """(d): few enough workloads hold quota in the alternative's ClusterQueue."""
    ok = load.reserving < rule.max_reserving
    sign = "<" if ok else ">="
    return ok, f"(d) {load.reserving} reserving in {load.name} ({sign} {rule.max_reserving})"


def _amount(resource: str, milli: int) -> str:
    return format_quantity(milli, binary=is_byte_resource(resource))
