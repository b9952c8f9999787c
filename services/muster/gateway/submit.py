"""Gateway.Submit's pure part: a YAML/JSON manifest to the events it publishes, or the problems.

Configuration objects become `config.applied` (the document as written, as JSON); Workloads and
Jobs become `workload.submitted` (the Kueue Workload, derived from the Job when needed); cluster
objects (Nodes, Pods, scheduling.k8s.io Workloads, PodGroups) become `cmd.apply` for the
cluster's binder, one command per object. Event ids are deterministic, so a retried Submit is
deduplicated by JetStream. Used by `muster.gateway.service`; nothing here does I/O.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Final

import msgspec
import yaml

from muster.api import FieldError, decode_documents, quantities_to_strings, workload_to_kueue
from muster.api.model import (
    CLUSTER_TYPES,
    CONFIG_TYPES,
    ClusterObject,
    ConfigObject,
    KueueConfig,
    ObjectMeta,
    SchedulingPodGroup,
    SchedulingWorkload,
    Workload,
)
from muster.bus.envelope import encode, new_event
from muster.bus.subjects import check_cluster
from muster.contracts.v1 import events_pb2

# The namespace of submitted events' uuid5 ids. Fixed forever: changing it breaks dedupe of a
# Submit retried across a gateway upgrade.
SUBMIT_ID_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_DNS, "gateway.muster.dev")
SOURCE: Final = "gateway"

_NOT_SUBMITTABLE: Final = (
    "Configuration: kind: is the scheduler's own configuration; it cannot be submitted"
)


class InvalidManifestError(Exception):
    """The manifest cannot be submitted; `errors` has one user-facing line per problem."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = tuple(errors)


class PlannedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event a Submit publishes, before it is put in an envelope."""

    kind: str  # of the submitted object: "Workload" for a Job too (the derived Workload)
    key: str  # "<namespace>/<name>" or "<name>"
    event_id: str
    payload_field: str  # "submitted", "config_applied" or "apply_requested"
    payload: events_pb2.WorkloadSubmitted | events_pb2.ConfigApplied | events_pb2.ApplyRequested
    workload: str = ""  # the envelope's workload key; "" for configuration
    generation: int = 0


# libyaml's parser when PyYAML was built with it (about 8x faster), else the pure-Python one.
try:
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # PyYAML without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]


class _ManifestLoader(_SafeLoader):
    """SafeLoader that leaves timestamps as strings, as Kubernetes reads YAML (and muster.api)."""


_ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def plan_submit(manifest: str, *, cluster: str) -> list[PlannedEvent]:
    """Return the events submitting `manifest` to `cluster` publishes, in document order.

    Raises InvalidManifestError, naming every problem, when any document is bad or cannot be
    submitted: then nothing may be published. `cluster` must be a valid cluster id.
    """
    documents = _load(manifest)
    skipped: list[str] = []
    objects, errors = decode_documents(documents, skipped=skipped)
    lines = [str(e) for e in errors]
    lines += [f"{note} (cannot be submitted)" for note in skipped]
    lines += [_NOT_SUBMITTABLE for obj in objects if isinstance(obj, KueueConfig)]
    if not lines and not objects:
        lines.append("manifest: (document): has no object to submit")
    if lines:
        raise InvalidManifestError(lines)
    # With no problem, every object document decoded to exactly one object, in order.
    planned: list[PlannedEvent] = []
    problems: list[str] = []
    for obj, raw in zip(objects, _flatten(documents), strict=True):
        if isinstance(obj, Workload):
            planned.append(_plan_workload(obj, cluster=cluster))
        elif isinstance(obj, CLUSTER_TYPES):
            found = _plan_cluster_object(obj, raw, cluster=cluster)
            if isinstance(found, FieldError):
                problems.append(str(found))
            else:
                planned.append(found)
        elif isinstance(obj, CONFIG_TYPES):
            found = _plan_config(obj, raw, cluster=cluster)
            if isinstance(found, FieldError):
                problems.append(str(found))
            else:
                planned.append(found)
    if problems:
        raise InvalidManifestError(problems)
    return planned


def envelopes(
    planned: Sequence[PlannedEvent], *, cluster: str, now_ns: int | None = None
) -> list[events_pb2.Envelope]:
    """Return `planned` as envelopes for `cluster`, with their deterministic ids.

    The trace context is the current span's (the gateway opens one continuing the caller's).
    """
    check_cluster(cluster)
    out = []
    for event in planned:
        env = new_event(
            event.payload_field,
            event.payload,
            cluster=cluster,
            workload=event.workload,
            generation=event.generation,
            source=SOURCE,
            now_ns=now_ns,
        )
        env.event_id = event.event_id
        out.append(env)
    return out


def oversized(envs: Sequence[events_pb2.Envelope], *, max_event_bytes: int) -> list[str]:
    """Return one "manifest too large" line per envelope over the bus's size limit."""
    lines = []
    for env in envs:
        size = len(encode(env))
        if size > max_event_bytes:
            who = env.workload or env.config_applied.name or _applied_name(env)
            lines.append(f"{who}: manifest too large: {size} bytes > {max_event_bytes}")
    return lines


def _applied_name(env: events_pb2.Envelope) -> str:
    """ "Kind/namespace/name" of the first object a `cmd.apply` carries ("" if none)."""
    for text in env.apply_requested.manifests_json:
        doc = json.loads(text)
        meta = doc.get("metadata") or {}
        name = "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p)
        return f"{doc.get('kind')}/{name}"
    return ""


