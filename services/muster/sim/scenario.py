"""A scenario: the configuration objects, the Kueue Configuration, the workloads to replay and,
for gang placement, the Nodes, Pods and gang objects (scheduling.k8s.io Workloads, PodGroups).

`load_scenario` reads YAML files through `muster.api`; `build_scenario` takes objects already
decoded (the benchmark builds tens of thousands of workloads in code). Both collect every
problem as a `FieldError` and raise `InvalidScenarioError` with all of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from muster.api.decode import (
    MAX_FILE_BYTES,
    Kept,
    Validation,
    decode_files,
    decode_yaml,
    kueue_config_from_file,
)
from muster.api.errors import FieldError
from muster.api.model import (
    CLUSTER_TYPES,
    CONFIG_TYPES,
    AdmissionCheck,
    ApiObject,
    ClusterObject,
    ClusterQueue,
    CompositePodGroup,
    ConfigObject,
    KueueConfig,
    Node,
    ObjectMeta,
    Pod,
    PodGroup,
    SchedulingPodGroup,
    SchedulingWorkload,
    Workload,
)
from muster.api.pod_set_updates import PodSetUpdate, ready_updates
from muster.api.wellknown import CLUSTER_ANNOTATION, GANG_TIMEOUT_ANNOTATION
from muster.checks.registry import by_controller_name, config_kinds
from muster.sim.annotations import (
    CHECK_POD_SET_UPDATES,
    CHECK_PREFIX,
    CHECK_RESULT,
    KNOWN_ON_NODES,
    KNOWN_ON_PODS,
    PROVISIONING,
    RECLAIMABLE_PODS,
    AnnotationError,
    CheckScript,
    ProvisioningScript,
    WorkloadScript,
    annotation_path,
    parse_check_script,
    parse_provisioning_script,
    parse_workload_script,
)
from muster.sim.clusters import ClusterPlan, plan_clusters

_Timed = TypeVar("_Timed", bound=Workload | ClusterObject)


class Arrival(msgspec.Struct, frozen=True, kw_only=True):
    """One workload and when it arrives; `rank` is its place in the order of arrival."""

    at_s: float
    rank: int
    workload: Workload
    script: WorkloadScript


class ClusterArrival(msgspec.Struct, frozen=True, kw_only=True):
    """One Node, Pod, scheduling.k8s.io Workload or PodGroup and when it appears."""

    at_s: float
    rank: int
    obj: ClusterObject
    script: WorkloadScript  # submit-after; run-seconds for a Pod (a gang object's: its pods')


class Scenario(msgspec.Struct, frozen=True, kw_only=True):
    config: KueueConfig | None
    objects: tuple[ConfigObject, ...]  # what Engine(...) is built from
    arrivals: tuple[Arrival, ...]  # sorted by (at_s, rank)
    check_results: Mapping[str, CheckScript]  # AdmissionCheck name -> default script
    cluster_arrivals: tuple[ClusterArrival, ...] = ()  # sorted by (at_s, rank)
    clusters: ClusterPlan | None = None  # with MultiKueue: the worker clusters (sim/clusters.py)
    # The configuration objects of registered check controllers, as written (sim/checks.py),
    # and the cluster-autoscaler's script for each (`muster.dev/provisioning`), by name.
    check_objects: tuple[Mapping[str, Any], ...] = ()
    provisioning: Mapping[str, ProvisioningScript] = msgspec.field(default_factory=dict)
    # What each scripted check asks of the pods while Ready (`muster.dev/check-pod-set-updates`).
    check_updates: Mapping[str, tuple[PodSetUpdate, ...]] = msgspec.field(default_factory=dict)

    @property
    def cluster_queues(self) -> tuple[ClusterQueue, ...]:
        return tuple(obj for obj in self.objects if isinstance(obj, ClusterQueue))

    @property
    def placement(self) -> bool:
        """Whether pods are placed on nodes: the scenario holds at least one Node."""
        return any(isinstance(a.obj, Node) for a in self.cluster_arrivals)


class InvalidScenarioError(Exception):
    """The scenario cannot run; `errors` holds one `FieldError` per problem, in input order."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__("\n".join(str(error) for error in errors))
        self.errors = tuple(errors)


class ScenarioFileError(Exception):
    """A scenario or config file cannot be read; str() names the file and the reason."""


def load_scenario(
    paths: Sequence[str | Path],
    *,
    config_path: str | Path | None = None,
    validation: Validation = "strict",
    warnings: list[FieldError] | None = None,
) -> Scenario:
    """Decode the scenario files (and the `--config` file), then build the scenario.

    A Configuration from `config_path` replaces one found among `paths`. `validation` says
    what unknown fields do (kubectl's `--validate`); with "warn" they go to `warnings`.
    """
    kept = Kept(kinds=config_kinds(), documents=[])
    objects = decode_checked(paths, validation=validation, warnings=warnings, kept=kept)
    config = None
    if config_path is not None:
        config = config_from_file(config_path)
    return build_scenario(objects, config=config, check_objects=kept.documents)


