"""Label selectors, tolerations and flavor/podset compatibility, as Kubernetes defines them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from muster.api.model import (
    LabelSelector,
    LabelSelectorRequirement,
    PodSet,
    ResourceFlavor,
    Taint,
    Toleration,
)


def requirement_matches(req: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    if req.operator == "In":
        return present and labels[req.key] in req.values
    if req.operator == "NotIn":
        return not present or labels[req.key] not in req.values
    if req.operator == "Exists":
        return present
    return not present  # DoesNotExist


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """True if `labels` satisfy every matchLabels pair and every matchExpressions requirement."""
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    return all(requirement_matches(req, labels) for req in selector.match_expressions)


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if not toleration.key:
        return toleration.operator == "Exists"
    if toleration.key != taint.key:
        return False
    return toleration.operator == "Exists" or toleration.value == taint.value


def untolerated_taint(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint that no toleration covers, or None."""
    tolerations = tuple(tolerations)
    for taint in taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def flavor_mismatch(
    pod_set: PodSet, flavor: ResourceFlavor, *, label_keys: frozenset[str]
) -> str | None:
    """Why `pod_set` cannot use `flavor`, or None if it can.

    Kueue compares the podset's node selector and required node affinity only on the label
    keys that the flavors of the resource group define (`label_keys`): other keys are left to
    the pod scheduler.
    """
    taint = untolerated_taint(flavor.node_taints, pod_set.tolerations)
    if taint is not None:
        # Kueue prints the Taint struct as Go's %v does: {key value effect timeAdded}.
        shown = f"{{{taint.key} {taint.value} {taint.effect} <nil>}}"
        return f"untolerated taint {shown} in flavor {flavor.name}"
    for key, value in pod_set.node_selector.items():
        if key in label_keys and flavor.node_labels.get(key) != value:
            return f"flavor {flavor.name} doesn't match node affinity"
    if pod_set.node_affinity_terms and not any(
        _term_matches(term, flavor.node_labels, label_keys) for term in pod_set.node_affinity_terms
    ):
        return f"flavor {flavor.name} doesn't match node affinity"
    return None


def _term_matches(
    term: LabelSelector, labels: Mapping[str, str], label_keys: frozenset[str]
) -> bool:
    relevant = [r for r in term.match_expressions if r.key in label_keys]
    return all(requirement_matches(r, labels) for r in relevant)