def event_id(*, cluster: str, event_type: str, kind: str, key: str, version: str, body: str) -> str:
    """The id of submitting object `kind`/`key` at `version` (uid/generation) with `body`.

    The same object submitted twice with the same content gets the same id; any change in
    content, generation or uid gives a new one.
    """
    digest = hashlib.sha256(body.encode()).hexdigest()
    name = f"{cluster}/{event_type}/{kind}/{key}/{version}/{digest}"
    return str(uuid.uuid5(SUBMIT_ID_NAMESPACE, name))


def _plan_workload(wl: Workload, *, cluster: str) -> PlannedEvent:
    manifest = workload_to_kueue(wl)
    body = _canonical_json(manifest)
    payload = events_pb2.WorkloadSubmitted(
        manifest_json=json.dumps(manifest, separators=(",", ":")),
        queue_name=wl.queue_name,
        # Only spec.priority as written: priority classes are resolved by admission.
        priority=wl.priority or 0,
        pod_sets=[
            events_pb2.PodSetSummary(
                name=ps.name,
                count=ps.count,
                min_count=ps.min_count or 0,
                requests=quantities_to_strings(ps.requests),
            )
            for ps in wl.pod_sets
        ],
    )
    owner = _controller(wl)
    if owner is not None:
        payload.owner.CopyFrom(owner)
    version = f"{wl.meta.uid}/{wl.meta.generation}"
    key = str(wl.key)
    return PlannedEvent(
        kind="Workload",
        key=key,
        event_id=event_id(
            cluster=cluster,
            event_type="workload.submitted",
            kind="Workload",
            key=key,
            version=version,
            body=body,
        ),
        payload_field="submitted",
        payload=payload,
        workload=key,
        generation=wl.meta.generation,
    )


def _controller(wl: Workload) -> events_pb2.OwnerRef | None:
    refs = wl.meta.owner_references
    if not refs:
        return None
    ref = next((r for r in refs if r.controller), refs[0])
    return events_pb2.OwnerRef(
        api_version=ref.api_version, kind=ref.kind, name=ref.name, uid=ref.uid
    )


def _plan_config(
    obj: ConfigObject, raw: dict[str, Any], *, cluster: str
) -> PlannedEvent | FieldError:
    kind = type(obj).__name__
    meta = obj.meta
    key = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
    try:
        manifest_json = json.dumps(raw, separators=(",", ":"), default=_json_scalar)
        body = _canonical_json(raw)
    except (TypeError, ValueError) as exc:
        return FieldError(f"{kind}/{key}", "(document)", f"cannot be written as JSON: {exc}")
    payload = events_pb2.ConfigApplied(kind=kind, name=key, manifest_json=manifest_json)
    return _planned_object(
        kind, key, obj.meta, body, cluster=cluster, event_type="config.applied", payload=payload
    )


def _planned_object(
    kind: str,
    key: str,
    meta: ObjectMeta,
    body: str,
    *,
    cluster: str,
    event_type: str,
    payload: events_pb2.ConfigApplied | events_pb2.ApplyRequested,
) -> PlannedEvent:
    """The event for one object that is not a workload, its id fixed by kind, key and body."""
    version = f"{meta.uid}/{meta.generation}"
    return PlannedEvent(
        kind=kind,
        key=key,
        event_id=event_id(
            cluster=cluster,
            event_type=event_type,
            kind=kind,
            key=key,
            version=version,
            body=body,
        ),
        payload_field="config_applied" if event_type == "config.applied" else "apply_requested",
        payload=payload,
    )


def _plan_cluster_object(
    obj: ClusterObject, raw: dict[str, Any], *, cluster: str
) -> PlannedEvent | FieldError:
    """A Node, Pod, scheduling.k8s.io Workload or PodGroup: `cmd.apply` to the cluster's binder,
    which writes it into the cluster as `kubectl apply` would (docs/services.md)."""
    kind = CLUSTER_KINDS[type(obj)]
    meta = obj.meta
    key = f"{meta.namespace or 'default'}/{meta.name}" if kind != "Node" else meta.name
    try:
        body = _canonical_json(raw)
    except (TypeError, ValueError) as exc:
        return FieldError(f"{kind}/{key}", "(document)", f"cannot be written as JSON: {exc}")
    payload = events_pb2.ApplyRequested(manifests_json=[body])
    return _planned_object(
        kind, key, meta, body, cluster=cluster, event_type="cmd.apply", payload=payload
    )


# How SubmitResponse names each cluster kind: the scheduling.k8s.io Workload is told apart
# from Kueue's by its group, as the simulated cluster stores it.
CLUSTER_KINDS: Final[dict[type, str]] = {
    **{t: t.__name__ for t in CLUSTER_TYPES},
    SchedulingWorkload: "Workload.scheduling.k8s.io",
    SchedulingPodGroup: "PodGroup.scheduling.k8s.io",
}


def _load(manifest: str) -> list[Any]:
    try:
        return list(yaml.load_all(manifest, Loader=_ManifestLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(yaml)"
        problem = getattr(exc, "problem", None) or str(exc)
        error = FieldError("manifest", where, f"invalid YAML: {problem}")
        raise InvalidManifestError([str(error)]) from None
    except RecursionError:
        raise InvalidManifestError(["manifest: (yaml): nested too deeply"]) from None


def _flatten(documents: list[Any]) -> Iterator[dict[str, Any]]:
    """Yield the object documents in the order muster.api decodes them (Lists unpacked)."""
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            yield from _flatten(doc["items"])
        else:
            yield doc


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_scalar)


def _json_scalar(value: object) -> object:
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat().replace("+00:00", "Z")
    raise TypeError(f"{type(value).__name__} is not JSON")
