"""Gateway.Submit's pure part: a YAML/JSON manifest to the events it publishes, or the problems.

Configuration objects become `config.applied` (the document as written, as JSON); Workloads and
Jobs become `workload.submitted` (the Kueue Workload, derived from the Job when needed); cluster
objects (Nodes, Pods, scheduling.k8s.io Workloads, PodGroups) become `cmd.apply` for the
cluster's binder, one command per object. Used by `muster.gateway.submit_servicer`; nothing
here does I/O.

As the API server does on create, the `status` of what is submitted is dropped (a Node's
excepted: its capacity is what the simulated cluster reads), so a Workload can never arrive
already admitted; `generateName` is honoured. Event ids derive from the Submit's
`submission` id (the request's idempotency key, else a fresh one per call): a Submit retried
with the same key publishes the same ids, which JetStream drops as duplicates, and a later
Submit of the same object, even with the same content, is never mistaken for one (a quota set
4 → 0 → 4 ends at 4).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import msgspec

from muster.api import (
    FieldError,
    Validation,
    decode_documents,
    load_yaml,
    with_generated_name,
)
from muster.api.ids import uuid5_text
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
from muster.bus.envelope import new_event
from muster.bus.subjects import check_cluster
from muster.contracts.v1 import events_pb2
from muster.payloads import config_applied, manifest_json, workload_submitted

# The namespace of submitted events' uuid5 ids. Fixed forever: changing it breaks dedupe of a
# Submit retried across a gateway upgrade.
SUBMIT_ID_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_DNS, "gateway.muster.dev")
SOURCE: Final = "gateway"
MAX_IDEMPOTENCY_KEY: Final = 128  # characters; it is hashed, never used as a key itself
_KEEPS_STATUS: Final = frozenset({"Node"})  # an admin's simulated node: status is its capacity

# A Submit without an idempotency key is told apart from every other by this process's own
# random prefix and a count: unique as a random id per call, without a system call per call
# (`os.urandom` lets the gateway's gRPC threads take the GIL from the event loop).
_prefix = os.urandom(16).hex()
_SUBMISSIONS: Final = itertools.count(1)  # next() is atomic: plans may run on a thread too


def _new_prefix() -> None:
    global _prefix  # a forked child must not count under its parent's prefix
    _prefix = os.urandom(16).hex()


os.register_at_fork(after_in_child=_new_prefix)

_NOT_SUBMITTABLE: Final = (
    "Configuration: kind: is the scheduler's own configuration; it cannot be submitted"
)


# gRPC carries a status message in a trailer that clients refuse past 16 KiB, and may refuse
# past 8 KiB with its other headers (about 150 bytes), percent-encoded (a newline or a
# non-ASCII byte costs 3): the message keeps its first problems within this.
MAX_MESSAGE_BYTES: Final = 7680
MAX_LINE_CHARS: Final = 600  # api.errors cuts hostile names and paths well within it


class InvalidManifestError(Exception):
    """The manifest cannot be submitted; `errors` has one user-facing line per problem, and
    `message` the first of them that fit a gRPC status, then how many more there are."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = tuple(errors)

    @property
    def message(self) -> str:
        shown: list[str] = []
        budget = MAX_MESSAGE_BYTES - 200  # room for the last line
        for line in self.errors:
            if len(line) > MAX_LINE_CHARS:
                line = line[: MAX_LINE_CHARS - 3] + "..."
            budget -= encoded_size(line) + 3
            if budget < 0:
                rest = len(self.errors) - len(shown)
                shown.append(f"... and {rest} more problems ({len(self.errors)} in all)")
                break
            shown.append(line)
        return "\n".join(shown)


def encoded_size(text: str) -> int:
    """Bytes of `text` in a grpc-message trailer (bytes outside printable ASCII, and %, cost 3)."""
    return sum(3 if b < 0x20 or b > 0x7E or b == 0x25 else 1 for b in text.encode(errors="replace"))


class PlannedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event a Submit publishes, before it is put in an envelope."""

    kind: str  # of the submitted object: "Workload" for a Job too (the derived Workload)
    key: str  # "<namespace>/<name>" or "<name>"
    event_id: str
    payload_field: str  # "submitted", "config_applied" or "apply_requested"
    payload: events_pb2.WorkloadSubmitted | events_pb2.ConfigApplied | events_pb2.ApplyRequested
    workload: str = ""  # the envelope's workload key; "" for configuration
    generation: int = 0
    # The object as written (a Job as such, not its derived Workload), `status` dropped and a
    # `generateName` named: what a Submit on Kubernetes writes into the API server.
    document: dict[str, Any] = msgspec.field(default_factory=dict)


def fresh_submission() -> str:
    """A submission id no other Submit call has, in any gateway process (before or after)."""
    return f"{_prefix}.{next(_SUBMISSIONS)}"


def plan_submit(
    manifest: str,
    *,
    cluster: str,
    submission: str = "",
    validation: Validation = "strict",
    warnings: list[FieldError] | None = None,
) -> list[PlannedEvent]:
    """Return the events submitting `manifest` to `cluster` publishes, in document order.

    `submission` identifies this Submit call (its idempotency key): the same key gives the same
    event ids and generated names; "" draws a fresh one. `validation` is kubectl's: unknown
    fields are refused ("strict"), reported in `warnings` ("warn") or dropped ("ignore").
    Raises InvalidManifestError, naming every problem, when any document is bad or cannot be
    submitted: then nothing may be published. `cluster` must be a valid cluster id.
    """
    if len(submission) > MAX_IDEMPOTENCY_KEY:
        problem = f"must be at most {MAX_IDEMPOTENCY_KEY} characters, got {len(submission)}"
        raise InvalidManifestError([f"idempotency_key: {problem}"])
    submission = submission or fresh_submission()
    duplicates: list[FieldError] = []  # keys written twice: strict refuses them, as simulate
    loaded = _load(manifest, duplicates)
    documents = [_as_created(doc, seed=f"{submission}/{i}") for i, doc in enumerate(loaded)]
    skipped: list[str] = []
    objects, errors = decode_documents(
        documents, skipped=skipped, validation=validation, warnings=warnings, source="manifest"
    )
    if validation == "warn" and warnings is not None:
        warnings.extend(duplicates)
    lines = [str(e) for e in [*errors, *(duplicates if validation == "strict" else ())]]
    lines += [f"{note} (cannot be submitted)" for note in skipped]
    lines += [_NOT_SUBMITTABLE for obj in objects if isinstance(obj, KueueConfig)]
    if not lines and not objects:
        lines.append("manifest: (document): has no object to submit")
    if lines:
        raise InvalidManifestError(lines)
    # With no problem, every object document decoded to exactly one object, in order.
    planned: list[PlannedEvent] = []
    problems: list[str] = []
    ids = _Ids(cluster=cluster, submission=submission)
    raws = [doc for doc in documents if isinstance(doc, dict)]
    for obj, raw in zip(objects, raws, strict=True):
        if isinstance(obj, Workload):
            found: PlannedEvent | FieldError = _plan_workload(obj, ids=ids)
        elif isinstance(obj, CLUSTER_TYPES):
            found = _plan_cluster_object(obj, raw, ids=ids)
        elif isinstance(obj, CONFIG_TYPES):
            found = _plan_config(obj, raw, ids=ids)
        else:
            continue
        if isinstance(found, FieldError):
            problems.append(str(found))
        else:
            planned.append(msgspec.structs.replace(found, document=raw))
    if problems:
        raise InvalidManifestError(problems)
    return planned


class _Ids(msgspec.Struct, frozen=True, kw_only=True):
    """What every event id of one Submit derives from."""

    cluster: str
    submission: str

    def of(self, *, event_type: str, kind: str, key: str, version: str, body: str) -> str:
        return event_id(
            cluster=self.cluster,
            submission=self.submission,
            event_type=event_type,
            kind=kind,
            key=key,
            version=version,
            body=body,
        )


def _as_created(doc: Any, *, seed: str) -> Any:
    """`doc` as the API server would create it: without `status`, named when it asks for
    `generateName` (from `seed`). Anything that is not an object is left to the decoder."""
    if not isinstance(doc, dict):
        return doc
    if "status" in doc and not (isinstance(kind := doc.get("kind"), str) and kind in _KEEPS_STATUS):
        doc = {k: v for k, v in doc.items() if k != "status"}
    return with_generated_name(doc, seed=seed)


def envelopes(
    planned: Sequence[PlannedEvent],
    *,
    cluster: str,
    now_ns: int | None = None,
    partition_of: Callable[[str, str], str] | None = None,
) -> list[events_pb2.Envelope]:
    """Return `planned` as envelopes for `cluster`, with their deterministic ids.

    A workload's envelope names the admission partition `partition_of(namespace, queue)` of its
    LocalQueue (docs/events.md, "Partitions"). The trace context is the current span's (the
    gateway opens one continuing the caller's).
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
            event_id=event.event_id,
        )
        if partition_of is not None and isinstance(event.payload, events_pb2.WorkloadSubmitted):
            namespace = event.workload.partition("/")[0]
            env.partition = partition_of(namespace, event.payload.queue_name)
        out.append(env)
    return out


def oversized(envs: Sequence[events_pb2.Envelope], *, max_event_bytes: int) -> list[str]:
    """Return one "manifest too large" line per envelope over the bus's size limit."""
    lines = []
    for env in envs:
        size = env.ByteSize()  # its encoded size, without encoding it before the publish does
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


