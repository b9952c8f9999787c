"""CompositePodGroup trees among `PlacementState`'s gang records: links, roots, quorum.

A gang whose spec names `parents` hangs under a record per CompositePodGroup (`composite`
set, no pods of its own), created and updated from the specs of the gangs below it and
forgotten with its last child. Until a tree has been placed once (`placed` on its root), its
root is the unit a scheduling pass decides on; then each gang in it goes on as a gang of its
own, kept inside the domains its CompositePodGroups hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from muster.core.placement.model import GangKey, GangSpec
from muster.core.placement.records import GangRecord

if TYPE_CHECKING:
    from muster.core.placement.state import PlacementState


def link(state: PlacementState, gang: GangRecord, spec: GangSpec) -> None:
    """Hang `gang` under the CompositePodGroups its spec names (innermost first)."""
    child = gang
    for composite in spec.parents:
        record = state.gang(composite.key)
        if record.composite != composite:
            record.composite = composite
            record.timed_out = False  # a changed tree is tried anew
            state.dirty_gangs.add(root_of(state, record).key)
        record.priority = spec.priority
        if child.parent != composite.key:
            unlink(state, child)
            child.parent = composite.key
            record.children.add(child.key)
        child = record
    if child.parent is not None:  # the outermost named is a root now
        unlink(state, child)
    state.dirty_gangs.add(root_of(state, gang).key)


def unlink(state: PlacementState, record: GangRecord) -> None:
    """Take `record` out of its tree; a CompositePodGroup left without children goes."""
    key = record.parent
    if key is None:
        return
    record.parent = None
    parent = state.gangs[key]
    parent.children.discard(record.key)
    state.dirty_gangs.add(root_of(state, parent).key)
    if not parent.children:
        unlink(state, parent)
        state.drop_nomination(parent)
        state.dirty_gangs.discard(parent.key)
        state.waiting_gangs.discard(parent.key)
        del state.gangs[parent.key]


def root_of(state: PlacementState, record: GangRecord) -> GangRecord:
    while record.parent is not None:
        record = state.gangs[record.parent]
    return record


def unit_of(state: PlacementState, record: GangRecord) -> GangRecord | None:
    """What a pass decides for a change to `record`: the root of a tree not placed yet, else
    the gang itself (None for a CompositePodGroup of a placed tree)."""
    root = root_of(state, record)
    if root is record or not root.placed:
        return root
    return None if record.composite is not None else record


def leaves(state: PlacementState, record: GangRecord) -> Iterator[GangRecord]:
    """The gangs in the tree under `record` (itself if it is a gang), by key."""
    if record.composite is None:
        yield record
        return
    for key in sorted(record.children):
        yield from leaves(state, state.gangs[key])


def ancestors(state: PlacementState, record: GangRecord) -> Iterator[GangRecord]:
    """The CompositePodGroups above `record`, innermost first."""
    while record.parent is not None:
        record = state.gangs[record.parent]
        yield record


def released(state: PlacementState, gang: GangRecord) -> None:
    """`gang` holds nothing any more: once no gang of its tree does, the tree is placed
    again as one unit."""
    root = root_of(state, gang)
    if root is gang or not root.placed:
        return
    if all(leaf.held == 0 for leaf in leaves(state, root)):
        root.placed = False
        state.dirty_gangs.add(root.key)
        for leaf in leaves(state, root):
            state.regroup(leaf)


def pods_needed(state: PlacementState, record: GangRecord) -> int:
    """How many pods the tree under `record` needs before it can be placed: a gang's
    minCount (0 before its spec is known); a CompositePodGroup's, those of its
    `min_groups` least demanding children. What `GangWaiting.min_count` says of a tree, in
    pods as for a gang: the users who read "8 of 2 pods pending" saw its group count."""
    if record.composite is None:
        return record.spec.min_count if record.spec is not None else 0
    needs = sorted(pods_needed(state, state.gangs[key]) for key in record.children)
    return sum(needs[: record.composite.min_groups])


def groups_below(state: PlacementState, root: GangRecord) -> tuple[GangKey, ...]:
    return tuple(leaf.key for leaf in leaves(state, root))
