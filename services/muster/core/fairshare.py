"""Fair sharing: dominant resource share (DRS) of a node, weighted, as Kueue computes it.

A node's share is, over resources, the largest ratio of what it borrows above its subtree
quota to what its cohort tree could lend, per mille, divided by the node's weight. A node
that borrows nothing has share 0; a node with weight 0 that borrows has an infinite share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from muster.core.quota import FlavorResource, QuotaNode


def lendable_by_resource(root: QuotaNode) -> dict[str, int]:
    """What the whole tree could lend, per resource name (summed over flavors)."""
    total: dict[str, int] = {}
    for (_, resource), quota in root.subtree_quota.items():
        total[resource] = total.get(resource, 0) + quota
    return total


def dominant_share(
    node: QuotaNode,
    lendable: Mapping[str, int],
    *,
    plus: Mapping[FlavorResource, int] | None = None,
    minus: Mapping[FlavorResource, int] | None = None,
) -> float:
    """DRS of `node` if it also used `plus` and no longer used `minus`."""
    if node.parent is None:
        return 0.0
    borrowed: dict[str, int] = {}
    frs = set(node.subtree_quota) | set(node.usage) | set(plus or ()) | set(minus or ())
    for fr in frs:
        used = node.usage.get(fr, 0)
        if plus:
            used += plus.get(fr, 0)
        if minus:
            used -= minus.get(fr, 0)
        over = used - node.subtree_quota.get(fr, 0)
        if over > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + over
    if not borrowed:
        return 0.0
    if node.weight <= 0:
        return math.inf
    ratio = max(
        (amount * 1000 // lendable[r] for r, amount in borrowed.items() if lendable.get(r, 0) > 0),
        default=0,
    )
    return ratio / node.weight
