"""YAML and JSON documents to model objects, with one FieldError per problem.

Entry points: `decode_yaml`, `decode_documents`, `decode_files`; each returns
`(objects, errors)`. Every document is decoded on its own, so one bad object never blocks the
others; an object with any error is left out of `objects`. Objects muster reads later but not
yet (Kueue Topologies) are neither objects nor errors: pass a list as `skipped` to learn which
were passed over.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import yaml

from muster.api import raw as wire
from muster.api.alternatives import routing_policy_errors, with_alternatives
from muster.api.cluster_objects import (
    SCHEDULER_PLUGINS_V1ALPHA1,
    SCHEDULING_V1ALPHA1,
    node_from_raw,
    pod_from_raw,
    pod_group_from_raw,
    scheduling_workload_from_raw,
)
from muster.api.config import CONFIG_V1BETA1, CONFIG_V1BETA2, kueue_config_from_raw
from muster.api.convert import (
    KUEUE_V1BETA1,
    KUEUE_V1BETA2,
    cluster_queue_from_raw,
    cohort_from_raw,
    local_queue_from_raw,
    meta_from_raw,
    namespace_from_raw,
    priority_class_from_raw,
    resource_flavor_from_raw,
    stable_uid,
    workload_from_raw,
    workload_priority_class_from_raw,
)
from muster.api.errors import FieldError, ObjectErrors
from muster.api.job import workload_from_job
from muster.api.model import ApiObject, ClusterQueue, KueueConfig, ObjectMeta, Workload
from muster.api.multikueue import (
    admission_check_from_raw,
    multikueue_cluster_from_raw,
    multikueue_config_from_raw,
)
from muster.api.scheduling_objects import (
    SCHEDULING_V1ALPHA2,
    SCHEDULING_V1ALPHA3,
    SCHEDULING_V1BETA1,
    composite_pod_group_from_raw,
    group_workload_from_raw,
    group_workload_v1alpha2_from_raw,
    scheduling_pod_group_from_raw,
    scheduling_pod_group_v1alpha2_from_raw,
)
from muster.api.scheduling_raw import (
    RawGroup,
    RawGroupWorkload,
    RawPodGroupV1Alpha2,
    RawWorkloadV1Alpha2,
)
from muster.api.validate import validate

Decoded = tuple[list[ApiObject], list[FieldError]]


class _Kind(NamedTuple):
    wire_type: type[wire.Document]
    convert: Callable[[Any, ObjectMeta, ObjectErrors], ApiObject]
    namespaced: bool = False
    named: bool = True  # metadata.name required
    validated: bool = True  # run muster.api.validate (a Job's checks are its own)


_KUEUE_KINDS = {
    "ResourceFlavor": _Kind(wire.RawResourceFlavor, resource_flavor_from_raw),
    "ClusterQueue": _Kind(wire.RawClusterQueue, cluster_queue_from_raw),
    "Cohort": _Kind(wire.RawCohort, cohort_from_raw),
    "LocalQueue": _Kind(wire.RawLocalQueue, local_queue_from_raw, namespaced=True),
    "WorkloadPriorityClass": _Kind(wire.RawWorkloadPriorityClass, workload_priority_class_from_raw),
    "AdmissionCheck": _Kind(wire.RawAdmissionCheck, admission_check_from_raw),
    "Workload": _Kind(wire.RawWorkload, workload_from_raw, namespaced=True),
    "MultiKueueConfig": _Kind(wire.RawMultiKueueConfig, multikueue_config_from_raw),
    "MultiKueueCluster": _Kind(wire.RawMultiKueueCluster, multikueue_cluster_from_raw),
}
_CONFIGURATION = _Kind(
    wire.RawConfiguration, lambda raw, meta, errs: kueue_config_from_raw(raw, errs), named=False
)
_KINDS: dict[tuple[str, str], _Kind] = {
    **{(v, k): spec for v in (KUEUE_V1BETA1, KUEUE_V1BETA2) for k, spec in _KUEUE_KINDS.items()},
    ("scheduling.k8s.io/v1", "PriorityClass"): _Kind(
        wire.RawPriorityClass, priority_class_from_raw
    ),
    ("v1", "Namespace"): _Kind(wire.RawNamespace, namespace_from_raw),
    ("batch/v1", "Job"): _Kind(
        wire.RawJob,
        lambda raw, meta, errs: workload_from_job(raw, errs, namespace=meta.namespace),
        namespaced=True,
        validated=False,
    ),
    (CONFIG_V1BETA1, "Configuration"): _CONFIGURATION,
    (CONFIG_V1BETA2, "Configuration"): _CONFIGURATION,
    ("v1", "Node"): _Kind(wire.RawNode, node_from_raw),
    ("v1", "Pod"): _Kind(wire.RawPod, pod_from_raw, namespaced=True),
    (SCHEDULING_V1ALPHA1, "Workload"): _Kind(
        wire.RawSchedulingWorkload, scheduling_workload_from_raw, namespaced=True
    ),
    (SCHEDULER_PLUGINS_V1ALPHA1, "PodGroup"): _Kind(
        wire.RawPodGroup, pod_group_from_raw, namespaced=True
    ),
    # Today's gang API (Kubernetes v1.36: v1alpha2; v1.37: v1beta1 and v1alpha3).
    (SCHEDULING_V1ALPHA2, "Workload"): _Kind(
        RawWorkloadV1Alpha2, group_workload_v1alpha2_from_raw, namespaced=True
    ),
    (SCHEDULING_V1ALPHA2, "PodGroup"): _Kind(
        RawPodGroupV1Alpha2, scheduling_pod_group_v1alpha2_from_raw, namespaced=True
    ),
    **{
        (version, kind): _Kind(wire_type, convert, namespaced=True)
        for version in (SCHEDULING_V1BETA1, SCHEDULING_V1ALPHA3)
        for kind, wire_type, convert in (
            ("Workload", RawGroupWorkload, group_workload_from_raw),
            ("PodGroup", RawGroup, scheduling_pod_group_from_raw),
        )
    },
    (SCHEDULING_V1ALPHA3, "CompositePodGroup"): _Kind(
        RawGroup, composite_pod_group_from_raw, namespaced=True
    ),
}
_TAS = "not used until topology-aware scheduling"
_SKIPPED: dict[tuple[str, str], str] = {
    ("kueue.x-k8s.io/v1alpha1", "Topology"): _TAS,
    (KUEUE_V1BETA1, "Topology"): _TAS,
    (KUEUE_V1BETA2, "Topology"): _TAS,
}
_NAMESPACED_SKIPPED: frozenset[str] = frozenset()  # Topology is cluster-scoped

# msgspec: "Expected `int`, got `str` - at `$.spec.podSets[0].count"; map keys read
# "... - at `key` in `$.metadata.labels`".
_AT = re.compile(r"(?P<problem>.*) - at (?P<key>`key` in )?`\$(?P<path>[^`]*)`", re.DOTALL)
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")


def decode_yaml(text: str, *, source: str = "", skipped: list[str] | None = None) -> Decoded:
    """Return the objects in a multi-document YAML (or JSON) text, and every problem found.

    Empty documents are ignored; `kind: List` documents are unpacked. A YAML syntax error is
    one FieldError naming `source` and the line; documents before it are still decoded.
    Timestamps stay strings, as in Kubernetes' YAML reading.
    """
    documents: list[Any] = []
    syntax: list[FieldError] = []
    try:
        documents.extend(yaml.load_all(text, Loader=_KubernetesLoader))
    except yaml.YAMLError as exc:
        syntax.append(_yaml_error(exc, source))
    objects, errors = decode_documents(documents, source=source, skipped=skipped)
    return objects, errors + syntax


def decode_documents(
    docs: Iterable[Any], *, source: str = "", skipped: list[str] | None = None
) -> Decoded:
    """Return the objects in already-parsed documents (dicts as from YAML or JSON).

    `source` (a file name) appears in messages about documents that cannot name themselves.
    """
    objects: list[ApiObject] = []
    errors: list[FieldError] = []
    notes: list[str] = [] if skipped is None else skipped
    for index, doc in enumerate(docs, start=1):
        where = f"{source} document {index}" if source else f"document {index}"
        _decode_document(doc, where, objects, errors, notes)
    return objects, errors


def workload_from_json(text: str) -> Workload | None:
    """The Workload a JSON manifest holds (as the gateway and watcher publish it in
    `workload.submitted`), or None when it is not JSON or not one valid Workload."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    objects, errors = decode_documents([doc])
    found = [o for o in objects if isinstance(o, Workload)]
    return found[0] if found and not errors else None


