"""The clusters of a scenario that declares MultiKueue, checked up front.

A scenario is multi-cluster when it holds a MultiKueue AdmissionCheck or a MultiKueueCluster.
Each MultiKueueCluster is a worker cluster; annotation `muster.dev/lost-at-seconds` on it says
when it disappears. Nodes, Pods and gang objects belong to the cluster their
`muster.dev/cluster` annotation names, else to the local cluster (`local`), which also runs the
workloads of ClusterQueues without MultiKueue. `plan_clusters` reports every inconsistency as a
`FieldError` (a config naming an undeclared cluster, a Node of an unknown one, ...);
`sim/fleet.py` runs the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from muster.api.errors import FieldError, key_path
from muster.api.model import (
    AdmissionCheck,
    ConfigObject,
    MultiKueueCluster,
    MultiKueueConfig,
)
from muster.api.wellknown import CLUSTER_ANNOTATION, LOCAL_CLUSTER
from muster.core.dispatch import Route, is_multikueue, route_of
from muster.sim.annotations import parse_seconds

LOST_AT = "muster.dev/lost-at-seconds"  # on a MultiKueueCluster: when the cluster disappears
KNOWN_ON_CLUSTERS = (LOST_AT,)


class ClusterPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Every cluster of the scenario and how MultiKueue checks route to them."""

    clusters: tuple[str, ...]  # sorted; the local cluster included
    routes: Mapping[str, Route]  # MultiKueue AdmissionCheck name -> its clusters
    lost_at: Mapping[str, float]  # cluster -> when it is lost


def cluster_of(annotations: Mapping[str, str]) -> str:
    """The cluster a Node, Pod or gang object belongs to."""
    return annotations.get(CLUSTER_ANNOTATION, LOCAL_CLUSTER)


def plan_clusters(
    objects: Sequence[ConfigObject],
    cluster_objects: Sequence[tuple[str, Mapping[str, str]]],
    errors: list[FieldError],
) -> ClusterPlan | None:
    """The scenario's clusters, or None when it declares no MultiKueue (a single cluster).

    `cluster_objects` are (name for errors, annotations) of its Nodes, Pods and gang objects.
    Problems go to `errors`.
    """
    checks = [o for o in objects if isinstance(o, AdmissionCheck) and is_multikueue(o)]
    declared = {o.meta.name: o for o in objects if isinstance(o, MultiKueueCluster)}
    if not checks and not declared:
        for name, annotations in cluster_objects:
            _check_cluster_annotation(name, annotations, {LOCAL_CLUSTER}, errors)
        return None
    configs = {o.meta.name: o for o in objects if isinstance(o, MultiKueueConfig)}
    routes: dict[str, Route] = {}
    for check in checks:
        route = route_of(check, configs)
        if isinstance(route, Route):
            routes[check.meta.name] = route
        else:
            name = check.parameters.name if check.parameters is not None else ""
            problem = f"MultiKueueConfig {name!r} not found"
            errors.append(
                FieldError(f"AdmissionCheck/{check.meta.name}", "spec.parameters.name", problem)
            )
    for config in configs.values():
        for i, cluster in enumerate(config.clusters):
            if cluster not in declared:
                errors.append(
                    FieldError(
                        f"MultiKueueConfig/{config.meta.name}",
                        f"spec.clusters[{i}]",
                        f"MultiKueueCluster {cluster!r} not found",
                    )
                )
    lost_at = {
        name: when
        for name, cluster in sorted(declared.items())
        if (when := _lost_at(cluster, errors)) is not None
    }
    known = {LOCAL_CLUSTER, *declared}
    for name, annotations in cluster_objects:
        _check_cluster_annotation(name, annotations, known, errors)
    return ClusterPlan(clusters=tuple(sorted(known)), routes=routes, lost_at=lost_at)


def _lost_at(cluster: MultiKueueCluster, errors: list[FieldError]) -> float | None:
    when: float | None = None
    for key in sorted(cluster.meta.annotations):
        if not key.startswith("muster.dev/"):
            continue
        path = key_path("metadata.annotations", key)
        try:
            if key != LOST_AT:
                raise ValueError(f"unknown annotation; known: {', '.join(KNOWN_ON_CLUSTERS)}")
            when = parse_seconds(cluster.meta.annotations[key])
        except ValueError as exc:
            errors.append(FieldError(f"MultiKueueCluster/{cluster.meta.name}", path, str(exc)))
    return when


def _check_cluster_annotation(
    name: str, annotations: Mapping[str, str], known: set[str], errors: list[FieldError]
) -> None:
    cluster = cluster_of(annotations)
    if cluster not in known:
        listed = ", ".join(sorted(known))
        problem = f"no MultiKueueCluster {cluster!r} (clusters: {listed})"
        errors.append(
            FieldError(name, key_path("metadata.annotations", CLUSTER_ANNOTATION), problem)
        )
