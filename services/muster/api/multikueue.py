"""MultiKueue's objects to the model: MultiKueueConfig, MultiKueueCluster, and the parameters
of a MultiKueue AdmissionCheck (Kueue v1beta1 and v1beta2 spell them alike).

A worker cluster is named by its MultiKueueCluster, whose name is the id that cluster's muster
services run with (`--cluster`): a NATS subject token, so `[A-Za-z0-9_-]+` and not `dlq`. Its
kubeConfig (v1beta1 `spec.kubeConfig`, v1beta2 `spec.clusterSource.kubeConfig`) says where
services serving it from the manager's side find its API server (`muster.cluster.kube.worker`).
`muster.api.decode` calls the `*_from_raw` functions; problems go to `errs`.
"""

from __future__ import annotations

import re
from typing import get_args

from muster.api.errors import ObjectErrors, key_path
from muster.api.model import (
    AdmissionCheck,
    AdmissionCheckParameters,
    DispatchStrategy,
    KubeConfigLocation,
    KubeConfigRef,
    MultiKueueCluster,
    MultiKueueConfig,
    ObjectMeta,
)
from muster.api.raw import (
    RawAdmissionCheck,
    RawKubeConfig,
    RawMultiKueueCluster,
    RawMultiKueueConfig,
)
from muster.api.wellknown import DISPATCH_ANNOTATION, KUEUE_GROUP, MULTIKUEUE_CONTROLLER

MULTIKUEUE_CONFIG_KIND = "MultiKueueConfig"
DISPATCH_STRATEGIES: tuple[str, ...] = get_args(DispatchStrategy)
LOCATION_TYPES: tuple[str, ...] = get_args(KubeConfigLocation)
_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]+")
_RESERVED_IDS = frozenset({"dlq"})  # a subject token muster uses itself
CLUSTER_ID_MAX = 253  # a subject token's longest (muster.bus.subjects.MAX_TOKEN_CHARS)


def cluster_id_problem(name: str) -> str | None:
    """Why `name` cannot be a muster cluster id, or None when it can."""
    if len(name) > CLUSTER_ID_MAX:
        return f"must be no more than {CLUSTER_ID_MAX} characters, got {len(name)}"
    if not _CLUSTER_ID.fullmatch(name):
        return f"must be a muster cluster id (letters, digits, '-' and '_'), got {name[:80]!r}"
    if name in _RESERVED_IDS:
        return f"{name!r} is reserved and cannot name a cluster"
    return None


def admission_check_from_raw(
    raw: RawAdmissionCheck, meta: ObjectMeta, errs: ObjectErrors
) -> AdmissionCheck:
    """An AdmissionCheck; a MultiKueue one must name its MultiKueueConfig in `spec.parameters`."""
    spec = raw.spec
    parameters = None
    if spec.parameters is not None:
        ref = spec.parameters
        parameters = AdmissionCheckParameters(api_group=ref.api_group, kind=ref.kind, name=ref.name)
    if spec.controller_name == MULTIKUEUE_CONTROLLER:
        _check_multikueue_parameters(parameters, errs)
    return AdmissionCheck(meta=meta, controller_name=spec.controller_name, parameters=parameters)


def _check_multikueue_parameters(
    parameters: AdmissionCheckParameters | None, errs: ObjectErrors
) -> None:
    if parameters is None:
        errs.add("spec.parameters", f"is required for controllerName {MULTIKUEUE_CONTROLLER}")
        return
    if parameters.api_group != KUEUE_GROUP:
        errs.add(
            "spec.parameters.apiGroup", f"must be {KUEUE_GROUP!r}, got {parameters.api_group!r}"
        )
    if parameters.kind != MULTIKUEUE_CONFIG_KIND:
        errs.add(
            "spec.parameters.kind", f"must be {MULTIKUEUE_CONFIG_KIND!r}, got {parameters.kind!r}"
        )
    if not parameters.name:
        errs.add("spec.parameters.name", "is required")


def multikueue_config_from_raw(
    raw: RawMultiKueueConfig, meta: ObjectMeta, errs: ObjectErrors
) -> MultiKueueConfig:
    """The worker clusters in order (at least one, each a cluster id, none twice) and the
    dispatch strategy from annotation `muster.dev/dispatch` (default first-fit)."""
    clusters = raw.spec.clusters
    if not clusters:
        errs.add("spec.clusters", "must list at least one MultiKueueCluster")
    seen: set[str] = set()
    for i, name in enumerate(clusters):
        problem = cluster_id_problem(name)
        if problem is not None:
            errs.add(f"spec.clusters[{i}]", problem)
        elif name in seen:
            errs.add(f"spec.clusters[{i}]", f"{name!r} is listed twice")
        seen.add(name)
    strategy = meta.annotations.get(DISPATCH_ANNOTATION, "first-fit")
    if strategy not in DISPATCH_STRATEGIES:
        expected = " or ".join(DISPATCH_STRATEGIES)
        errs.add(
            key_path("metadata.annotations", DISPATCH_ANNOTATION),
            f"must be {expected}, got {strategy!r}",
        )
        strategy = "first-fit"
    return MultiKueueConfig(
        meta=meta,
        clusters=tuple(clusters),
        dispatch=strategy,  # type: ignore[arg-type]  # checked against DISPATCH_STRATEGIES
    )


def multikueue_cluster_from_raw(
    raw: RawMultiKueueCluster, meta: ObjectMeta, errs: ObjectErrors
) -> MultiKueueCluster:
    """A worker cluster; its name must be a muster cluster id, and a kubeConfig, when given,
    names a location of type Secret or Path. A clusterProfileRef (Kueue's ClusterProfile
    source) is accepted without a kubeConfig: its services then run inside the worker."""
    problem = cluster_id_problem(meta.name)
    if problem is not None:
        errs.add("metadata.name", problem)
    spec = raw.spec
    source = spec.cluster_source
    if spec.kube_config is not None and source is not None and source.kube_config is not None:
        errs.add("spec.clusterSource.kubeConfig", "must not be given with spec.kubeConfig")
    ref = None
    if spec.kube_config is not None:
        ref = _kube_config(spec.kube_config, "spec.kubeConfig", errs)
    elif source is not None and source.kube_config is not None:
        ref = _kube_config(source.kube_config, "spec.clusterSource.kubeConfig", errs)
    return MultiKueueCluster(meta=meta, kube_config=ref)


def _kube_config(raw: RawKubeConfig, path: str, errs: ObjectErrors) -> KubeConfigRef | None:
    ok = True
    if not raw.location:
        errs.add(f"{path}.location", "is required")
        ok = False
    if raw.location_type not in LOCATION_TYPES:
        expected = " or ".join(LOCATION_TYPES)
        errs.add(f"{path}.locationType", f"must be {expected}, got {raw.location_type!r}")
        ok = False
    if not ok:
        return None
    return KubeConfigRef(
        location=raw.location,
        location_type=raw.location_type,  # type: ignore[arg-type]  # checked against LOCATION_TYPES
    )