def decode_files(paths: Sequence[str | Path], *, skipped: list[str] | None = None) -> Decoded:
    """Return the objects in YAML or JSON files (`.json` is read as one JSON document)."""
    objects: list[ApiObject] = []
    errors: list[FieldError] = []
    for path in paths:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(FieldError(source, "(file)", f"cannot read: {exc}"))
            continue
        if source.endswith(".json"):
            try:
                found = decode_documents([json.loads(text)], source=source, skipped=skipped)
            except json.JSONDecodeError as exc:
                errors.append(FieldError(source, f"line {exc.lineno}", exc.msg))
                continue
        else:
            found = decode_yaml(text, source=source, skipped=skipped)
        objects.extend(found[0])
        errors.extend(found[1])
    return objects, errors


def _decode_document(
    doc: object,
    where: str,
    objects: list[ApiObject],
    errors: list[FieldError],
    skipped: list[str],
) -> None:
    if doc is None:
        return
    if not isinstance(doc, dict):
        errors.append(FieldError(where, "(document)", f"expected an object, got {_type_name(doc)}"))
        return
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if kind == "List" and isinstance(doc.get("items"), list):
        for i, item in enumerate(doc["items"]):
            _decode_document(item, f"{where} items[{i}]", objects, errors, skipped)
        return
    if not isinstance(api_version, str) or not isinstance(kind, str) or not kind:
        field = "kind" if isinstance(api_version, str) else "apiVersion"
        errors.append(FieldError(where, field, "is required and must be a string"))
        return
    spec = _KINDS.get((api_version, kind))
    name, namespace = _name_and_namespace(doc, namespaced=spec.namespaced if spec else None)
    who = "/".join(part for part in (kind, namespace, name) if part)
    if spec is None:
        if (api_version, kind) in _SKIPPED:
            skipped.append(f"{who}: {_SKIPPED[api_version, kind]}")
        else:
            errors.append(
                FieldError(who, "apiVersion", f"kind {kind} in {api_version} is not supported")
            )
        return
    if spec.named and not name:
        errors.append(FieldError(f"{kind} ({where})", "metadata.name", "is required"))
        return
    found, problems = _decode_object(_with_string_timestamp(doc), spec, who, namespace)
    errors.extend(problems)
    if found is not None and not problems:
        objects.append(found)


