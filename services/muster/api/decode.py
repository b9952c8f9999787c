"""YAML and JSON documents to model objects, with one FieldError per problem.

Entry points: `decode_yaml`, `decode_documents`, `decode_files`; each returns
`(objects, errors)`. Every document is decoded on its own, so one bad object never blocks the
others; an object with any error is left out of `objects`. Objects muster reads later but not
yet (Kueue Topologies) are neither objects nor errors: pass a list as `skipped` to learn which
were passed over. Documents of kinds a caller names in `kept` (the configuration objects of
admission check controllers) are handed back as they are.

Text is read by `muster.api.load` (bounded YAML and JSON). `validation` is kubectl's
`--validate`: "strict" refuses unknown fields (`muster.api.schema`) and keys written twice,
"warn" reports them in `warnings`, "ignore" drops them. User input (files, Submit) is strict
by default; what muster itself wrote (event payloads, objects read from a cluster) is read
with "ignore". An object without `metadata.name` but with `generateName` is named from
`name_seed` (`muster.api.names.generated_name`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, TypeGuard, get_args

import msgspec

from muster.api import raw as wire
from muster.api.alternatives import (
    jobset_alternatives_errors,
    routing_policy_errors,
    unmade_pods_errors,
    with_alternatives,
)
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
from muster.api.files import read_regular
from muster.api.job import workload_from_job
from muster.api.jobset import JOBSET_API_VERSION, JOBSET_KIND, workload_from_jobset
from muster.api.limit_range import limit_range_from_raw
from muster.api.load import LoadError, load_json, load_yaml
from muster.api.model import (
    CLUSTER_TYPES,
    ApiObject,
    ClusterQueue,
    KueueConfig,
    Node,
    ObjectMeta,
    PodSet,
    Workload,
)
from muster.api.multikueue import (
    admission_check_from_raw,
    multikueue_cluster_from_raw,
    multikueue_config_from_raw,
)
from muster.api.names import (
    LABEL_VALUE_MAX,
    annotation_problems,
    dns1123_label_problem,
    dns1123_subdomain_problem,
    generated_name,
    label_problems,
)
from muster.api.runtime_class import runtime_class_from_raw
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
from muster.api.schema import SCHEMAS, unknown_fields
from muster.api.validate import validate
from muster.api.wording import structural

Decoded = tuple[list[ApiObject], list[FieldError]]
# A Kueue Workload's podsets as `convert.pod_set_of` reads them, problems added to the errors,
# or None to have them read so (`payloads.PodSetsByTemplate`: a template read once).
PodSetReader = Callable[[wire.RawWorkload, ObjectErrors], tuple[PodSet, ...] | None]
Validation = Literal["strict", "warn", "ignore"]
VALIDATIONS: Final[tuple[str, ...]] = get_args(Validation)
# A file is read whole, then parsed: this bounds the memory one takes (`muster submit` and
# `muster simulate` refuse a larger one before reading it).
MAX_FILE_BYTES: Final = 64 << 20


class Kept(NamedTuple):
    """Documents of kinds muster.api does not decode that a caller wants as they are (the
    configuration objects of admission check controllers: `muster simulate` runs them);
    `documents` receives them, in input order."""

    kinds: frozenset[tuple[str, str]]  # (apiVersion, kind)
    documents: list[dict[str, Any]]


class _Reading(NamedTuple):
    """How documents are read: where they come from and what to do with unknown fields."""

    source: str
    skipped: list[str]
    kept: Kept | None
    validation: Validation
    warnings: list[FieldError]
    name_seed: str
    names_checked: bool = False  # names, labels and annotations: checked where stored
    stored: bool = False  # taken in before: `validate`'s rules for new objects not applied
    pod_sets: PodSetReader | None = None  # a Kueue Workload's podsets, when read elsewhere
    validated: bool = True  # `validate` run (on kinds whose checks are muster.api.validate's)


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
    ("v1", "LimitRange"): _Kind(wire.RawLimitRange, limit_range_from_raw, namespaced=True),
    ("node.k8s.io/v1", "RuntimeClass"): _Kind(wire.RawRuntimeClass, runtime_class_from_raw),
    ("batch/v1", "Job"): _Kind(
        wire.RawJob,
        lambda raw, meta, errs: workload_from_job(raw, errs, namespace=meta.namespace),
        namespaced=True,
        validated=False,
    ),
    (JOBSET_API_VERSION, JOBSET_KIND): _Kind(
        wire.RawJobSet,
        lambda raw, meta, errs: workload_from_jobset(raw, errs, namespace=meta.namespace),
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

# A path as `wording.structural` gives it: "spec.podSets[0].count".
_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]")
MAX_STRUCTURAL = 20


def decode_yaml(
    text: str,
    *,
    source: str = "",
    skipped: list[str] | None = None,
    validation: Validation = "strict",
    warnings: list[FieldError] | None = None,
    name_seed: str | None = None,
    kept: Kept | None = None,
) -> Decoded:
    """Return the objects in a multi-document YAML (or JSON) text, and every problem found.

    Empty documents are ignored; `kind: List` documents are unpacked. A YAML syntax error (or
    a limit of `muster.api.load`) is one FieldError naming `source` and the line; documents
    before it are still decoded. Timestamps stay strings, as in Kubernetes' YAML reading.
    """
    duplicates: list[FieldError] = []
    documents, syntax = load_yaml(text, source=source, duplicates=duplicates)
    reading = _reading(source, skipped, validation, warnings, name_seed, kept)
    objects, errors = _decode_all(documents, reading)
    if validation == "strict":
        errors += duplicates
    elif validation == "warn":
        reading.warnings.extend(duplicates)
    return objects, errors + ([syntax] if syntax is not None else [])


def decode_documents(
    docs: Iterable[Any],
    *,
    source: str = "",
    skipped: list[str] | None = None,
    validation: Validation = "ignore",
    warnings: list[FieldError] | None = None,
    name_seed: str | None = None,
    kept: Kept | None = None,
    names_checked: bool = False,
    stored: bool = False,
    pod_sets: PodSetReader | None = None,
) -> Decoded:
    """Return the objects in already-parsed documents (dicts as from YAML or JSON).

    `source` (a file name) appears in messages about documents that cannot name themselves.
    Unknown fields are ignored unless `validation` says otherwise: the documents usually come
    from muster itself or from a cluster. `names_checked`: the documents were read from a
    cluster, whose API server refuses a bad name, namespace, label or annotation (and the
    simulated one stores only objects muster checked or named), so those are not checked again.
    `stored`: the documents were taken in before (a stored event's manifest, a cluster's
    object), so rules added since for new objects are not applied (`validate`). `pod_sets`: a
    Kueue Workload's podsets, read as `pod_set_of` reads them (a reader that keeps them per
    template); everything else about the object is read and checked as without it.
    """
    reading = _reading(source, skipped, validation, warnings, name_seed, kept)
    reading = reading._replace(names_checked=names_checked, stored=stored, pod_sets=pod_sets)
    return _decode_all(docs, reading)


# A Kueue Workload's JSON read straight into its wire struct: one pass, no dicts built.
_WORKLOAD_JSON: Final = msgspec.json.Decoder(wire.RawWorkload)
_WORKLOAD_KIND: Final = _KINDS[KUEUE_V1BETA2, "Workload"]
# A number json.loads refuses (past Python's limit on an int's digits), even in a field msgspec
# skips unread, found as a run of "0" once every digit is one: at C speed (a regular expression
# took 100 times as long on a large manifest of short numbers).
_INT_DIGITS: Final = sys.get_int_max_str_digits()  # 0: no limit
_TOO_LONG_INT: Final = b"0" * (_INT_DIGITS + 1)
_DIGITS_AS_ZERO: Final = bytes.maketrans(b"123456789", b"0" * 9)


def _has_too_long_int(text: str) -> bool:
    if not _INT_DIGITS or len(text) <= _INT_DIGITS:
        return False
    return _TOO_LONG_INT in text.encode("utf-8", "surrogatepass").translate(_DIGITS_AS_ZERO)


def decode_workload_json(
    text: str, *, pod_sets: PodSetReader | None = None, checked: bool = True
) -> Workload | None:
    """The Kueue v1beta2 Workload the JSON object `text` holds, read in one typed pass when it
    reads without a problem: the same Workload as `decode_documents([json.loads(text)],
    stored=True, pod_sets=pod_sets)`, every check run. None when it has a problem, or may read
    otherwise there (another kind or version, no name, JSON that msgspec reads differently from
    the json module: NaN, a lone surrogate, an int past Python's limit): read it there, which
    names the problem. `checked` False: its names, labels, annotations and `validate` are not
    checked (what the binder reads of a workload admission admitted)."""
    if _has_too_long_int(text):
        return None
    try:
        raw = _WORKLOAD_JSON.decode(text)
    except (msgspec.DecodeError, RecursionError):  # ValidationError too
        return None
    meta = raw.metadata
    if raw.api_version != KUEUE_V1BETA2 or raw.kind != "Workload" or not meta.name:
        return None
    namespace = meta.namespace or "default"  # as `_name_and_namespace` names it
    who = f"Workload/{namespace}/{meta.name}"
    if checked and _meta_problems(
        _WORKLOAD_KIND,
        who,
        kind="Workload",
        generated=False,
        name=meta.name,
        namespace=meta.namespace,
        labels=meta.labels,
        annotations=meta.annotations,
    ):
        return None
    reading = _Reading(
        source="",
        skipped=[],
        kept=None,
        validation="ignore",
        warnings=[],
        name_seed="",
        names_checked=not checked,
        stored=True,
        pod_sets=pod_sets,
        validated=checked,
    )
    found, problems = _object_of(raw, _WORKLOAD_KIND, who, namespace, reading)
    return found if isinstance(found, Workload) and not problems else None


def read_bounded(path: Path) -> str:
    """The text of `path`, read whole; ValueError past MAX_FILE_BYTES or when it is not a
    regular file (`muster.api.files`): a device (`--kueue-config /dev/zero`) was read until
    memory ran out, and a pipe held the reader at start for ever."""
    return read_regular(path, max_bytes=MAX_FILE_BYTES).decode("utf-8")


def decode_files(
    paths: Sequence[str | Path],
    *,
    skipped: list[str] | None = None,
    validation: Validation = "strict",
    warnings: list[FieldError] | None = None,
    kept: Kept | None = None,
) -> Decoded:
    """Return the objects in YAML or JSON files (`.json` is read as one JSON document)."""
    objects: list[ApiObject] = []
    errors: list[FieldError] = []
    for path in paths:
        source = str(path)
        try:
            text = read_bounded(Path(path))
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(FieldError(source, "(file)", f"cannot read: {exc}"))
            continue
        except ValueError as exc:
            errors.append(FieldError(source, "(file)", str(exc)))
            continue
        options: dict[str, Any] = {"skipped": skipped, "validation": validation, "kept": kept}
        if source.endswith(".json"):
            try:
                doc = load_json(text, source=source)
            except LoadError as exc:
                errors.append(exc.error)
                continue
            found = decode_documents([doc], source=source, warnings=warnings, **options)
        else:
            found = decode_yaml(text, source=source, warnings=warnings, **options)
        objects.extend(found[0])
        errors.extend(found[1])
    return objects, errors


def _reading(
    source: str,
    skipped: list[str] | None,
    validation: Validation,
    warnings: list[FieldError] | None,
    name_seed: str | None,
    kept: Kept | None = None,
) -> _Reading:
    if validation not in VALIDATIONS:
        raise ValueError(f"validation must be one of {', '.join(VALIDATIONS)}, got {validation!r}")
    return _Reading(
        source=source,
        skipped=[] if skipped is None else skipped,
        kept=kept,
        validation=validation,
        warnings=[] if warnings is None else warnings,
        name_seed=source if name_seed is None else name_seed,
    )


def _decode_all(docs: Iterable[Any], reading: _Reading) -> Decoded:
    objects: list[ApiObject] = []
    errors: list[FieldError] = []
    for index, doc in enumerate(docs, start=1):
        where = f"{reading.source} document {index}" if reading.source else f"document {index}"
        _decode_document(doc, where, objects, errors, reading)
    return objects, errors


def _decode_document(
    doc: object,
    where: str,
    objects: list[ApiObject],
    errors: list[FieldError],
    reading: _Reading,
) -> None:
    if doc is None:
        return
    if not isinstance(doc, dict):
        errors.append(FieldError(where, "(document)", f"expected an object, got {_type_name(doc)}"))
        return
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if kind == "List" and isinstance(doc.get("items"), list):
        for i, item in enumerate(doc["items"]):
            _decode_document(item, f"{where} items[{i}]", objects, errors, reading)
        return
    if not isinstance(api_version, str) or not isinstance(kind, str) or not kind:
        field = "kind" if isinstance(api_version, str) else "apiVersion"
        errors.append(FieldError(where, field, "is required and must be a string"))
        return
    spec = _KINDS.get((api_version, kind))
    written = doc
    if spec is not None and spec.named:
        doc = with_generated_name(doc, seed=f"{reading.name_seed}/{where}")
    name, namespace = _name_and_namespace(doc, namespaced=spec.namespaced if spec else None)
    who = "/".join(part for part in (kind, namespace, name) if part)
    if spec is None:
        if reading.kept is not None and (api_version, kind) in reading.kept.kinds:
            reading.kept.documents.append(doc)
        elif (api_version, kind) in _SKIPPED:
            reading.skipped.append(f"{who}: {_SKIPPED[api_version, kind]}")
        else:
            errors.append(
                FieldError(who, "apiVersion", f"kind {kind} in {api_version} is not supported")
            )
        return
    if spec.named and not name:
        errors.append(FieldError(f"{kind} ({where})", "metadata.name", "is required"))
        return
    problems = (
        []
        if reading.names_checked
        else _identity_problems(doc, spec, who, kind=kind, generated=doc is not written)
    )
    problems += _unknown_field_problems(doc, who, (api_version, kind), reading)
    found, more = _decode_object(doc, spec, who, namespace, reading)
    errors.extend(problems + more)
    if found is not None and not problems and not more:
        objects.append(found)


def with_generated_name(doc: dict[str, Any], *, seed: str) -> dict[str, Any]:
    """`doc` named from `metadata.generateName` when it has no `metadata.name` (a copy; `doc`
    itself is returned when there is nothing to name)."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or meta.get("name"):
        return doc
    prefix = meta.get("generateName")
    if not isinstance(prefix, str) or not prefix:
        return doc
    return {**doc, "metadata": {**meta, "name": generated_name(prefix, seed=seed)}}


def _workload_name_problem(name: str) -> str | None:
    """Differs from Kueue (253): a Workload's name is at most 63 characters, because muster
    labels each of its pods with it (`muster.dev/workload`) and a label value is no longer;
    a longer one was admitted, then the API server refused its pods."""
    if len(name) > LABEL_VALUE_MAX:
        return (
            f"must be no more than {LABEL_VALUE_MAX} characters (each of its pods is labelled"
            f" with it), got {len(name)}"
        )
    return None


def _identity_problems(
    doc: dict[str, Any], spec: _Kind, who: str, *, kind: str, generated: bool
) -> list[FieldError]:
    """metadata.name and .namespace checked as the API server checks them for `kind`."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return []  # the decoder names the wrong type
    labels, annotations = meta.get("labels"), meta.get("annotations")
    return _meta_problems(
        spec,
        who,
        kind=kind,
        generated=generated,
        name=meta.get("name"),
        namespace=meta.get("namespace"),
        # Anything but a map of strings is not checked here: the decoder names its type.
        labels=labels if _string_map(labels) else None,
        annotations=annotations if _string_map(annotations) else None,
    )


def _meta_problems(
    spec: _Kind,
    who: str,
    *,
    kind: str,
    generated: bool,
    name: object,
    namespace: object,
    labels: dict[str, str] | None,
    annotations: dict[str, str] | None,
) -> list[FieldError]:
    """`_identity_problems` of the values read (from a document, or from its wire struct)."""
    problems: list[FieldError] = []
    if spec.named and isinstance(name, str):
        check = dns1123_label_problem if kind == "Namespace" else dns1123_subdomain_problem
        problem = check(name)
        if problem is None and spec.wire_type is wire.RawWorkload:  # a Kueue Workload
            problem = _workload_name_problem(name)
        if problem is not None:
            field = "metadata.generateName" if generated else "metadata.name"
            problems.append(FieldError(who, field, problem))
    if spec.namespaced and isinstance(namespace, str) and namespace:
        problem = dns1123_label_problem(namespace)
        if problem is not None:
            problems.append(FieldError(who, "metadata.namespace", problem))
    if labels:
        found = label_problems(labels, path="metadata.labels")
        problems += [FieldError(who, path, problem) for path, problem in found]
    if annotations:
        found = annotation_problems(annotations, path="metadata.annotations")
        problems += [FieldError(who, path, problem) for path, problem in found]
    return problems


def _string_map(value: object) -> TypeGuard[dict[str, str]]:
    """A map the decoder accepts as labels; anything else it reports itself."""
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _unknown_field_problems(
    doc: dict[str, Any], who: str, kind: tuple[str, str], reading: _Reading
) -> list[FieldError]:
    if reading.validation == "ignore" or kind not in SCHEMAS:
        return []
    found = [FieldError(who, path, "unknown field") for path in unknown_fields(doc, SCHEMAS[kind])]
    if reading.validation == "warn":
        reading.warnings.extend(found)
        return []
    return found


def _decode_object(
    doc: dict[str, Any], spec: _Kind, who: str, namespace: str, reading: _Reading
) -> tuple[ApiObject | None, list[FieldError]]:
    raw, structural = _converted(doc, spec.wire_type, who)
    if raw is None:
        return None, structural
    return _object_of(raw, spec, who, namespace, reading)


def _object_of(
    raw: Any, spec: _Kind, who: str, namespace: str, reading: _Reading
) -> tuple[ApiObject | None, list[FieldError]]:
    """The object `raw` (a `spec.wire_type`) stands for, checked, or None and its problems."""
    errs = ObjectErrors(who)
    meta = meta_from_raw(raw.metadata, namespace=namespace)
    if not meta.uid and spec.named:
        meta = msgspec.structs.replace(meta, uid=stable_uid(raw.kind, namespace, meta.name))
    found: ApiObject
    if reading.pod_sets is not None and spec.wire_type is wire.RawWorkload:  # a Kueue Workload
        found = _workload_of(raw, meta, errs, reading.pod_sets)
    else:
        found = spec.convert(raw, meta, errs)
    if isinstance(found, Workload):  # a Kueue Workload, or the one a queued Job stands for
        found, problems = with_alternatives(found, who=who)
        errs.errors.extend(problems)
        if raw.kind == JOBSET_KIND:
            errs.errors.extend(jobset_alternatives_errors(found, who=who))
    elif isinstance(found, ClusterQueue):
        errs.errors.extend(routing_policy_errors(found, who=who))
    elif isinstance(found, CLUSTER_TYPES) and not isinstance(found, Node):
        errs.errors.extend(unmade_pods_errors(found.meta.annotations, who=who))
    if errs.errors:
        return None, errs.errors
    if spec.validated and reading.validated:
        return found, validate(found, name=who, api_version=raw.api_version, stored=reading.stored)
    return found, []


def _workload_of(
    raw: wire.RawWorkload, meta: ObjectMeta, errs: ObjectErrors, read: PodSetReader
) -> Workload:
    """`workload_from_raw` with podsets from `read`; a podset with a problem is read there
    again, so that the problems come in the order and words they always do."""
    problems = ObjectErrors(errs.obj)
    pod_sets = read(raw, problems)
    return workload_from_raw(raw, meta, errs, pod_sets=None if problems.errors else pod_sets)


def _converted(doc: dict[str, Any], wire_type: Any, who: str) -> tuple[Any, list[FieldError]]:
    """`doc` as `wire_type`, or None and its structural problems: msgspec names one at a
    time, so each wrong field is taken out of a copy and the rest converted again, and all of
    an object's wrong types are named in one pass (at most MAX_STRUCTURAL)."""
    problems: list[FieldError] = []
    removed: set[str] = set()
    for _ in range(MAX_STRUCTURAL):
        try:
            raw = msgspec.convert(doc, wire_type)
        except msgspec.ValidationError as exc:
            error = structural_error(who, exc)
            if error.path in removed:  # a field taken out that is required: said already
                break
            problems.append(error)
            pruned = _without(doc, error.path)
            if pruned is None:
                break
            doc = pruned
            removed.add(error.path)
            continue
        return (None if problems else raw), problems
    return None, problems


def _without(doc: dict[str, Any], path: str) -> dict[str, Any] | None:
    """A copy of `doc` without the map entry at `path` ("spec.podSets[0].count"), copying only
    the containers on the way; None when `path` does not end in a plain map key."""
    steps = [int(i) if i else key for key, i in _STEP.findall("." + path)]
    if not steps or "." + path != "".join(
        f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps
    ):
        return None
    *parents, last = steps
    if not isinstance(last, str):
        return None
    top: dict[str, Any] = dict(doc)
    node: Any = top
    for step in parents:
        child = node[step] if isinstance(node, list) else node.get(step)
        if not isinstance(child, dict | list):
            return None
        child = list(child) if isinstance(child, list) else dict(child)
        node[step] = child
        node = child
    if not isinstance(node, dict) or last not in node:
        return None
    del node[last]
    return top


def structural_error(who: str, exc: msgspec.ValidationError) -> FieldError:
    """msgspec's first structural error as a FieldError with a YAML path, in plain words."""
    where = structural(str(exc))
    return FieldError(who, where.path or "(object)", where.problem)


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


def _type_name(value: object) -> str:
    return {str: "a string", int: "a number", float: "a number", list: "a list"}.get(
        type(value), type(value).__name__
    )


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
