"""Placing pods on the node table in bulk: filter, count, score and choose, all or nothing.

Pods with one scheduling signature (requests, node selector, affinity, tolerations) share one
computation: a static mask of the nodes they may ever use (cached until a node changes) and a
count per node of how many more of them fit, so k identical pods are placed in one step,
several on one node when they fit. Used by `GangScheduler`; pure, numpy only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from muster.api.model import LabelSelector, LabelSelectorRequirement, Toleration
from muster.core.matching import untolerated_taint
from muster.core.placement.model import ONE_POD, PODS, PodInfo, Scoring, TopologyRequest
from muster.core.placement.nodes import MISSING, Bools, Floats, Ints, LabelColumn, NodeTable

NO_CODE = -2  # matches no row: a label value no node has

SignatureKey = Hashable


def signature_key(pod: PodInfo) -> SignatureKey:
    """What makes two pods interchangeable for placement, as a hashable value."""
    return (
        tuple(sorted(pod.requests.items())),
        tuple(sorted(pod.node_selector.items())),
        tuple(
            (tuple(sorted(term.match_labels.items())), term.match_expressions)
            for term in pod.node_affinity_terms
        ),
        pod.tolerations,
    )


class Signature:
    """One scheduling signature: its demand per column and its cached static node mask."""

    __slots__ = (
        "_demand",
        "_mask",
        "_mask_version",
        "_static_reasons",
        "affinity",
        "demand_cols",
        "key",
        "node_selector",
        "order",
        "refs",
        "requests",
        "score_cols",
        "tolerations",
    )

    def __init__(self, key: SignatureKey, pod: PodInfo, table: NodeTable) -> None:
        self.key = key
        self.requests = {r: a for r, a in pod.requests.items() if a > 0}
        self.node_selector = dict(pod.node_selector)
        self.affinity: tuple[LabelSelector, ...] = pod.node_affinity_terms
        self.tolerations: tuple[Toleration, ...] = pod.tolerations
        self.refs = 0  # pods that have it, so the scheduler can forget it
        demand = {**self.requests, PODS: self.requests.get(PODS, 0) + ONE_POD}
        self._demand = table.vector(demand)
        self.demand_cols = np.flatnonzero(self._demand > 0)
        # By resource name, not column: a sum in the same order whatever order nodes came in.
        scored = [table.columns[r] for r in sorted(self.requests) if r != PODS]
        self.score_cols = scored or [table.columns[PODS]]
        extended = any(r not in ("cpu", "memory", PODS) for r in self.requests)
        self.order = (
            not extended,
            -self.requests.get("cpu", 0),
            -self.requests.get("memory", 0),
            repr(key),
        )
        self._mask: Bools | None = None
        self._mask_version = -1
        self._static_reasons: Counter[str] = Counter()

    def demand(self, table: NodeTable) -> Ints:
        """One pod's demand per column of `table`, `pods` included."""
        width = len(table.resource_names)
        if len(self._demand) < width:  # the table gained columns this pod does not request
            self._demand = np.concatenate(
                [self._demand, np.zeros(width - len(self._demand), dtype=np.int64)]
            )
        return self._demand

    def static_mask(self, table: NodeTable) -> Bools:
        """The nodes this signature may use whatever their load (ready, schedulable, labels,
        taints); recomputed only after a node changed."""
        if self._mask is None or self._mask_version != table.version:
            self._mask, self._static_reasons = _static_filter(table, self)
            self._mask_version = table.version
        return self._mask

    def static_reasons(self, table: NodeTable) -> Counter[str]:
        """Why the nodes outside `static_mask` are, each node counted once."""
        self.static_mask(table)
        return self._static_reasons

    def label_mask(self, table: NodeTable) -> Bools:
        """Rows whose labels match the node selector and one of the affinity terms."""
        mask = np.ones(table.capacity, dtype=np.bool_)
        for key, value in self.node_selector.items():
            mask &= _equals(table.label(key), value)
        if self.affinity:
            mask &= np.logical_or.reduce([_term_mask(table, term) for term in self.affinity])
        return mask

    def taint_mask(self, table: NodeTable) -> Bools:
        """Rows whose taints this signature tolerates."""
        tolerated = np.array(
            [untolerated_taint(t, self.tolerations) is None for t in table.taint_sets],
            dtype=np.bool_,
        )
        return tolerated[table.taint_class]


def _equals(label: LabelColumn, value: str) -> Bools:
    same: Bools = label.codes == label.vocab.get(value, NO_CODE)
    return same


def _term_mask(table: NodeTable, term: LabelSelector) -> Bools:
    mask = np.ones(table.capacity, dtype=np.bool_)
    for key, value in term.match_labels.items():
        mask &= _equals(table.label(key), value)
    for requirement in term.match_expressions:
        mask &= _requirement_mask(table.label(requirement.key), requirement)
    return mask


def _requirement_mask(label: LabelColumn, req: LabelSelectorRequirement) -> Bools:
    if req.operator in ("In", "NotIn"):
        codes = [label.vocab[v] for v in req.values if v in label.vocab]
        found = np.isin(label.codes, codes)
        return found if req.operator == "In" else ~found
    present: Bools = label.codes != MISSING
    return present if req.operator == "Exists" else ~present


