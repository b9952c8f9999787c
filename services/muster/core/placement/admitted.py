"""A Kueue-admitted workload as one gang: its spec and the pods the binder starts for it.

Used by the gangpermit service (the spec, for pods labelled `muster.dev/workload`), the
simulator (the pods too) and MultiKueue's dispatch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from muster.api.convert import KUEUE_V1BETA2, stable_uid
from muster.api.model import (
    Admission,
    GroupPolicy,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodSet,
    ResourceFlavor,
    Workload,
)
from muster.api.podspec import admitted_pod_set, flavor_placement
from muster.api.wellknown import (
    POD_SET_ANNOTATION,
    PREFERRED_TOPOLOGY_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
    SCHEDULER_NAME,
    WORKLOAD_LABEL,
)
from muster.core.placement.inputs import required_topology
from muster.core.placement.membership import NO_GROUPS, GroupIndex
from muster.core.placement.model import GangKey, GangSpec, TopologyRequest


class AdmittedGang(msgspec.Struct, frozen=True, kw_only=True):
    """A Kueue-admitted workload as one gang: its spec, its podsets as admitted, and its pods.

    `pods` are what the binder starts for the workload (named `<workload>-<podset>-<index>`,
    labelled `muster.dev/workload`, annotated `muster.dev/pod-set`, scheduler `muster`), so the
    simulator can place exactly the pods a real cluster would hold.
    """

    spec: GangSpec
    pod_sets: tuple[PodSet, ...]
    pods: tuple[Pod, ...]


def gang_of_admitted(
    wl: Workload,
    admission: Admission,
    *,
    flavors: Mapping[str, ResourceFlavor],
    priority: int,
    created_s: float,
    timeout_s: float | None = None,
    groups: GroupIndex = NO_GROUPS,
    with_pods: bool = True,
) -> AdmittedGang:
    """Return the gang of Kueue workload `wl` under `admission`, for both gangpermit and the sim.

    - key and evicted workload: the workload key "<namespace>/<name>";
    - pods: per assigned podset, the admitted count, with the node labels and tolerations of the
      assigned `flavors` (ResourceFlavors by name) merged in (`muster.api.podspec.
      admitted_pod_set`, shared with the binder); assignments naming a podset the workload lacks
      are skipped (the binder reports them);
    - min_count: over the podsets, `minCount` when set (capped at the admitted count), else the
      admitted count: a podset with minCount is a gang of that size;
    - topology: `kueue.x-k8s.io/podset-required-topology` of the first podset that sets it,
      else the first `podset-preferred-topology` (required wins);
    - a gang policy of its own replaces the last two (queues and gangs together, issue 14): a
      Job's `spec.scheduling` (`wl.scheduling`), else the scheduling.k8s.io PodGroup its pod
      template names in `spec.schedulingGroup` (found in `groups`): a gang's `minCount`
      (capped at the admitted count) or 1 for the basic policy, its topology key required;
    - `priority` and `created_s` (the workload's, as the admission core resolved them) order it
      among gangs; `timeout_s` None leaves the scheduler's default.

    The gangpermit service needs only `spec` (its pods arrive from the cluster, and `membership`
    finds them by label) and dispatch only `pod_sets`: `with_pods=False` leaves `pods` empty
    (a Pod and a uuid5 per pod, thrown away); the simulator creates `pods`.
    """
    by_name = {ps.name: ps for ps in wl.pod_sets}
    pod_sets: list[PodSet] = []
    for assignment in admission.pod_set_assignments:
        ps = by_name.get(assignment.name)
        if ps is None:
            continue
        node_labels, tolerations = flavor_placement(assignment.flavors.values(), flavors)
        pod_sets.append(
            admitted_pod_set(
                wl, ps, count=assignment.count, node_labels=node_labels, tolerations=tolerations
            )
        )
    key = GangKey(str(wl.key))
    spec = GangSpec(
        key=key,
        min_count=sum(
            ps.count if ps.min_count is None else min(ps.min_count, ps.count) for ps in pod_sets
        ),
        priority=priority,
        created_s=created_s,
        timeout_s=timeout_s,
        topology=topology_of(pod_sets),
        workload=key,
    )
    policy = wl.scheduling or _template_group_policy(wl, pod_sets, groups)
    if policy is not None:
        admitted_count = sum(ps.count for ps in pod_sets)
        spec = msgspec.structs.replace(
            spec,
            min_count=min(policy.min_count or 1, admitted_count),
            topology=required_topology(policy.topology_key) or spec.topology,
        )
    pods = tuple(
        _admitted_pod(wl, ps, index, priority=priority)
        for ps in pod_sets
        for index in range(ps.count if with_pods else 0)
    )
    return AdmittedGang(spec=spec, pod_sets=tuple(pod_sets), pods=pods)


def _template_group_policy(
    wl: Workload, pod_sets: Iterable[PodSet], groups: GroupIndex
) -> GroupPolicy | None:
    """The policy of the PodGroup the first podset naming one names, if it exists."""
    for ps in pod_sets:
        if ps.scheduling_group:
            group = groups.pod_groups.get(f"{wl.meta.namespace}/{ps.scheduling_group}")
            return None if group is None else group.policy
    return None


def topology_of(pod_sets: Iterable[PodSet]) -> TopologyRequest | None:
    """The gang's topology from its podsets' Kueue annotations; a required one wins."""
    pod_sets = tuple(pod_sets)
    for annotation, required in (
        (REQUIRED_TOPOLOGY_ANNOTATION, True),
        (PREFERRED_TOPOLOGY_ANNOTATION, False),
    ):
        for ps in pod_sets:
            label = ps.annotations.get(annotation)
            if label:
                return TopologyRequest(key=label, required=required)
    return None


def pods_to_create(wl: Workload, pod_sets: Iterable[PodSet]) -> tuple[Pod, ...]:
    """The pods the binder will create for admitted `pod_sets` of `wl`, before they exist: for
    gang-permit to place them first (docs/events.md, "Pods created on their nodes"). No uid
    (the cluster gives one on create) and no priority (the gang's is theirs)."""
    return tuple(
        _admitted_pod(wl, ps, index, priority=None, uid="")
        for ps in pod_sets
        for index in range(ps.count)
    )


def _admitted_pod(
    wl: Workload, ps: PodSet, index: int, *, priority: int | None, uid: str | None = None
) -> Pod:
    """Pod `index` of admitted podset `ps`, shaped as the binder's cluster backend starts it;
    its uid `uid`, else the stable one of its name."""
    namespace, name = wl.meta.namespace, f"{wl.meta.name}-{ps.name}-{index}"
    return Pod(
        meta=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=stable_uid("Pod", namespace, name) if uid is None else uid,
            labels={WORKLOAD_LABEL: wl.meta.name},
            annotations={**ps.annotations, POD_SET_ANNOTATION: ps.name},
            owner_references=(
                OwnerReference(
                    api_version=KUEUE_V1BETA2,
                    kind="Workload",
                    name=wl.meta.name,
                    uid=wl.meta.uid,
                    controller=True,
                ),
            ),
        ),
        scheduler_name=SCHEDULER_NAME,
        requests=ps.requests,
        node_selector=ps.node_selector,
        node_affinity_terms=ps.node_affinity_terms,
        tolerations=ps.tolerations,
        priority=priority,
    )
