"""Flavor assignment: which ResourceFlavor each podset's resources come from, and how it fits.

Kueue's flavor assigner (`flavorassigner.go`): resource groups, flavors tried in ClusterQueue
order, node-label and taint matching, and flavor fungibility. Each flavor is rated per resource
by how it fits (at once, by preempting, which a simulation of the preemption must confirm, or
not at all) and by how high in the cohort tree its quota comes from (the borrowing level);
`whenCanBorrow` / `whenCanPreempt` say when a rating ends the search, `preference` which of
two ratings wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from typing import NamedTuple

import msgspec

from muster.api.model import (
    ClusterQueue,
    FlavorFungibilityPreference,
    FungibilityPolicy,
    PodSet,
    PodSetAssignment,
    ReclaimWithinCohort,
    ResourceFlavor,
)
from muster.api.quantity import format_quantity
from muster.core.matching import flavor_mismatch
from muster.core.quota import FlavorResource, QuotaNode, borrowing_level

POD_COUNT = "pods"  # the resource a ClusterQueue may cover to count pods


class Mode(IntEnum):
    """How well an assignment fits, worst to best, so that max() picks."""

    NO_FIT = 0
    PREEMPT = 1
    FIT = 2


class Fit(IntEnum):
    """How one flavor fits one resource, worst to best (Kueue's preemptionMode)."""

    NO_FIT = 0
    NO_CANDIDATES = 1  # preempting could make room, but simulating it found no victim
    PREEMPT = 2  # simulated victims include workloads of the ClusterQueue itself
    RECLAIM = 3  # simulated victims are all in other ClusterQueues of the cohort
    FIT = 4

    @property
    def mode(self) -> Mode:
        return _MODES[self]


_MODES = {
    Fit.NO_FIT: Mode.NO_FIT,
    Fit.NO_CANDIDATES: Mode.PREEMPT,
    Fit.PREEMPT: Mode.PREEMPT,
    Fit.RECLAIM: Mode.PREEMPT,
    Fit.FIT: Mode.FIT,
}
_NEEDS_PREEMPTION = frozenset((Fit.NO_CANDIDATES, Fit.PREEMPT, Fit.RECLAIM))


class Rating(NamedTuple):
    fit: Fit
    level: int  # borrowing level: 0 within the ClusterQueue, higher further up the tree


WORST = Rating(Fit.NO_FIT, 1 << 62)
_FIT_LEVELS = 8
_FITS = tuple(Rating(Fit.FIT, level) for level in range(_FIT_LEVELS))
_NONE: frozenset[FlavorResource] = frozenset()

# Simulates preempting for `amount` of one (flavor, resource): how it would fit, at what level.
Oracle = Callable[[FlavorResource, int], Rating]

# Kueue's severity of the granular pending reasons, least severe first.
_SEVERITY = {"": 0, "WaitingForQuota": 1, "ExceedsMaxQuota": 2, "NoMatchingFlavor": 3}


class Assignment(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Flavors for every podset, the total usage, and how it fits right now."""

    pod_sets: tuple[PodSetAssignment, ...]
    usage: Mapping[FlavorResource, int]
    mode: Mode
    borrowing: int  # the highest borrowing level of any chosen flavor (0: no borrowing)
    message: str = ""  # why it does not fit (empty when FIT)
    # (flavor, resource) pairs of the chosen flavors that only preemption can free
    short: frozenset[FlavorResource] = frozenset()
    # every (flavor, resource) found short while searching, with how much more was needed
    shortages: Mapping[FlavorResource, int] = msgspec.field(default_factory=dict)
    # Kueue's granular pending reason when NO_FIT: WaitingForQuota (some flavor would do once
    # quota frees up), ExceedsMaxQuota (larger than the queue could ever get), NoMatchingFlavor
    pending_reason: str = ""

    @property
    def borrows(self) -> bool:
        return self.borrowing > 0


class QueueLayout(msgspec.Struct, frozen=True, kw_only=True):
    """What the assigner needs from a ClusterQueue, precomputed once per configuration."""

    group_of: Mapping[str, int]  # resource -> resource group index
    flavors: tuple[tuple[str, ...], ...]  # per group, flavor names in preference order
    when_can_borrow: FungibilityPolicy
    when_can_preempt: FungibilityPolicy
    preference: FlavorFungibilityPreference
    can_preempt_while_borrowing: bool

    @classmethod
    def of(cls, cq: ClusterQueue, *, fair_sharing: bool) -> QueueLayout:
        group_of: dict[str, int] = {}
        for g, group in enumerate(cq.resource_groups):
            for resource in group.covered_resources:
                group_of[resource] = g
        fungibility = cq.flavor_fungibility
        reclaims = cq.preemption.reclaim_within_cohort is not ReclaimWithinCohort.NEVER
        return cls(
            group_of=group_of,
            flavors=tuple(tuple(f.name for f in g.flavors) for g in cq.resource_groups),
            when_can_borrow=fungibility.when_can_borrow,
            when_can_preempt=fungibility.when_can_preempt,
            preference=fungibility.preference,
            # Kueue's canPreemptWhileBorrowing: borrowWithinCohort, or fair sharing with
            # reclaimWithinCohort on.
            can_preempt_while_borrowing=(fair_sharing and reclaims)
            or cq.preemption.borrow_within_cohort.policy != "Never",
        )


class _Choice(NamedTuple):
    flavor: str
    rating: Rating  # the worst of its resources' ratings
    level: int  # the highest borrowing level of its resources
    short: frozenset[FlavorResource]  # resources that need preemption


class _Search:
    """A workload's search; `pod_set`, `totals`, `reasons` and `severities` are the podset's
    and resource group's being searched."""

    __slots__ = (
        "flavors",
        "layout",
        "node",
        "oracle",
        "pod_set",
        "reasons",
        "severities",
        "shortages",
        "totals",
        "usage",
    )

    def __init__(
        self,
        node: QuotaNode,
        layout: QueueLayout,
        flavors: Mapping[str, ResourceFlavor],
        oracle: Oracle,
    ) -> None:
        self.node, self.layout, self.flavors, self.oracle = node, layout, flavors, oracle
        self.usage: dict[FlavorResource, int] = {}  # what earlier podsets were given
        self.shortages: dict[FlavorResource, int] = {}
        self.pod_set: PodSet | None = None
        self.totals: Mapping[str, int] = {}  # resource -> what the podset asks for
        self.reasons: list[str] = []
        self.severities: dict[str, int] = {}  # flavor -> severity of why it did not fit


def assign_flavors(
    pod_sets: Sequence[PodSet],
    counts: Sequence[int],
    *,
    node: QuotaNode,
    layout: QueueLayout,
    flavors: Mapping[str, ResourceFlavor],
    oracle: Oracle,
) -> Assignment:
    """Assign flavors to every podset at the given counts; never mutates `node`.

    Podsets are assigned in order and each sees the usage the earlier ones were assigned, as
    in Kueue ("previously considered podsets requests").
    """
    search = _Search(node, layout, flavors, oracle)
    usage = search.usage
    assigned: list[PodSetAssignment] = []
    mode, borrowing, severity = Mode.FIT, 0, 0
    short: set[FlavorResource] = set()
    messages: list[str] = []
    for pod_set, count in zip(pod_sets, counts, strict=True):
        # A zero request gets a flavor when the ClusterQueue covers its resource and is left
        # out otherwise, as in Kueue's assignFlavors (kubernetes-sigs/kueue#8079).
        totals = {
            r: q * count for r, q in pod_set.requests.items() if q > 0 or r in layout.group_of
        }
        if POD_COUNT in layout.group_of:
            # Kueue's flavor assigner: a ClusterQueue covering `pods` is asked one per pod.
            totals[POD_COUNT] = count * 1000  # in milli-units, as every request
        picked: dict[str, str] = {}
        reasons: list[str] = []
        search.pod_set, search.totals, search.reasons = pod_set, totals, reasons
        by_group: dict[int, list[str]] = {}
        for resource in sorted(totals):
            g = layout.group_of.get(resource)
            if g is None:
                reasons.append(f"resource {resource} unavailable in ClusterQueue")
                continue
            by_group.setdefault(g, []).append(resource)
        ps_mode = Mode.NO_FIT if reasons else Mode.FIT
        ps_severity = _SEVERITY["NoMatchingFlavor"] if reasons else 0
        unavailable = len(reasons)
        for g, resources in sorted(by_group.items()):
            search.severities = {}
            before = len(reasons)
            choice = _pick_flavor(search, g, resources)
            if choice is None:
                # Kueue's assignFlavors replaces the podset's status with the failing
                # resource's: the groups that found a flavor give no reason.
                del reasons[unavailable:before]
                ps_mode = Mode.NO_FIT
                # Alternatives within a group: the least severe; across groups: the most.
                least = min(search.severities.values(), default=_SEVERITY["NoMatchingFlavor"])
                ps_severity = max(ps_severity, least)
                break  # Kueue stops at the first group without a flavor
            ps_mode = min(ps_mode, _MODES[choice.rating.fit])
            if choice.level > borrowing:
                borrowing = choice.level
            short |= choice.short
            for resource in resources:
                picked[resource] = choice.flavor
        for resource, flavor in picked.items():
            fr = (flavor, resource)
            usage[fr] = usage.get(fr, 0) + totals[resource]
        mode = min(mode, ps_mode)
        if ps_mode is Mode.NO_FIT:
            severity = max(severity, ps_severity)
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
        if ps_mode is Mode.NO_FIT:
            break  # Kueue stops at the first podset that gets no flavor
    reason = next(k for k, v in _SEVERITY.items() if v == severity) if mode is Mode.NO_FIT else ""
    return Assignment(
        pending_reason=reason,
        pod_sets=tuple(assigned),
        usage=usage,
        mode=mode,
        borrowing=borrowing,
        message="; ".join(messages),
        short=frozenset(short),
        shortages=search.shortages,
    )


def _pick_flavor(search: _Search, group: int, resources: list[str]) -> _Choice | None:
    """Try the group's flavors in order; Kueue's fungibility decides when to stop looking."""
    best: _Choice | None = None
    layout = search.layout
    for name in layout.flavors[group]:
        flavor = search.flavors.get(name)
        if flavor is None:
            search.reasons.append(f"flavor {name} not found")
            search.severities[name] = _SEVERITY["NoMatchingFlavor"]
            continue
        assert search.pod_set is not None
        mismatch = flavor_mismatch(search.pod_set, flavor)
        if mismatch is not None:
            search.reasons.append(mismatch)
            search.severities[name] = _SEVERITY["NoMatchingFlavor"]
            continue
        choice = _rate_flavor(search, name, resources)
        if choice.rating is _FITS[0] or not _tries_next(choice.rating, layout):
            return choice
        if preferred(choice.rating, best.rating if best else WORST, layout.preference):
            best = choice
    if best is None or best.rating.fit is Fit.NO_FIT:
        return None
    return best


def preferred(a: Rating, b: Rating, preference: FlavorFungibilityPreference) -> bool:
    """True if rating `a` is better than `b` (Kueue's isPreferred).

    No fit is worst; a flavor where simulated preemption found no victim ranks below every
    viable one; then BorrowingOverPreemption compares how it fits first and the borrowing
    level second, PreemptionOverBorrowing the other way round.
    """
    if a.fit is Fit.NO_FIT:
        return False
    if b.fit is Fit.NO_FIT:
        return True
    a_none, b_none = a.fit is Fit.NO_CANDIDATES, b.fit is Fit.NO_CANDIDATES
    if a_none != b_none:
        return not a_none
    if preference is FlavorFungibilityPreference.PREEMPTION_OVER_BORROWING:
        if a.level != b.level:
            return a.level < b.level
        return a.fit > b.fit
    if a.fit != b.fit:
        return a.fit > b.fit
    return a.level < b.level


def _tries_next(rating: Rating, layout: QueueLayout) -> bool:
    """Kueue's shouldTryNextFlavor: go on unless this flavor is good enough for the policy."""
    if rating.fit in (Fit.NO_FIT, Fit.NO_CANDIDATES):
        return True
    preempts = rating.fit in (Fit.PREEMPT, Fit.RECLAIM)
    if preempts and layout.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR:
        return True
    return rating.level > 0 and layout.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR


def _rate_flavor(search: _Search, flavor: str, resources: list[str]) -> _Choice:
    """Rate one flavor for every resource of the group: the worst rating decides."""
    if len(resources) == 1:
        fr = (flavor, resources[0])
        rating = _rate_resource(search, fr, skip_oracle=False)
        needs = rating.fit in _NEEDS_PREEMPTION
        return _Choice(flavor, rating, rating.level, frozenset((fr,)) if needs else _NONE)
    worst = Rating(Fit.FIT, 0)
    level = 0
    short: set[FlavorResource] = set()
    for resource in resources:
        rating = _rate_resource(search, (flavor, resource), skip_oracle=worst.fit is Fit.NO_FIT)
        if preferred(worst, rating, search.layout.preference):
            worst = rating
        level = max(level, rating.level)
        if rating.fit in _NEEDS_PREEMPTION:
            short.add((flavor, resource))
    return _Choice(flavor=flavor, rating=worst, level=level, short=frozenset(short))


def _rate_resource(search: _Search, fr: FlavorResource, *, skip_oracle: bool) -> Rating:
    """Kueue's fitsResourceQuota for one (flavor, resource)."""
    node, flavor, resource = search.node, fr[0], fr[1]
    before = search.usage.get(fr, 0)
    val = before + search.totals[resource]
    most = node.potential_available(fr)
    if val > most:
        search.reasons.append(
            f"insufficient quota for {resource} in flavor {flavor}, previously considered "
            f"podsets requests ({format_quantity(before)}) + current podset request "
            f"({format_quantity(search.totals[resource])}) > maximum capacity "
            f"({format_quantity(most)})"
        )
        _worst_severity(search, flavor, "ExceedsMaxQuota")
        return Rating(Fit.NO_FIT, 0)
    level, may_reclaim = borrowing_level(node, fr, val)
    available = node.available(fr)
    if val <= available:
        return _FITS[level] if level < _FIT_LEVELS else Rating(Fit.FIT, level)
    missing = val - max(0, available)
    search.shortages[fr] = min(search.shortages.get(fr, val), missing)
    search.reasons.append(
        f"insufficient unused quota for {resource} in flavor {flavor}, "
        f"{format_quantity(missing)} more needed"
    )
    # Kueue: within nominal quota, with quota to reclaim below the root, or when allowed to
    # preempt while borrowing, simulate the preemption; it decides whether the flavor is viable.
    if val <= node.nominal.get(fr, 0) or may_reclaim or search.layout.can_preempt_while_borrowing:
        if skip_oracle:
            return Rating(Fit.NO_CANDIDATES, level)
        return search.oracle(fr, val)
    _worst_severity(search, flavor, "WaitingForQuota")
    return Rating(Fit.NO_FIT, level)


def _worst_severity(search: _Search, flavor: str, reason: str) -> None:
    search.severities[flavor] = max(search.severities.get(flavor, 0), _SEVERITY[reason])