def load_scenario_text(text: str, *, source: str) -> Scenario:
    """Decode one multi-document YAML string (the built-in demo) and build the scenario."""
    objects, errors = decode_yaml(text, source=source)
    if errors:
        raise InvalidScenarioError(errors)
    return build_scenario(list(objects))


def decode_checked(
    paths: Sequence[str | Path],
    *,
    validation: Validation = "strict",
    warnings: list[FieldError] | None = None,
    kept: Kept | None = None,
) -> list[ApiObject]:
    """Decode files with `muster.api`, raising `ScenarioFileError` or `InvalidScenarioError`;
    documents of the kinds `kept` names go to it as written."""
    for path in paths:
        if not Path(path).is_file():
            raise ScenarioFileError(f"{path}: {not_a_file(Path(path))}")
        _check_size(Path(path))
    try:
        objects, errors = decode_files(
            [Path(path) for path in paths], validation=validation, warnings=warnings, kept=kept
        )
    except OSError as exc:
        raise ScenarioFileError(f"{exc.filename}: {exc.strerror}") from exc
    if errors:
        raise InvalidScenarioError(errors)
    return list(objects)


def not_a_file(path: Path) -> str:
    """Why `path`, which is no regular file, cannot be read (`muster submit` says it alike)."""
    if path.is_dir():
        return f"is a directory: name the YAML files in it ({path}/*.yaml)"
    return "not a regular file" if path.exists() else "no such file"


def _check_size(path: Path) -> None:
    """ScenarioFileError when `path` is larger than MAX_FILE_BYTES (far above any scenario
    written by hand, as `muster submit`'s 64 MiB): it is never read whole."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ScenarioFileError(f"{path}: {exc.strerror}") from exc
    if size > MAX_FILE_BYTES:
        raise ScenarioFileError(
            f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB: not read"
            " (split a scenario this large into several files)"
        )


def config_from_file(path: str | Path) -> KueueConfig:
    """The one Kueue Configuration a `--config` file must hold."""
    if Path(path).is_file():
        _check_size(Path(path))
    config, errors = kueue_config_from_file(path)
    if config is None:
        raise InvalidScenarioError(errors)
    return config


def build_scenario(
    objects: Sequence[ApiObject],
    *,
    config: KueueConfig | None = None,
    check_objects: Sequence[Mapping[str, Any]] = (),
) -> Scenario:
    """Split decoded objects into engine configuration and timed arrivals.

    `config`, when given, wins over a Configuration among `objects`. Order of arrival is
    `metadata.creationTimestamp` where given, else the position in `objects`; workloads without
    a timestamp come before those with one; ties keep their position.
    """
    errors: list[FieldError] = []
    configs = [obj for obj in objects if isinstance(obj, KueueConfig)]
    if len(configs) > 1:
        problem = f"found {len(configs)} Configurations; keep one, or pass one with --config"
        errors.append(FieldError(obj="Configuration", path="kind", problem=problem))
    if config is None and configs:
        config = configs[0]
    config_objects = tuple(obj for obj in objects if isinstance(obj, CONFIG_TYPES))
    check_results = admission_check_results(config_objects, errors)
    check_updates = admission_check_updates(config_objects, errors)
    workloads = [obj for obj in objects if isinstance(obj, Workload)]
    arrivals = timed_arrivals(workloads, errors)
    cluster_objects = [obj for obj in objects if isinstance(obj, CLUSTER_TYPES)]
    cluster_arrivals = timed_cluster_objects(cluster_objects, errors)
    named = [(cluster_object_name(a.obj), a.obj.meta.annotations) for a in cluster_arrivals]
    clusters = plan_clusters(config_objects, named, errors)
    provisioning = provisioning_scripts(check_objects, errors)
    unscriptable_checks(config_objects, arrivals, errors)
    if errors:
        raise InvalidScenarioError(errors)
    return Scenario(
        config=config,
        objects=config_objects,
        arrivals=arrivals,
        check_results=check_results,
        cluster_arrivals=cluster_arrivals,
        clusters=clusters,
        check_objects=tuple(check_objects),
        provisioning=provisioning,
        check_updates=check_updates,
    )


def unscriptable_checks(
    objects: Sequence[ConfigObject], arrivals: Sequence[Arrival], errors: list[FieldError]
) -> None:
    """A check script for a check that a registered controller answers is an error: the
    controller's rules answer it (sim/checks.py), and the script would be ignored."""
    controllers = by_controller_name()
    run = {
        o.meta.name: o.controller_name
        for o in objects
        if isinstance(o, AdmissionCheck) and o.controller_name in controllers
    }
    if not run:
        return
    why = (
        "is answered by its controller ({}), not by a script; what to script instead: "
        'docs/simulate-json.md, "Controller-run checks"'
    )
    for obj in objects:
        if not isinstance(obj, AdmissionCheck) or obj.meta.name not in run:
            continue
        for annotation in (CHECK_RESULT, CHECK_POD_SET_UPDATES):
            if annotation in obj.meta.annotations:
                problem = f"AdmissionCheck {obj.meta.name} " + why.format(run[obj.meta.name])
                errors.append(
                    FieldError(
                        f"AdmissionCheck/{obj.meta.name}", annotation_path(annotation), problem
                    )
                )
    for arrival in arrivals:
        for check in sorted(arrival.script.checks):
            if check in run:
                path = annotation_path(CHECK_PREFIX + check)
                problem = f"AdmissionCheck {check} " + why.format(run[check])
                errors.append(FieldError(source_name(arrival.workload), path, problem))


