"""Fair sharing: a node's dominant resource share (DRS), compared as Kueue compares it.

A node's DRS is, over resources, the largest ratio of what it borrows above its subtree quota
to what its parent could lend (per mille, exact), divided by its weight. `Share` orders like
Kueue's CompareDRS: a node that borrows with weight 0 ranks above every other node, and such
nodes rank among themselves by their unweighted ratio (Kueue's `fair_sharing.go`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from muster.core.quota import FlavorResource, QuotaNode


class Share(NamedTuple):
    """A DRS as Kueue compares it; tuples order exactly as CompareDRS does."""

    zero_weight_borrows: bool
    value: float  # the unweighted ratio when zero_weight_borrows, else ratio / weight


ZERO = Share(False, 0.0)


def dominant_share(node: QuotaNode) -> Share:
    """The node's DRS now; a root (no parent) has none."""
    parent = node.parent
    if parent is None:
        return ZERO
    borrowed: dict[str, int] = {}
    usage = node.usage
    for fr, quota in node.subtree_quota.items():
        over = usage.get(fr, 0) - quota
        if over > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + over
    if not borrowed:
        return ZERO
    lendable = parent.lendable
    ratio = max(
        (amount * 1000.0 / lendable[r] for r, amount in borrowed.items() if lendable.get(r, 0) > 0),
        default=0.0,
    )
    if ratio == 0.0:
        return ZERO
    if node.weight <= 0:
        return Share(True, ratio)
    return Share(False, ratio / node.weight)


def borrows_on(node: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
    """True if the node uses more than its subtree quota of any of `frs` (Kueue's
    DRS.IsBorrowingOn, for the flavors and resources a workload asks for); a root has no
    one to borrow from."""
    if node.parent is None:
        return False
    return any(node.usage.get(fr, 0) > node.subtree_quota.get(fr, 0) for fr in frs)


def with_usage(node: QuotaNode, usage: Mapping[FlavorResource, int], sign: int) -> None:
    """Add (sign 1) or remove (sign -1) `usage` on a ClusterQueue node, carried up the tree;
    tentative work calls it twice, the second time to undo the first."""
    for fr, amount in usage.items():
        node.add_usage(fr, sign * amount)
