"""Where a unit of a placed gang or tree must stay: the topology domains already held.

A gang with a required topology that holds pods keeps its later pods in the same value of its
label; a gang in a CompositePodGroup tree stays inside the value each CompositePodGroup above
it holds. Pure functions of `PlacementState`, used by `GangScheduler`.
"""

from __future__ import annotations

import numpy as np

from muster.core.placement import trees
from muster.core.placement.model import TopologyRequest
from muster.core.placement.nodes import Bools, NodeTable
from muster.core.placement.records import GangRecord, PodRecord
from muster.core.placement.signature import NO_CODE
from muster.core.placement.state import PlacementState

Domains = tuple[tuple[str, str], ...]  # (node label, value) pairs a unit must stay inside
Where = tuple[Domains, TopologyRequest | None]  # and a label whose one value it must choose


def held_domain(state: PlacementState, gang: GangRecord) -> str | None:
    """The value of a required topology label where the gang's bound pods already are."""
    spec = gang.spec
    if spec is None or spec.topology is None or not spec.topology.required or not gang.held:
        return None
    return label_held(state, gang, spec.topology.key)


def label_held(state: PlacementState, record: GangRecord, label: str) -> str | None:
    """The value of node label `label` where the first pod held under `record` (a gang, or a
    CompositePodGroup's whole subtree) is; None when none holds room on a known node."""
    table = state.table
    for leaf in trees.leaves(state, record):
        if not leaf.held:
            continue
        for key in sorted(leaf.pods):
            node = state.pods[key].node
            row = None if node is None else table.index.get(node)
            info = None if row is None else table.infos[row]
            if info is not None:
                return info.labels.get(label)
    return None


def domains_above(state: PlacementState, gang: GangRecord) -> Domains:
    """(label, value) of each CompositePodGroup above `gang` whose tree holds a domain of its
    topology: the gang's pods must stay inside all of them."""
    found: list[tuple[str, str]] = []
    for composite in trees.ancestors(state, gang):
        spec = composite.composite
        if spec is None or spec.topology is None:
            continue
        value = label_held(state, composite, spec.topology.key)
        if value is not None:
            found.append((spec.topology.key, value))
    return tuple(found)


def unheld_above(state: PlacementState, gang: GangRecord) -> list[GangRecord]:
    """The CompositePodGroups above `gang` with a topology but no held domain (their tree holds
    nothing, or only on nodes gone since), innermost first."""
    return [
        composite
        for composite in trees.ancestors(state, gang)
        if composite.composite is not None
        and composite.composite.topology is not None
        and label_held(state, composite, composite.composite.topology.key) is None
    ]


def where(state: PlacementState, pod: PodRecord) -> Where:
    """Where a pod placed on its own must go: inside its gang's held domain (required topology)
    and those of the CompositePodGroups above it; in one domain of the innermost
    CompositePodGroup above whose tree holds none (on nodes gone since)."""
    gang_key = pod.info.gang
    gang = None if gang_key is None else state.gangs.get(gang_key)
    if gang is None or gang.spec is None:
        return (), None
    own = held_domain(state, gang)
    above = domains_above(state, gang)
    topology = gang.spec.topology
    domains = ((topology.key, own), *above) if own is not None and topology else above
    unheld = unheld_above(state, gang)
    return domains, unheld[0].composite.topology if unheld and unheld[0].composite else None


def mask(table: NodeTable, domains: Domains) -> Bools | None:
    """The rows inside every one of `domains`; None for no constraint."""
    if not domains:
        return None
    found = np.ones(table.capacity, dtype=np.bool_)
    for label, value in domains:
        column = table.label(label)
        found &= column.codes == column.vocab.get(value, NO_CODE)
    return found
