"""The units a scheduling pass places, built from `PlacementState`'s records: pods grouped
by signature, and a CompositePodGroup tree cut to the part at quorum (`treefit.Leaf` and
`Branch`). Pure, used by `GangScheduler`.
"""

from __future__ import annotations

from collections.abc import Sequence

from muster.core.placement.fit import Group
from muster.core.placement.model import PodKey
from muster.core.placement.records import WAITING_FOR_SPEC, GangRecord
from muster.core.placement.state import PlacementState
from muster.core.placement.treefit import Branch, Groups, Leaf


def groups_of(state: PlacementState, pods: Sequence[PodKey]) -> Groups:
    """`pods` by signature, largest first; each group's pods in key order."""
    by_sig: dict[object, list[PodKey]] = {}
    for key in pods:
        by_sig.setdefault(state.pods[key].sig.key, []).append(key)
    groups = [(Group(state.sigs[s], len(keys)), keys) for s, keys in by_sig.items()]
    return sorted(groups, key=lambda group: group[0].sig.order)


def at_quorum(state: PlacementState, record: GangRecord) -> tuple[Leaf | Branch | None, str]:
    """The part of the tree under `record` at quorum, bottom-up (a gang: `min_count` of its
    pods present, tried with all its pending pods, then its first `min_count`; a
    CompositePodGroup: `min_groups` of its children at quorum), or None and why not."""
    spec = record.spec
    if record.composite is None:
        if spec is None:
            return None, f"{record.key}: {WAITING_FOR_SPEC}"
        pending = state.pending(record)
        need = spec.min_count - record.held
        if len(pending) < need:
            return None, f"{record.key}: {len(pending) + record.held} of {spec.min_count} pods"
        if need <= 0 and not pending:
            return None, ""
        tries = [pending, pending[:need]] if 0 < need < len(pending) else [pending]
        groups = tuple(groups_of(state, pods) for pods in tries)
        return Leaf(key=record.key, tries=groups, topology=spec.topology), ""
    composite = record.composite
    children: list[Leaf | Branch] = []
    short: list[str] = []
    for key in sorted(record.children):
        child, why = at_quorum(state, state.gangs[key])
        if child is not None:
            children.append(child)
        elif why:
            short.append(why)
    if len(children) < composite.min_groups:
        reason = f"{len(children)} of {composite.min_groups} groups of {record.key} ready"
        return None, f"{reason}: {'; '.join(short)}" if short else reason
    branch = Branch(
        key=record.key,
        children=tuple(children),
        min_children=composite.min_groups,
        topology=composite.topology,
    )
    return branch, ""