def provisioning_scripts(
    check_objects: Sequence[Mapping[str, Any]], errors: list[FieldError]
) -> dict[str, ProvisioningScript]:
    """The cluster-autoscaler's script of each check configuration object that has one."""
    scripts: dict[str, ProvisioningScript] = {}
    for obj in check_objects:
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if PROVISIONING not in annotations:
            continue
        name = str(meta.get("name", ""))
        try:
            scripts[name] = parse_provisioning_script(str(annotations[PROVISIONING]))
        except ValueError as exc:
            who = f"{obj.get('kind')}/{name}"
            errors.append(FieldError(who, annotation_path(PROVISIONING), str(exc)))
    return scripts


def admission_check_results(
    objects: Sequence[ApiObject], errors: list[FieldError]
) -> dict[str, CheckScript]:
    """Default check scripts from `muster.dev/check-result` on AdmissionCheck objects."""
    results: dict[str, CheckScript] = {}
    for obj in objects:
        if not isinstance(obj, AdmissionCheck) or CHECK_RESULT not in obj.meta.annotations:
            continue
        try:
            results[obj.meta.name] = parse_check_script(obj.meta.annotations[CHECK_RESULT])
        except ValueError as exc:
            name = f"AdmissionCheck/{obj.meta.name}"
            errors.append(
                FieldError(obj=name, path=annotation_path(CHECK_RESULT), problem=str(exc))
            )
    return results


def admission_check_updates(
    objects: Sequence[ApiObject], errors: list[FieldError]
) -> dict[str, tuple[PodSetUpdate, ...]]:
    """The podSetUpdates of `muster.dev/check-pod-set-updates` on AdmissionCheck objects: a
    JSON list of objects, each naming its podset; their fields are read as a controller's are
    (`muster.api.pod_set_updates`: a field of the wrong shape is left out)."""
    found: dict[str, tuple[PodSetUpdate, ...]] = {}
    for obj in objects:
        if not isinstance(obj, AdmissionCheck) or CHECK_POD_SET_UPDATES not in obj.meta.annotations:
            continue
        name = obj.meta.name
        try:
            updates = json.loads(obj.meta.annotations[CHECK_POD_SET_UPDATES])
        except (ValueError, RecursionError):
            updates = None
        if not isinstance(updates, list) or not all(
            isinstance(u, dict) and isinstance(u.get("name"), str) and u["name"] for u in updates
        ):
            problem = "must be a JSON list of podSetUpdates, each with its podset's name"
            path = annotation_path(CHECK_POD_SET_UPDATES)
            errors.append(FieldError(obj=f"AdmissionCheck/{name}", path=path, problem=problem))
            continue
        entry = {"name": name, "state": "Ready", "podSetUpdates": updates}
        found[name] = tuple(ready_updates([entry]))
    return found


def timed_arrivals(workloads: Sequence[Workload], errors: list[FieldError]) -> tuple[Arrival, ...]:
    """Each workload with its arrival time and rank, sorted as the runner submits them."""
    timed = in_arrival_order(
        workloads,
        errors,
        name_of=source_name,
        parse=lambda wl: with_podsets_checked(wl, parse_workload_script(wl.meta.annotations)),
    )
    return tuple(
        Arrival(at_s=script.submit_after_s, rank=rank, workload=wl, script=script)
        for rank, wl, script in timed
    )


def with_podsets_checked(wl: Workload, script: WorkloadScript) -> WorkloadScript:
    """`script`, once each reclaimable-pods step names a podset of `wl` and at most its count
    (Kueue's webhook bounds status.reclaimablePods so); AnnotationError otherwise."""
    counts = {ps.name: ps.count for ps in wl.pod_sets}
    for i, step in enumerate(script.reclaims):
        if step.pod_set not in counts:
            known = ", ".join(counts) or "none"
            problem = f'element {i}: "{step.pod_set}" is not a podset of the workload ({known})'
            raise AnnotationError(RECLAIMABLE_PODS, problem)
        if step.count > counts[step.pod_set]:
            problem = (
                f"element {i}: count must be between 0 and {counts[step.pod_set]} "
                f"(podset {step.pod_set}), got {step.count}"
            )
            raise AnnotationError(RECLAIMABLE_PODS, problem)
    return script


