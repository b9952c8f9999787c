"""Placing a CompositePodGroup tree in one decision: every group at quorum, all or nothing.

A `Branch` (a CompositePodGroup) holds when at least `min_children` of its children fit; with
a topology key they must all fit in one value of it, tried best first, and the children's own
domains are searched inside it (constraints resolve top-down). A `Leaf` (a gang) holds every
pending pod if they fit, else its first `min_count`. Children are tried in order, each on the
room the ones before it left; the search is greedy, as kube-scheduler's is. Pure, numpy only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from muster.core.placement.counting import fit_counts
from muster.core.placement.fit import Fit, Group, Placer
from muster.core.placement.model import GangKey, PodKey, TopologyRequest
from muster.core.placement.nodes import MISSING, Bools, Ints, LabelColumn

Groups = list[tuple[Group, list[PodKey]]]


@dataclass(frozen=True, slots=True)
class Leaf:
    """A gang at quorum: the ways to place it, best first (all pending pods, then the first
    `min_count`), and its own topology (its held domain, if it holds pods already)."""

    key: GangKey
    tries: tuple[Groups, ...]
    topology: TopologyRequest | None = None


@dataclass(frozen=True, slots=True)
class Branch:
    key: GangKey
    children: tuple[Leaf | Branch, ...]
    min_children: int
    topology: TopologyRequest | None = None


@dataclass(frozen=True, slots=True)
class LeafFit:
    groups: Groups
    fit: Fit


@dataclass(frozen=True, slots=True)
class TreeFit:
    """The gangs placed, by key, or (empty `leaves`) why the tree does not fit."""

    leaves: dict[GangKey, LeafFit]
    reason: str = ""

    @property
    def complete(self) -> bool:
        return bool(self.leaves)


def place_tree(
    placer: Placer,
    node: Leaf | Branch,
    free: Ints,
    *,
    within: Bools | None = None,
    explain: bool = True,
) -> TreeFit:
    """Place the tree under `node` on the rows of `free` (never changed), inside `within`."""
    return _place(placer, node, free, within, explain)


def _place(
    placer: Placer, node: Leaf | Branch, free: Ints, within: Bools | None, explain: bool
) -> TreeFit:
    if isinstance(node, Leaf):
        return _place_leaf(placer, node, free, within, explain)
    if node.topology is None:
        return _place_children(placer, node, free, within, explain)
    label = placer.table.label(node.topology.key)
    reason = f"no {node.topology.key} domain fits {node.min_children} groups of {node.key}"
    for code in _domains(placer, node, free, within, label):
        mask = label.codes == code
        if within is not None:
            mask &= within
        found = _place_children(placer, node, free, mask, explain=False)
        if found.complete:
            return found
    if explain:  # the closest attempt's reason, over all domains
        found = _place_children(placer, node, free, within, explain=True)
        if not found.complete:
            reason = f"{reason}; {found.reason}"
    return TreeFit(leaves={}, reason=reason)


def _place_leaf(
    placer: Placer, leaf: Leaf, free: Ints, within: Bools | None, explain: bool
) -> TreeFit:
    fit: Fit | None = None
    for groups in leaf.tries:
        plain = [g for g, _ in groups]
        fit = placer.place(plain, free, topology=leaf.topology, within=within, explain=explain)
        if fit.complete:
            return TreeFit(leaves={leaf.key: LeafFit(groups, fit)})
    reason = fit.reason if fit is not None else ""
    return TreeFit(leaves={}, reason=f"{leaf.key}: {reason}" if reason else "")


def _place_children(
    placer: Placer, node: Branch, free: Ints, within: Bools | None, explain: bool
) -> TreeFit:
    work = free.copy(order="F")
    placed: dict[GangKey, LeafFit] = {}
    fitted = 0
    first_failure = ""
    for child in node.children:
        found = _place(placer, child, work, within, explain)
        if not found.complete:
            first_failure = first_failure or found.reason
            continue
        fitted += 1
        for leaf in found.leaves.values():
            _take(placer, work, leaf)
        placed.update(found.leaves)
    if fitted >= node.min_children:
        return TreeFit(leaves=placed)
    reason = f"{fitted} of {node.min_children} groups of {node.key} fit"
    return TreeFit(leaves={}, reason=f"{reason}: {first_failure}" if first_failure else reason)


def _take(placer: Placer, work: Ints, leaf: LeafFit) -> None:
    table = placer.table
    for (group, _), slots in zip(leaf.groups, leaf.fit.slots, strict=False):
        if slots.total:
            work[slots.rows] -= np.outer(slots.counts, group.sig.demand(table))


def _domains(
    placer: Placer,
    node: Branch,
    free: Ints,
    within: Bools | None,
    label: LabelColumn,
) -> list[int]:
    """The values of the branch's topology label on live rows, best first by the room for the
    tree's first pods: binpack the tightest, spread the roomiest; ties by value."""
    first = _first_group(node)
    table = placer.table
    codes, values = label.codes, label.values
    present = table.alive & (codes != MISSING)
    if within is not None:
        present &= within
    counts = fit_counts(table, first.sig, free, present & first.sig.static_mask(table))
    rows = np.flatnonzero(counts)
    room = np.bincount(codes[rows], weights=counts[rows], minlength=len(values))
    found = [int(c) for c in np.unique(codes[present])]
    sign = 1 if placer.scoring == "binpack" else -1
    return sorted(found, key=lambda c: (sign * room[c], values[c]))


def _first_group(node: Leaf | Branch) -> Group:
    while isinstance(node, Branch):
        node = node.children[0]
    return node.tries[-1][0][0]


def flattened(fit: TreeFit) -> list[tuple[Group, Ints, Ints]]:
    """Every group placed, with its rows and pods per row."""
    return [
        (group, slots.rows, slots.counts)
        for leaf in fit.leaves.values()
        for (group, _), slots in zip(leaf.groups, leaf.fit.slots, strict=False)
        if slots.total
    ]


def at_minimum(node: Leaf | Branch) -> Leaf | Branch:
    """`node` asking only for its quorum: each gang its first `min_count` pods."""
    if isinstance(node, Leaf):
        return Leaf(key=node.key, tries=node.tries[-1:], topology=node.topology)
    children = tuple(at_minimum(child) for child in node.children)
    return Branch(
        key=node.key, children=children, min_children=node.min_children, topology=node.topology
    )


def leaves_of(node: Leaf | Branch) -> Iterator[Leaf]:
    if isinstance(node, Leaf):
        yield node
        return
    for child in node.children:
        yield from leaves_of(child)


def place_under(
    placer: Placer,
    leaf: Leaf,
    above: Sequence[tuple[GangKey, TopologyRequest]],
    free: Ints,
    *,
    within: Bools | None,
) -> Fit:
    """`leaf` placed as the one child of CompositePodGroups (`above`, innermost first) whose
    domains are not held: each chooses a value of its topology anew."""
    node: Leaf | Branch = leaf
    for key, topology in above:
        node = Branch(key=key, children=(node,), min_children=1, topology=topology)
    found = place_tree(placer, node, free, within=within)
    if found.complete:
        return found.leaves[leaf.key].fit
    wanted = sum(g.count for g, _ in leaf.tries[0])
    return Fit(slots=(), placed=0, wanted=wanted, reason=found.reason)
