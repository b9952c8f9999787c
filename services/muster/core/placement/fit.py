"""Placing pods on the node table in bulk: filter, count, score and choose, all or nothing.

Groups of pods of one signature (`signature`) are placed in one step each: how many more fit on
every node, the nodes' order by score, and the choice (`counting`), several on one node when
they fit. Used by `decisions.Decider` and `treefit`; pure, numpy only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from muster.core.placement.counting import Rooms, choose, fit_counts, order_key
from muster.core.placement.model import PODS, Scoring, TopologyRequest
from muster.core.placement.nodes import MISSING, Bools, Ints, LabelColumn, NodeTable
from muster.core.placement.signature import Signature

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
    total: int = field(init=False)  # pods in all: read up to three times a gang placed

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", int(self.counts.sum()))  # frozen otherwise


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
    rooms: Rooms = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rooms", Rooms(self.table, self.scoring))  # frozen otherwise

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
            if n == 0 and within is None and table.is_live(free):
                rows, per_row = self.rooms.of(group.sig).choose(group.count)
            else:
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