def timed_cluster_objects(
    objects: Sequence[ClusterObject], errors: list[FieldError]
) -> tuple[ClusterArrival, ...]:
    """Each Node, Pod and gang object with its arrival time and rank, as for workloads."""

    def parse(obj: ClusterObject) -> WorkloadScript:
        known = KNOWN_ON_NODES if isinstance(obj, Node) else KNOWN_ON_PODS
        # muster.dev/cluster (which cluster it is in) is read by plan_clusters, and the gang
        # deadline of a PodGroup by muster.api, not scripted.
        skipped: tuple[str, ...] = (CLUSTER_ANNOTATION,)
        if isinstance(obj, SchedulingPodGroup | CompositePodGroup):
            skipped += (GANG_TIMEOUT_ANNOTATION,)
        scripted = {k: v for k, v in obj.meta.annotations.items() if k not in skipped}
        return parse_workload_script(scripted, known=known)

    timed = in_arrival_order(
        objects,
        errors,
        name_of=cluster_object_name,
        parse=parse,
        # A PodGroup written again is an update (its minCount may change, Kubernetes v1.37).
        repeatable=lambda obj: isinstance(obj, SchedulingPodGroup),
    )
    return tuple(
        ClusterArrival(at_s=script.submit_after_s, rank=rank, obj=obj, script=script)
        for rank, obj, script in timed
    )


def in_arrival_order(
    objects: Sequence[_Timed],
    errors: list[FieldError],
    *,
    name_of: Callable[[_Timed], str],
    parse: Callable[[_Timed], WorkloadScript],
    repeatable: Callable[[_Timed], bool] = lambda _: False,
) -> list[tuple[int, _Timed, WorkloadScript]]:
    """(rank, object, script) sorted by (submit-after, rank); rank is the order of arrival.

    Order of arrival is `metadata.creationTimestamp` where given, else the position; objects
    without a timestamp come first; ties keep their position. Duplicates and bad annotations
    are reported to `errors` and left out.
    """
    keyed: list[tuple[tuple[float, int], _Timed, WorkloadScript]] = []
    seen: set[str] = set()
    for position, obj in enumerate(objects):
        name = name_of(obj)
        if name in seen and not repeatable(obj):
            errors.append(FieldError(obj=name, path="metadata.name", problem="duplicate"))
            continue
        seen.add(name)
        try:
            script = parse(obj)
        except AnnotationError as exc:
            path = annotation_path(exc.annotation)
            errors.append(FieldError(obj=name, path=path, problem=exc.problem))
            continue
        created = creation_time(obj.meta, name, errors)
        order = -math.inf if created is None else created.timestamp()
        keyed.append(((order, position), obj, script))
    keyed.sort(key=lambda item: item[0])
    timed = [(rank, obj, script) for rank, (_, obj, script) in enumerate(keyed)]
    timed.sort(key=lambda item: (item[2].submit_after_s, item[0]))
    return timed


def creation_time(meta: ObjectMeta, name: str, errors: list[FieldError]) -> datetime | None:
    """`metadata.creationTimestamp` as an aware UTC time; naive times are taken as UTC."""
    text = meta.creation_timestamp
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        problem = f"must be an RFC 3339 time such as 2024-01-02T03:04:05Z, got {text!r}"
        errors.append(FieldError(obj=name, path="metadata.creationTimestamp", problem=problem))
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def source_name(wl: Workload) -> str:
    """How errors name a workload: as the Job or JobSet it came from, if any, else as a
    Workload."""
    for owner in wl.meta.owner_references:
        if owner.kind in ("Job", "JobSet"):
            return f"{owner.kind}/{wl.meta.namespace}/{owner.name}"
    return f"Workload/{wl.meta.namespace}/{wl.meta.name}"


CLUSTER_KINDS: Mapping[type, str] = {
    Node: "Node",
    Pod: "Pod",
    SchedulingWorkload: "Workload.scheduling.k8s.io",
    PodGroup: "PodGroup",
    SchedulingPodGroup: "PodGroup.scheduling.k8s.io",
    CompositePodGroup: "CompositePodGroup",
}


def cluster_object_name(obj: ClusterObject) -> str:
    """How errors name a cluster object: "Node/n1", "Pod/ns/p", "PodGroup/ns/g"."""
    kind = CLUSTER_KINDS[type(obj)]
    meta = obj.meta
    return f"{kind}/{meta.namespace}/{meta.name}" if meta.namespace else f"{kind}/{meta.name}"
