"""Reclaimable pods: pods of a podset that finished for good and give their quota back.

Kueue (ff69552e79, pkg/workload/workload.go): podSetsCountsAfterReclaim lowers each podset's
count by its status.reclaimablePods entry, never below 0; totalRequestsFromPodSets asks the
flavor assigner for those counts, and totalRequestsFromAdmission scales an admitted podset's
resourceUsage by count-after-reclaim / admitted count when that is lower (integer division of
the per-pod amount, as resources.Requests.Divide does). A podset admitted with fewer pods than
remain keeps its admitted usage. Both only with the gate ReclaimablePods (on by default).

Partial admission (pkg/scheduler `getInitialAssignments`, flavorassigner `PodSetReducer`)
walks down from the spec's full counts, not the counts after reclaim, and asks the flavor
assigner for each podset's requests scaled to the count tried (`PodSetResources.ScaledTo`):
a podset with pods left is asked for the count tried, even above what it still needs (its
usage is scaled down once admitted, as above); one with none left stays at 0 pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from muster.api.model import PodSet, PodSetAssignment, ReclaimablePod
from muster.core.quota import FlavorResource

NONE: Mapping[str, int] = {}  # shared by every record with nothing to reclaim


def reclaimable_of(pods: Sequence[ReclaimablePod]) -> Mapping[str, int]:
    """podset -> pods it gives back (the shared empty map when none do)."""
    return {p.name: p.count for p in pods if p.count > 0} or NONE


def counts_after_reclaim(pod_sets: Sequence[PodSet], reclaimable: Mapping[str, int]) -> list[int]:
    """Pods each podset still needs quota for."""
    return [ps.count - min(reclaimable.get(ps.name, 0), ps.count) for ps in pod_sets]


def partial_counts(
    pod_sets: Sequence[PodSet], reclaimable: Mapping[str, int], tried: Sequence[int]
) -> list[int]:
    """The pods each podset is asked for when partial admission tries the counts `tried`
    (reduced from the full counts): Kueue's ScaledTo leaves a podset with no pod left at 0."""
    left = counts_after_reclaim(pod_sets, reclaimable)
    return [0 if n == 0 else count for count, n in zip(tried, left, strict=True)]


def reclaimed_usage(
    assigned: Sequence[PodSetAssignment],
    pod_sets: Sequence[PodSet],
    reclaimable: Mapping[str, int],
) -> dict[FlavorResource, int]:
    """What an admission holds once `reclaimable` pods are given back."""
    return _scaled_usage(assigned, pod_sets, reclaimable, up=False)


def requested_usage(
    assigned: Sequence[PodSetAssignment],
    pod_sets: Sequence[PodSet],
    reclaimable: Mapping[str, int],
) -> dict[FlavorResource, int]:
    """What the workload requests in full in the flavors of `assigned`: each podset's pods
    still needed (after `reclaimable`), also where a partial admission gave it fewer (Kueue's
    totalRequestsFromPodSets, which the entry penalty is priced on)."""
    return _scaled_usage(assigned, pod_sets, reclaimable, up=True)


def _scaled_usage(
    assigned: Sequence[PodSetAssignment],
    pod_sets: Sequence[PodSet],
    reclaimable: Mapping[str, int],
    *,
    up: bool,
) -> dict[FlavorResource, int]:
    """`assigned`'s usage with each podset at its count after reclaim: only lower (`up`
    False: a podset admitted with fewer pods keeps its usage) or either way (`up`)."""
    left = dict(
        zip((ps.name for ps in pod_sets), counts_after_reclaim(pod_sets, reclaimable), strict=True)
    )
    usage: dict[FlavorResource, int] = {}
    for psa in assigned:
        count = left.get(psa.name, psa.count)
        for resource, amount in psa.resource_usage.items():
            if count < psa.count or (up and count > psa.count and psa.count > 0):
                amount = amount // psa.count * count
            fr = (psa.flavors.get(resource, ""), resource)
            usage[fr] = usage.get(fr, 0) + amount
    return usage
