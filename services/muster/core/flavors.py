"""Flavor assignment: which ResourceFlavor each podset's resources come from, and whether it fits.

Implements Kueue's flavor assigner: resource groups, flavors tried in ClusterQueue order,
node-label and taint matching, flavor fungibility (whenCanBorrow / whenCanPreempt), and the
three outcomes FIT, PREEMPT (fits once others give quota back) and NO_FIT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import NamedTuple

import msgspec

from muster.api.model import (
    ClusterQueue,
    FungibilityPolicy,
    PodSet,
    PodSetAssignment,
    ResourceFlavor,
)
from muster.api.quantity import format_quantity
from muster.core.matching import flavor_mismatch
from muster.core.quota import FlavorResource, QuotaNode


class Mode(IntEnum):
    """How well an assignment fits, worst to best, so that max() picks."""

    NO_FIT = 0
    PREEMPT = 1
    FIT = 2


class Assignment(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Flavors for every podset, the total usage, and how it fits right now."""

    pod_sets: tuple[PodSetAssignment, ...]
    usage: Mapping[FlavorResource, int]
    mode: Mode
    borrows: bool
    message: str = ""  # why it does not fit (empty when FIT)
    # (flavor, resource) pairs of the chosen flavors whose request exceeds what is available:
    # preemption must free them
    short: frozenset[FlavorResource] = frozenset()
    # every (flavor, resource) found short while searching, with how much more was needed
    shortages: Mapping[FlavorResource, int] = msgspec.field(default_factory=dict)
    # Kueue's granular pending reason when not FIT: WaitingForQuota (some flavor would do once
    # quota frees up), ExceedsMaxQuota (larger than the queue could ever get), NoMatchingFlavor
    pending_reason: str = ""


class QueueLayout(msgspec.Struct, frozen=True, kw_only=True):
    """What the assigner needs from a ClusterQueue, precomputed once per configuration."""

    group_of: Mapping[str, int]  # resource -> resource group index
    flavors: tuple[tuple[str, ...], ...]  # per group, flavor names in preference order
    label_keys: tuple[frozenset[str], ...]  # per group, node-label keys its flavors define
    when_can_borrow: FungibilityPolicy
    when_can_preempt: FungibilityPolicy
    can_preempt_while_borrowing: bool

    @classmethod
    def of(
        cls,
        cq: ClusterQueue,
        flavors: Mapping[str, ResourceFlavor],
        *,
        fair_sharing: bool,
    ) -> QueueLayout:
        group_of: dict[str, int] = {}
        for g, group in enumerate(cq.resource_groups):
            for resource in group.covered_resources:
                group_of[resource] = g
        label_keys = tuple(
            frozenset(
                key
                for f in group.flavors
                if f.name in flavors
                for key in flavors[f.name].node_labels
            )
            for group in cq.resource_groups
        )
        return cls(
            group_of=group_of,
            flavors=tuple(tuple(f.name for f in g.flavors) for g in cq.resource_groups),
            label_keys=label_keys,
            when_can_borrow=cq.flavor_fungibility.when_can_borrow,
            when_can_preempt=cq.flavor_fungibility.when_can_preempt,
            can_preempt_while_borrowing=fair_sharing
            or cq.preemption.borrow_within_cohort.policy != "Never",
        )


class _Choice(msgspec.Struct, kw_only=True):
    flavor: str
    mode: Mode
    borrows: bool
    short: frozenset[FlavorResource]


def assign_flavors(
    pod_sets: Sequence[PodSet],
    counts: Sequence[int],
    *,
    node: QuotaNode,
    layout: QueueLayout,
    flavors: Mapping[str, ResourceFlavor],
) -> Assignment:
    """Assign flavors to every podset at the given counts; never mutates `node`.

    Podsets are assigned in order and each sees the usage the earlier ones were assigned, as
    in Kueue ("previously considered podsets requests").
    """
    usage: dict[FlavorResource, int] = {}
    assigned: list[PodSetAssignment] = []
    mode = Mode.FIT
    borrows = False
    short: set[FlavorResource] = set()
    messages: list[str] = []
    shortages: dict[FlavorResource, int] = {}
    for pod_set, count in zip(pod_sets, counts, strict=True):
        totals = {r: q * count for r, q in pod_set.requests.items() if q > 0}
        picked: dict[str, str] = {}
        reasons: list[str] = []
        by_group: dict[int, list[str]] = {}
        for resource in sorted(totals):
            g = layout.group_of.get(resource)
            if g is None:
                reasons.append(f"resource {resource} unavailable in ClusterQueue")
                continue
            by_group.setdefault(g, []).append(resource)
        ps_mode = Mode.NO_FIT if reasons else Mode.FIT
        for g, resources in sorted(by_group.items()):
            ctx = _GroupContext(pod_set, totals, usage, node, layout, flavors, reasons, shortages)
            choice = _pick_flavor(ctx, g, resources)
            if choice is None:
                ps_mode = Mode.NO_FIT
                continue
            ps_mode = min(ps_mode, choice.mode)
            borrows = borrows or choice.borrows
            short |= choice.short
            for resource in resources:
                picked[resource] = choice.flavor
        for resource, flavor in picked.items():
            fr = (flavor, resource)
            usage[fr] = usage.get(fr, 0) + totals[resource]
        mode = min(mode, ps_mode)
        if ps_mode != Mode.FIT:
            # Kueue sorts a podset's reasons before joining them.
            why = ", ".join(sorted(reasons))
            messages.append(f"couldn't assign flavors to pod set {pod_set.name}: {why}")
        assigned.append(
            PodSetAssignment(
                name=pod_set.name,
                flavors=dict(sorted(picked.items())),
                count=count,
                resource_usage=dict(sorted(totals.items())),
            )
        )
    return Assignment(
        pending_reason=_pending_reason(mode, shortages, messages),
        pod_sets=tuple(assigned),
        usage=usage,
        mode=mode,
        borrows=borrows,
        message="; ".join(messages),
        short=frozenset(short),
        shortages=shortages,
    )


