"""An independent restatement of Kueue's quota rules, as bounds on sums of usage.

Reads only the ClusterQueue and Cohort objects, never the engine. For each cohort tree and
each (flavor, resource), with U(X) the usage of every ClusterQueue under node X and Q(X) the
nominal quota of every node under X (X included):
- a ClusterQueue uses only flavors and resources it lists;
- root R: U(R) <= Q(R), the tree cannot use more than it owns;
- borrowingLimit B on X: U(X) <= Q(X) + B, X borrows at most B from outside;
- lendingLimit L on X: U(R) - U(X) <= Q(R) - Q(X) + min(L, max(0, Q(X) - U(X))), the rest of
  the tree gets from X at most L and only what X leaves unused.
These are necessary conditions (sound), not Kueue's exact admission arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from muster.api.model import Admission, ApiObject, ClusterQueue, Cohort, ResourceGroup, Workload

FlavorResource = tuple[str, str]
Usage = Mapping[str, Mapping[FlavorResource, int]]  # ClusterQueue -> (flavor, resource) -> milli


@dataclass
class _Node:
    name: str  # "cq/<name>" or "cohort/<name>"
    parent: str | None
    nominal: dict[FlavorResource, int] = field(default_factory=dict)
    borrowing_limit: dict[FlavorResource, int] = field(default_factory=dict)
    lending_limit: dict[FlavorResource, int] = field(default_factory=dict)


def _read_groups(node: _Node, groups: Iterable[ResourceGroup]) -> None:
    for group in groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                fr = (flavor.name, quota.name)
                node.nominal[fr] = quota.nominal_quota
                if quota.borrowing_limit is not None:
                    node.borrowing_limit[fr] = quota.borrowing_limit
                if quota.lending_limit is not None:
                    node.lending_limit[fr] = quota.lending_limit


class QuotaForest:
    """ClusterQueues and Cohorts as a forest; `violations(usage)` lists every broken bound."""

    def __init__(self, objects: Iterable[ApiObject]) -> None:
        self.nodes: dict[str, _Node] = {}
        for obj in objects:
            if isinstance(obj, Cohort):
                node = _Node(f"cohort/{obj.name}", f"cohort/{obj.parent}" if obj.parent else None)
                _read_groups(node, obj.resource_groups)
                self.nodes[node.name] = node
        for obj in objects:
            if isinstance(obj, ClusterQueue):
                node = _Node(f"cq/{obj.name}", f"cohort/{obj.cohort}" if obj.cohort else None)
                _read_groups(node, obj.resource_groups)
                self.nodes[node.name] = node
        for node in list(self.nodes.values()):
            if node.parent is not None and node.parent not in self.nodes:
                self.nodes[node.parent] = _Node(node.parent, None)  # implicit cohort

    def _subtree(self, name: str) -> Iterator[_Node]:
        yield self.nodes[name]
        for node in self.nodes.values():
            if node.parent == name:
                yield from self._subtree(node.name)

    def root_of(self, name: str) -> str:
        """The root of the tree holding node `name` (\"cq/<name>\" or \"cohort/<name>\")."""
        parent = self.nodes[name].parent
        return name if parent is None else self.root_of(parent)

    def violations(self, usage: Usage) -> list[str]:
        found: list[str] = []
        for cq, used in usage.items():
            node = self.nodes[f"cq/{cq}"]
            found += [
                f"cq/{cq} uses {amount} of {fr}, which it does not list"
                for fr, amount in used.items()
                if amount and fr not in node.nominal
            ]
        frs = sorted({fr for n in self.nodes.values() for fr in n.nominal})
        for fr in frs:
            found += self._check(fr, usage)
        return found

    def _check(self, fr: FlavorResource, usage: Usage) -> Iterator[str]:
        def used(name: str) -> int:
            return sum(
                usage.get(n.name.removeprefix("cq/"), {}).get(fr, 0)
                for n in self._subtree(name)
                if n.name.startswith("cq/")
            )

        def quota(name: str) -> int:
            return sum(n.nominal.get(fr, 0) for n in self._subtree(name))

        for name, node in sorted(self.nodes.items()):
            u, q = used(name), quota(name)
            if node.parent is None and u > q:
                yield f"{name} tree uses {u} of {fr}, more than its nominal {q}"
                continue
            if node.parent is None:
                continue
            limit = node.borrowing_limit.get(fr)
            if limit is not None and u > q + limit:
                yield f"{name} uses {u} of {fr}, over nominal {q} + borrowingLimit {limit}"
            limit = node.lending_limit.get(fr)
            if limit is not None:
                root = self.root_of(name)
                others = used(root) - u
                lendable = min(limit, max(0, q - u))
                if others > quota(root) - q + lendable:
                    yield (
                        f"outside {name}, {others} of {fr} is used; its own nominal is "
                        f"{quota(root) - q} and {name} may lend {lendable} (lendingLimit {limit})"
                    )


def usage_by_queue(
    held: Mapping[str, Admission], specs: Mapping[str, Workload]
) -> dict[str, dict[FlavorResource, int]]:
    """Usage per ClusterQueue from each admission's counts and flavors times the podsets' requests.

    Recomputed from the spec, so an admission whose own `resource_usage` is wrong cannot hide.
    """
    usage: dict[str, dict[FlavorResource, int]] = {}
    for key, admission in sorted(held.items()):
        per_pod = {ps.name: ps.requests for ps in specs[key].pod_sets}
        cq = usage.setdefault(admission.cluster_queue, {})
        for psa in admission.pod_set_assignments:
            for resource, amount in per_pod[psa.name].items():
                if amount > 0:
                    fr = (psa.flavors.get(resource, "<none>"), resource)
                    cq[fr] = cq.get(fr, 0) + amount * psa.count
    return usage


def admission_problems(
    wl: Workload, admission: Admission, *, cluster_queue: ClusterQueue
) -> Iterator[str]:
    """What is inconsistent between an admission and the workload's spec and ClusterQueue."""
    if admission.cluster_queue != cluster_queue.name:
        yield f"{wl.key} admitted to {admission.cluster_queue}, not {cluster_queue.name}"
    listed = {
        (f.name, r.name)
        for g in cluster_queue.resource_groups
        for f in g.flavors
        for r in f.resources
    }
    by_name = {psa.name: psa for psa in admission.pod_set_assignments}
    if sorted(by_name) != sorted(ps.name for ps in wl.pod_sets):
        yield f"{wl.key} assignments {sorted(by_name)} do not match its podsets"
        return
    for ps in wl.pod_sets:
        psa = by_name[ps.name]
        least = ps.min_count if ps.min_count is not None else ps.count
        if not least <= psa.count <= ps.count:
            yield f"{wl.key}/{ps.name} admitted with {psa.count} pods, allowed {least}..{ps.count}"
        for resource, amount in ps.requests.items():
            if amount <= 0:
                continue
            flavor = psa.flavors.get(resource)
            if (flavor, resource) not in listed:
                yield f"{wl.key}/{ps.name}: {resource} from {flavor}, not in {cluster_queue.name}"
            if psa.resource_usage.get(resource) != amount * psa.count:
                yield (
                    f"{wl.key}/{ps.name} reports {psa.resource_usage.get(resource)} of {resource}, "
                    f"expected {amount} x {psa.count}"
                )
