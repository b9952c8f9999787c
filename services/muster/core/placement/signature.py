"""What makes pods interchangeable for placement: a scheduling signature, and the nodes it may use.

Pods with one signature (requests, node selector, affinity, tolerations) share one computation:
their demand per column of the node table, and a static mask of the nodes they may ever use
(ready, schedulable, labels, taints), cached until a node changes, with kube-scheduler's words
for why the other nodes may not. Used by `fit` and `counting`; pure, numpy only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

import numpy as np

from muster.api.model import LabelSelector, LabelSelectorRequirement, Toleration
from muster.core.matching import untolerated_taint
from muster.core.placement.model import ONE_POD, PODS, PodInfo
from muster.core.placement.nodes import MISSING, Bools, Ints, LabelColumn, NodeTable

NO_CODE = -2  # matches no row: a label value no node has
# A node's capacity is an int64 of milli-units (api.quantity); a pod's requests summed (its
# containers, its RuntimeClass's overhead) can pass it, and numpy's int64 table cannot hold
# that: such a pod fits no node, ruled out statically (`beyond`) with its demand cut to fit.
_INT64_MAX = int(np.iinfo(np.int64).max)

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
        "__weakref__",  # `counting.Rooms` forgets a signature's counts with it
        "_demand",
        "_mask",
        "_mask_version",
        "_static_reasons",
        "affinity",
        "beyond",
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
        self.beyond = sorted(r for r, a in demand.items() if a > _INT64_MAX)
        self._demand = table.vector({r: min(a, _INT64_MAX) for r, a in demand.items()})
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


# --- static reasons --------------------------------------------------------------------------

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

    for resource in sig.beyond:  # more than any node can have
        rule_out(table.alive, f"Insufficient {resource}")
    rule_out(~table.ready, NOT_READY)
    rule_out(table.unschedulable, UNSCHEDULABLE)
    rule_out(~sig.label_mask(table), SELECTOR)
    for cls in sorted(set(table.taint_class[rest].tolist())):
        taint = untolerated_taint(table.taint_sets[cls], sig.tolerations)
        if taint is not None:
            shown = f"{taint.key}: {taint.value}" if taint.value else taint.key
            rule_out(table.taint_class == cls, f"node(s) had untolerated taint {{{shown}}}")
    return rest, +reasons