class _GroupContext(NamedTuple):
    pod_set: PodSet
    totals: Mapping[str, int]
    usage: Mapping[FlavorResource, int]
    node: QuotaNode
    layout: QueueLayout
    flavors: Mapping[str, ResourceFlavor]
    reasons: list[str]
    shortages: dict[FlavorResource, int]


def _pick_flavor(ctx: _GroupContext, group: int, resources: list[str]) -> _Choice | None:
    """Try the group's flavors in order; Kueue's fungibility decides when to stop looking."""
    best: _Choice | None = None
    layout = ctx.layout
    for name in layout.flavors[group]:
        flavor = ctx.flavors.get(name)
        if flavor is None:
            ctx.reasons.append(f"flavor {name} not found")
            continue
        mismatch = flavor_mismatch(ctx.pod_set, flavor, label_keys=layout.label_keys[group])
        if mismatch is not None:
            ctx.reasons.append(mismatch)
            continue
        choice = _fit_flavor(ctx, name, resources)
        if best is None or (choice.mode, not choice.borrows) > (best.mode, not best.borrows):
            best = choice
        if _stops_search(choice, layout):
            break
    if best is None or best.mode == Mode.NO_FIT:
        return None
    return best


def _stops_search(choice: _Choice, layout: QueueLayout) -> bool:
    if choice.mode == Mode.FIT:
        return not choice.borrows or layout.when_can_borrow == FungibilityPolicy.MAY_STOP_SEARCH
    if choice.mode == Mode.PREEMPT:
        return layout.when_can_preempt == FungibilityPolicy.MAY_STOP_SEARCH
    return False


def _fit_flavor(ctx: _GroupContext, flavor: str, resources: list[str]) -> _Choice:
    """Kueue's fitsResourceQuota over every resource of the group, for one flavor."""
    node, reasons = ctx.node, ctx.reasons
    mode = Mode.FIT
    borrows = False
    short: set[FlavorResource] = set()
    for resource in resources:
        fr = (flavor, resource)
        val = ctx.usage.get(fr, 0) + ctx.totals[resource]
        most = node.potential_available(fr)
        if val > most:
            reasons.append(
                f"insufficient quota for {resource} in flavor {flavor}, request > maximum "
                f"capacity ({format_quantity(val)} > {format_quantity(most)})"
            )
            mode = Mode.NO_FIT
            continue
        borrows = borrows or node.borrows_with(fr, val)
        available = node.available(fr)
        if val <= available:
            continue
        short.add(fr)
        ctx.shortages[fr] = min(ctx.shortages.get(fr, val), val - max(0, available))
        reasons.append(
            f"insufficient unused quota for {resource} in flavor {flavor}, "
            f"{format_quantity(val - max(0, available))} more needed"
        )
        # Kueue: a request within nominal quota may be met by preempting or reclaiming.
        may_preempt = val <= node.nominal.get(fr, 0) or ctx.layout.can_preempt_while_borrowing
        mode = min(mode, Mode.PREEMPT if may_preempt else Mode.NO_FIT)
    return _Choice(flavor=flavor, mode=mode, borrows=borrows, short=frozenset(short))


def _pending_reason(
    mode: Mode, shortages: Mapping[FlavorResource, int], messages: list[str]
) -> str:
    if mode is Mode.FIT:
        return ""
    if shortages:
        return "WaitingForQuota"
    if any("maximum capacity" in m for m in messages):
        return "ExceedsMaxQuota"
    return "NoMatchingFlavor"