# --- counting and choosing -------------------------------------------------------------------


def fit_counts(table: NodeTable, sig: Signature, free: Ints, mask: Bools) -> Ints:
    """How many more pods of `sig` fit on each row of `free`, 0 outside `mask`."""
    demand = sig.demand(table)
    cols = sig.demand_cols.tolist()
    counts: Ints = free[:, cols[0]] // demand[cols[0]]
    for col in cols[1:]:
        np.minimum(counts, free[:, col] // demand[col], out=counts)
    np.maximum(counts, 0, out=counts)
    counts *= mask
    return counts


def order_key(table: NodeTable, sig: Signature, free: Ints, scoring: Scoring) -> Floats:
    """Lower is better: binpack prefers the least free room (the most allocated node), spread
    the most, as the sum of free fractions over the resources the pod requests."""
    inverse = table.inv_alloc
    cols = sig.score_cols
    room = free[:, cols[0]] * inverse[:, cols[0]]
    for col in cols[1:]:
        room += free[:, col] * inverse[:, col]
    return room if scoring == "binpack" else -room


def choose(
    counts: Ints, key: Floats, rank: Ints, wanted: int, scoring: Scoring
) -> tuple[Ints, Ints]:
    """Rows and pods per row for up to `wanted` pods, best rows first (ties by node name).

    binpack fills the best row before the next (what placing the pods one by one would do:
    a fuller node only gets better); spread deals them round-robin, one per row per round.
    """
    candidates = np.flatnonzero(counts > 0)
    if len(candidates) == 0 or wanted <= 0:
        return _EMPTY, _EMPTY
    keys = key[candidates]
    if scoring == "binpack" or wanted == 1:
        best = _best(candidates, keys, rank)
        if counts[best] >= wanted:
            return np.array([best]), np.array([wanted])
    ordered = candidates[np.lexsort((rank[candidates], keys))]
    per_row = counts[ordered]
    taken = _fill(per_row, wanted) if scoring == "binpack" else _deal(per_row, wanted)
    used = taken > 0
    return ordered[used], taken[used]


_EMPTY = np.zeros(0, dtype=np.int64)


def _best(candidates: Ints, keys: Floats, rank: Ints) -> int:
    ties = candidates[keys == keys.min()]
    return int(ties[np.argmin(rank[ties])]) if len(ties) > 1 else int(ties[0])


def _fill(per_row: Ints, wanted: int) -> Ints:
    """Take whole rows in order until `wanted` pods are placed (the last row partly)."""
    before = np.cumsum(per_row) - per_row
    taken: Ints = np.clip(wanted - before, 0, per_row)
    return taken


def _deal(per_row: Ints, wanted: int) -> Ints:
    """Round-robin: each round gives one pod to every row that still has room, in order."""
    wanted = min(wanted, int(per_row.sum()))
    low, high = 1, int(per_row.max())  # the smallest round that reaches `wanted`
    while low < high:
        mid = (low + high) // 2
        if int(np.minimum(per_row, mid).sum()) >= wanted:
            high = mid
        else:
            low = mid + 1
    taken = np.minimum(per_row, low - 1)
    last_round = per_row >= low
    extra = wanted - int(taken.sum())
    taken[last_round & (np.cumsum(last_round) <= extra)] += 1
    return taken


# --- placing a unit --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Group:
    """`count` pods of one signature to place."""

    sig: Signature
    count: int


@dataclass(frozen=True, slots=True)
class Slots:
    """Where a group's pods go: `counts[i]` pods on row `rows[i]`, best rows first."""

    rows: Ints
    counts: Ints

    @property
    def total(self) -> int:
        return int(self.counts.sum())


@dataclass(frozen=True, slots=True)
class Fit:
    """The outcome of placing a unit: slots per group, and `reason` when short of `wanted`."""

    slots: tuple[Slots, ...]
    placed: int
    wanted: int
    reason: str = ""

    @property
    def complete(self) -> bool:
        return self.placed >= self.wanted


@dataclass(frozen=True, slots=True)
class Placer:
    """Places units on one table with one scoring policy."""

    table: NodeTable
    scoring: Scoring

    def place(
        self,
        groups: Sequence[Group],
        free: Ints,
        *,
        whole: bool = True,
        topology: TopologyRequest | None = None,
        domain: str | None = None,
        within: Bools | None = None,
        explain: bool = True,
    ) -> Fit:
        """Place every pod of `groups` on the rows of `free` (allocatable minus everything that
        counts as used for this unit), largest groups first.

        `whole`: all or nothing (a gang); else as many as fit (a run of identical pods placed on
        their own, one group). `topology` keeps the pods within one value of a node label
        (`domain`, if given, is the only value allowed). `within` (a row mask) keeps them on
        those rows: the domain of a CompositePodGroup above. Never changes `free`.
        """
        wanted = sum(g.count for g in groups)
        if topology is None:
            return self._across(groups, free, whole=whole, within=within, explain=explain)
        label = self.table.label(topology.key)
        for code in self._domains(groups[0], free, label, domain, within):
            mask = label.codes == code
            if within is not None:
                mask &= within
            fit = self._across(groups, free, whole=True, within=mask, explain=False)
            if fit.complete:
                return fit
        if topology.required:
            reason = f"no domain of {topology.key} fits the gang ({wanted} pods)"
            return Fit(slots=(), placed=0, wanted=wanted, reason=reason)
        return self._across(groups, free, whole=whole, within=within, explain=explain)

    def _domains(
        self,
        first: Group,
        free: Ints,
        label: LabelColumn,
        domain: str | None,
        within: Bools | None = None,
    ) -> list[int]:
        """Label values whose nodes have room for the first group, best first: binpack the
        tightest (fewest such pods fit), spread the roomiest; ties by value."""
        mask = first.sig.static_mask(self.table) & (label.codes != MISSING)
        if within is not None:
            mask &= within
        counts = fit_counts(self.table, first.sig, free, mask)
        rows = np.flatnonzero(counts)
        room = np.bincount(label.codes[rows], weights=counts[rows], minlength=len(label.values))
        codes = [int(c) for c in np.flatnonzero(room >= first.count)]
        if domain is not None:
            codes = [c for c in codes if label.values[c] == domain]
        sign = 1 if self.scoring == "binpack" else -1
        return sorted(codes, key=lambda c: (sign * room[c], label.values[c]))

    def _across(
        self,
        groups: Sequence[Group],
        free: Ints,
        *,
        whole: bool,
        within: Bools | None,
        explain: bool,
    ) -> Fit:
        table = self.table
        wanted = sum(g.count for g in groups)
        work = free.copy(order="F") if len(groups) > 1 else free  # later groups see earlier ones
        slots: list[Slots] = []
        placed = 0
        for n, group in enumerate(groups):
            mask = group.sig.static_mask(table)
            if within is not None:
                mask = mask & within
            counts = fit_counts(table, group.sig, work, mask)
            key = order_key(table, group.sig, work, self.scoring)
            rows, per_row = choose(counts, key, table.rank, group.count, self.scoring)
            got = Slots(rows=rows, counts=per_row)
            slots.append(got)
            placed += got.total
            if got.total < group.count:
                reason = ""
                if explain:
                    reason = unavailable(table, group.sig, work, minus=got)
                    if whole and wanted > 1:
                        reason = f"{placed} of {wanted} pods fit: {reason}"
                if whole:
                    return Fit(slots=(), placed=placed, wanted=wanted, reason=reason)
                return Fit(slots=tuple(slots), placed=placed, wanted=wanted, reason=reason)
            if n < len(groups) - 1:
                work[rows] -= np.outer(per_row, group.sig.demand(table))
        return Fit(slots=tuple(slots), placed=placed, wanted=wanted)


# --- reasons ---------------------------------------------------------------------------------

NOT_READY = "node(s) were not ready"
UNSCHEDULABLE = "node(s) were unschedulable"
SELECTOR = "node(s) didn't match Pod's node affinity/selector"


def _static_filter(table: NodeTable, sig: Signature) -> tuple[Bools, Counter[str]]:
    """The rows `sig` may use whatever their load, and why the others may not, in
    kube-scheduler's words: each node counts once, for the first reason of not ready,
    unschedulable, labels, taints."""
    reasons: Counter[str] = Counter()
    rest = table.alive.copy()

    def rule_out(bad: Bools, why: str) -> None:
        nonlocal rest
        hit = rest & bad
        reasons[why] += int(hit.sum())
        rest = rest & ~hit

    rule_out(~table.ready, NOT_READY)
    rule_out(table.unschedulable, UNSCHEDULABLE)
    rule_out(~sig.label_mask(table), SELECTOR)
    for cls in sorted(set(table.taint_class[rest].tolist())):
        taint = untolerated_taint(table.taint_sets[cls], sig.tolerations)
        if taint is not None:
            shown = f"{taint.key}: {taint.value}" if taint.value else taint.key
            rule_out(table.taint_class == cls, f"node(s) had untolerated taint {{{shown}}}")
    return rest, +reasons


def unavailable(table: NodeTable, sig: Signature, free: Ints, *, minus: Slots | None = None) -> str:
    """Why no node takes one more pod of `sig` (once `minus` is placed on `free`), in
    kube-scheduler's words: "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had
    untolerated taint {gpu: true}". A node ruled out by its static facts counts once, for the
    first of them; any other node once per resource it lacks.
    """
    if table.size == 0:
        return "no nodes in the cluster"
    reasons = Counter(sig.static_reasons(table))
    usable = sig.static_mask(table)
    demand = sig.demand(table)
    for col in sig.demand_cols.tolist():
        short = usable & (free[:, col] < demand[col])
        if minus is not None and minus.total:
            left = free[minus.rows, col] - minus.counts * demand[col]
            short[minus.rows] = usable[minus.rows] & (left < demand[col])
        resource = table.resource_names[col]
        reasons["Too many pods" if resource == PODS else f"Insufficient {resource}"] += int(
            short.sum()
        )
    shown = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items()) if count)
    return f"0/{table.size} nodes are available: {shown}"