def _decode_object(
    doc: dict[str, Any], spec: _Kind, who: str, namespace: str
) -> tuple[ApiObject | None, list[FieldError]]:
    try:
        raw = msgspec.convert(doc, spec.wire_type)
    except msgspec.ValidationError as exc:
        return None, [structural_error(who, exc)]
    errs = ObjectErrors(who)
    meta = meta_from_raw(raw.metadata, namespace=namespace)
    if not meta.uid and spec.named:
        meta = msgspec.structs.replace(meta, uid=stable_uid(raw.kind, namespace, meta.name))
    found = spec.convert(raw, meta, errs)
    if isinstance(found, Workload):  # a Kueue Workload, or the one a queued Job stands for
        found, problems = with_alternatives(found, who=who)
        errs.errors.extend(problems)
    elif isinstance(found, ClusterQueue):
        errs.errors.extend(routing_policy_errors(found, who=who))
    if errs.errors:
        return None, errs.errors
    if spec.validated:
        return found, validate(found, name=who, api_version=raw.api_version)
    return found, []


def structural_error(who: str, exc: msgspec.ValidationError) -> FieldError:
    """Return msgspec's first structural error as a FieldError with a YAML path."""
    message = str(exc)
    match = _AT.fullmatch(message)
    if match is None:
        return FieldError(who, "(object)", message)
    problem, path = match["problem"], match["path"].removeprefix(".")
    if match["key"]:
        return FieldError(who, path, f"map key: {problem}")
    missing = _MISSING.fullmatch(problem)
    if missing:
        field = missing["field"]
        return FieldError(who, f"{path}.{field}" if path else field, "is required")
    return FieldError(who, path or "(object)", problem)


def _name_and_namespace(doc: dict[str, Any], *, namespaced: bool | None) -> tuple[str, str]:
    """Return metadata.name and the namespace used in messages and objects.

    Namespaced kinds default to "default"; cluster-scoped kinds have none. For kinds muster
    does not decode (`namespaced` None) the namespace is shown only when written.
    """
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name")
    namespace = meta.get("namespace")
    name = name if isinstance(name, str) else ""
    namespace = namespace if isinstance(namespace, str) else ""
    if namespaced is None:
        return name, namespace if doc.get("kind") in _NAMESPACED_SKIPPED else ""
    if namespaced:
        return name, namespace or "default"
    return name, ""


def _with_string_timestamp(doc: dict[str, Any]) -> dict[str, Any]:
    """Return `doc` with a datetime creationTimestamp (from a YAML 1.1 parser) as RFC 3339."""
    meta = doc.get("metadata")
    stamp = meta.get("creationTimestamp") if isinstance(meta, dict) else None
    if not isinstance(stamp, datetime.datetime | datetime.date):
        return doc
    text = stamp.isoformat().replace("+00:00", "Z")
    return {**doc, "metadata": {**meta, "creationTimestamp": text}}  # type: ignore[dict-item]


def _yaml_error(exc: yaml.YAMLError, source: str) -> FieldError:
    mark = getattr(exc, "problem_mark", None)
    line = f"line {mark.line + 1}" if mark is not None else "(yaml)"
    problem = getattr(exc, "problem", None) or str(exc)
    return FieldError(source or "(input)", line, f"invalid YAML: {problem}")


def _type_name(value: object) -> str:
    return {str: "a string", int: "a number", float: "a number", list: "a list"}.get(
        type(value), type(value).__name__
    )


class _KubernetesLoader(yaml.SafeLoader):
    """SafeLoader that leaves timestamps as strings, as Kubernetes' YAML reading does."""


_KubernetesLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def kueue_config_from_file(path: str | Path) -> tuple[KueueConfig | None, list[FieldError]]:
    """The one Kueue `Configuration` a config file must hold (`--config`, `--kueue-config`)."""
    objects, errors = decode_files([path])
    if errors:
        return None, errors
    configs = [obj for obj in objects if isinstance(obj, KueueConfig)]
    if len(configs) != 1 or len(objects) != 1:
        problem = f"must hold exactly one Configuration, found {len(objects)} objects"
        return None, [FieldError(obj=str(path), path="(file)", problem=problem)]
    return configs[0], []