def event_id(
    *,
    cluster: str,
    submission: str,
    event_type: str,
    kind: str,
    key: str,
    version: str,
    body: str,
) -> str:
    """The id of submitting object `kind`/`key` at `version` (uid/generation) with `body`, in
    the Submit call `submission`.

    A retried call (same submission) gets the same id for the same content; another call, or
    any change in content, generation or uid, gives a new one.
    """
    digest = hashlib.sha256(body.encode()).hexdigest()
    name = f"{cluster}/{submission}/{event_type}/{kind}/{key}/{version}/{digest}"
    return uuid5_text(SUBMIT_ID_NAMESPACE, name)


def _plan_workload(wl: Workload, *, ids: _Ids) -> PlannedEvent:
    payload = workload_submitted(wl)
    body = payload.manifest_json  # the id's content: the Workload as written, canonical JSON
    version = f"{wl.meta.uid}/{wl.meta.generation}"
    key = str(wl.key)
    return PlannedEvent(
        kind="Workload",
        key=key,
        event_id=ids.of(
            event_type="workload.submitted", kind="Workload", key=key, version=version, body=body
        ),
        payload_field="submitted",
        payload=payload,
        workload=key,
        generation=wl.meta.generation,
    )


def _plan_config(obj: ConfigObject, raw: dict[str, Any], *, ids: _Ids) -> PlannedEvent | FieldError:
    kind = type(obj).__name__
    meta = obj.meta
    key = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
    try:
        payload = config_applied(kind, key, raw)
    except (TypeError, ValueError) as exc:
        return FieldError(f"{kind}/{key}", "(document)", f"cannot be written as JSON: {exc}")
    return _planned_object(
        kind,
        key,
        obj.meta,
        payload.manifest_json,
        ids=ids,
        event_type="config.applied",
        payload=payload,
    )


def _planned_object(
    kind: str,
    key: str,
    meta: ObjectMeta,
    body: str,
    *,
    ids: _Ids,
    event_type: str,
    payload: events_pb2.ConfigApplied | events_pb2.ApplyRequested,
) -> PlannedEvent:
    """The event for one object that is not a workload, its id fixed by kind, key and body."""
    version = f"{meta.uid}/{meta.generation}"
    return PlannedEvent(
        kind=kind,
        key=key,
        event_id=ids.of(event_type=event_type, kind=kind, key=key, version=version, body=body),
        payload_field="config_applied" if event_type == "config.applied" else "apply_requested",
        payload=payload,
    )


def _plan_cluster_object(
    obj: ClusterObject, raw: dict[str, Any], *, ids: _Ids
) -> PlannedEvent | FieldError:
    """A Node, Pod, scheduling.k8s.io Workload or PodGroup: `cmd.apply` to the cluster's binder,
    which writes it into the cluster as `kubectl apply` would (docs/services.md)."""
    kind = CLUSTER_KINDS[type(obj)]
    meta = obj.meta
    key = f"{meta.namespace or 'default'}/{meta.name}" if kind != "Node" else meta.name
    try:
        body = manifest_json(raw)
    except (TypeError, ValueError) as exc:
        return FieldError(f"{kind}/{key}", "(document)", f"cannot be written as JSON: {exc}")
    payload = events_pb2.ApplyRequested(manifests_json=[body])
    return _planned_object(kind, key, meta, body, ids=ids, event_type="cmd.apply", payload=payload)


# How SubmitResponse names each cluster kind: the scheduling.k8s.io Workload is told apart
# from Kueue's by its group, as the simulated cluster stores it.
CLUSTER_KINDS: Final[dict[type, str]] = {
    **{t: t.__name__ for t in CLUSTER_TYPES},
    SchedulingWorkload: "Workload.scheduling.k8s.io",
    SchedulingPodGroup: "PodGroup.scheduling.k8s.io",
}


def _load(manifest: str, duplicates: list[FieldError]) -> Iterator[Any]:
    """The manifest's object documents, `kind: List` unpacked (each key written twice told in
    `duplicates`); raises InvalidManifestError."""
    documents, problem = load_yaml(manifest, source="manifest", duplicates=duplicates)
    if problem is not None:
        raise InvalidManifestError([str(problem)])
    return _flatten(documents)


def _flatten(documents: list[Any]) -> Iterator[Any]:
    """Yield the documents in the order muster.api decodes them (Lists unpacked, empty left
    out); what is not an object stays, for the decoder to name."""
    for doc in documents:
        if (
            isinstance(doc, dict)
            and doc.get("kind") == "List"
            and isinstance(doc.get("items"), list)
        ):
            yield from _flatten(doc["items"])
        elif doc is not None:
            yield doc
