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


def flavor_mismatch(pod_set: PodSet, flavor: ResourceFlavor) -> str | None:
    """Why `pod_set` cannot use `flavor`, or None if it can (Kueue's checkFlavorForPodSets).

    The flavor's own tolerations count as the pods' when matching its taints. The podset's
    node selector and required node affinity are compared only on the label keys that this
    flavor defines (Kueue >= v0.19): other keys are left to the pod scheduler.
    """
    taints = flavor.node_taints
    taint = (
        untolerated_taint(taints, (*pod_set.tolerations, *flavor.tolerations)) if taints else None
    )
    if taint is not None:
        # Kueue prints the Taint struct as Go's %v does: {key value effect timeAdded}.
        shown = f"{{{taint.key} {taint.value} {taint.effect} <nil>}}"
        return f"untolerated taint {shown} in flavor {flavor.name}"
    labels = flavor.node_labels
    for key, value in pod_set.node_selector.items():
        if key in labels and labels[key] != value:
            return f"flavor {flavor.name} doesn't match node affinity"
    if not pod_set.node_affinity_terms:
        return None
    terms = [
        [r for r in term.match_expressions if r.key in labels]
        for term in pod_set.node_affinity_terms
    ]
    # Terms are ORed: one left without a relevant key matches any flavor.
    if all(terms) and not any(all(requirement_matches(r, labels) for r in t) for t in terms):
        return f"flavor {flavor.name} doesn't match node affinity"
    return None
