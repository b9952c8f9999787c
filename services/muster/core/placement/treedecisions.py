"""A CompositePodGroup tree not placed yet, decided in one step: every group at quorum, or none.

The tree's root is the unit (`trees`); its gangs are placed together against one view of the
free room (`treefit.place_tree`), each permitted with `Decider.permit_gang`; the deadline,
waiting and preemption are the root's, with the whole tree at quorum as the preemptor. Once
placed, each gang goes on as a gang of its own inside the domains the tree holds.
"""

from __future__ import annotations

from muster.core.placement import trees
from muster.core.placement.decisions import Decider
from muster.core.placement.model import Decision
from muster.core.placement.nodes import Ints
from muster.core.placement.records import GangRecord
from muster.core.placement.state import PlacementState
from muster.core.placement.treefit import (
    Branch,
    Leaf,
    at_minimum,
    flattened,
    leaves_of,
    place_tree,
)
from muster.core.placement.units import at_quorum
from muster.core.placement.victims import Placed


def decide_tree(decider: Decider, root: GangRecord, now_s: float, out: list[Decision]) -> None:
    """Place a tree not placed yet in one decision: every group at quorum, or nothing."""
    state = decider.state
    if root.placed or root.timed_out:
        return
    pending = sum(len(state.pending(leaf)) for leaf in trees.leaves(state, root))
    groups = trees.groups_below(state, root)
    if not pending:
        state.waiting_gangs.discard(root.key)
        return
    node, reason = at_quorum(state, root)
    if node is None:
        state.waiting_gangs.discard(root.key)
        decider.wait(root, reason, pending, trees.pods_needed(state, root), out, groups=groups)
        return
    if root.started_s is None:  # the first attempt of this try starts the clock
        root.started_s = now_s
        state.deadlines.push(root)
    free = state.nominated.view(root.priority, own=root.key)
    fit = place_tree(decider.placer, node, free)
    if fit.complete:
        for key in sorted(fit.leaves):
            leaf = fit.leaves[key]
            decider.permit_gang(state.gangs[key], leaf.fit, leaf.groups, out)
        _tree_placed(state, root)
        return
    deadline = root.deadline_s(state.default_timeout_s)
    if deadline is not None and now_s >= deadline:
        every = [p for leaf in trees.leaves(state, root) for p in state.pending(leaf)]
        decider.time_out(root, fit.reason, sorted(every), out)
        return
    root.tried = state.epoch
    state.waiting_gangs.add(root.key)
    nomination = root.nomination
    if nomination is not None and nomination.victim_pods:
        return  # the victims are still terminating; their room is kept for the tree
    if not (decider.preemption and _preempts(state, root) and _preempt(decider, root, node, out)):
        needed = trees.pods_needed(state, root)
        decider.wait(root, fit.reason, pending, needed, out, groups=groups)


def _tree_placed(state: PlacementState, root: GangRecord) -> None:
    state.mark_placed(root)
    for leaf in trees.leaves(state, root):
        if not leaf.placed:
            state.regroup(leaf)  # its own gang from now on, inside the tree's domains


def _preempts(state: PlacementState, root: GangRecord) -> bool:
    return all(leaf.spec is None or leaf.spec.preempts for leaf in trees.leaves(state, root))


def _preempt(decider: Decider, root: GangRecord, node: Leaf | Branch, out: list[Decision]) -> bool:
    """Workload-aware preemption with the whole tree (at quorum) as the preemptor."""
    quorum = at_minimum(node)
    groups = [g for leaf in leaves_of(quorum) for g, _ in leaf.tries[-1]]

    def place(free: Ints) -> Placed | None:
        fit = place_tree(decider.placer, quorum, free, explain=False)
        return flattened(fit) if fit.complete else None

    return decider.preempt_for(root, root.priority, groups, place, out)
