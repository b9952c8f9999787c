"""Api objects to event payloads and back, once each (docs/events.md is the wire contract).

Every service that writes a `workload.submitted` or a `config.applied` (or a workload's manifest
into an `admitted`'s copy) builds its payload here, and every service that reads a manifest out
of a payload (an applied configuration object, a submitted or admitted workload, a `cmd.apply`
object) decodes it here, so a manifest has one JSON encoding and one reading, with one error
naming the object when it is not one.

The encoding is JSON with sorted keys and no spaces: the same document always gives the same
bytes, whoever sends it. Readers take any JSON (older events carry other spacing and key
orders), so the subjects stay compatible with what was stored before.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from muster.api import decode_documents, quantities_to_strings, workload_to_kueue
from muster.api.convert import (
    pod_set_of,
)
from muster.api.decode import decode_workload_json
from muster.api.errors import ObjectErrors
from muster.api.model import ApiObject, PodSet, Workload
from muster.api.raw import RawPodSet, RawWorkload
from muster.contracts.v1 import events_pb2

log = logging.getLogger(__name__)

__all__ = [
    "MANIFEST_COPY_LIMIT",
    "KeptManifest",
    "PayloadError",
    "PodSetsByTemplate",
    "applied_document",
    "applied_object",
    "check_transitioned_s",
    "config_applied",
    "decode_manifest",
    "manifest_document",
    "manifest_json",
    "manifest_workload",
    "workload_manifest",
    "workload_submitted",
    "written_workload",
]


# A manifest up to this many characters is copied into its workload's `admitted` (admission),
# so that a binder need not have kept its `submitted` (which a long wait may outlive in the
# stream); a larger one would push `admitted` towards the bus's limit on one event, and is kept
# by the binders in MUSTER_MANIFESTS instead (binder/manifests.py).
MANIFEST_COPY_LIMIT: Final = 256 * 1024


class PayloadError(ValueError):
    """A payload's manifest is not the object it should be; str() names the object."""


def _scalar(value: object) -> object:
    # YAML reads dates as dates; the API server writes them as RFC 3339 strings.
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat().replace("+00:00", "Z")
    raise TypeError(f"{type(value).__name__} is not JSON")


# What `json.dumps` would build anew at every call (a Submit's hot path): encoding keeps no
# state in the encoder, so one serves every thread, to the same bytes.
_MANIFEST_ENCODER: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_scalar)


def manifest_json(doc: Mapping[str, Any]) -> str:
    """`doc` as a payload carries it; TypeError (or ValueError) when it is not JSON."""
    return _MANIFEST_ENCODER.encode(doc)


def workload_manifest(wl: Workload) -> str:
    """`wl` as a payload's manifest carries it (Kueue's spelling, canonical JSON)."""
    return manifest_json(workload_to_kueue(wl))


def workload_submitted(wl: Workload, *, owner_manifest: str = "") -> events_pb2.WorkloadSubmitted:
    """`workload.submitted`'s payload for `wl`; `owner_manifest` is the Job it stands for
    (as its owner wrote it), when it stands for one."""
    payload = events_pb2.WorkloadSubmitted(
        manifest_json=workload_manifest(wl),
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
        owner_manifest_json=owner_manifest,
    )
    refs = wl.meta.owner_references
    # The controller, as Kubernetes means "the owner"; a lone non-controller ref as written.
    ref = next((r for r in refs if r.controller), refs[0] if refs else None)
    if ref is not None:
        payload.owner.CopyFrom(
            events_pb2.OwnerRef(
                api_version=ref.api_version, kind=ref.kind, name=ref.name, uid=ref.uid
            )
        )
    return payload


def config_applied(
    kind: str, name: str, doc: Mapping[str, Any], *, submitter: events_pb2.Submitter | None = None
) -> events_pb2.ConfigApplied:
    """`config.applied`'s payload for configuration object `kind`/`name` written as `doc`;
    TypeError when `doc` is not JSON."""
    return events_pb2.ConfigApplied(
        kind=kind, name=name, manifest_json=manifest_json(doc), submitter=submitter
    )


def _parsed(text: str, *, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, an int too long
        raise PayloadError(f"{what}: manifest is not JSON ({type(exc).__name__}: {exc})") from exc


def manifest_document(text: str, *, what: str) -> dict[str, Any]:
    """The JSON object `text` (a payload's manifest) holds; PayloadError naming `what`."""
    doc = _parsed(text, what=what)
    if not isinstance(doc, dict):
        raise PayloadError(f"{what}: manifest is a JSON {type(doc).__name__}, not an object")
    return doc


def applied_document(payload: events_pb2.ConfigApplied) -> dict[str, Any]:
    """The document a `config.applied` carries; PayloadError when it is not a JSON object."""
    return manifest_document(payload.manifest_json, what=f"{payload.kind}/{payload.name}")


def applied_object(payload: events_pb2.ConfigApplied) -> ApiObject:
    """The one api object a `config.applied` carries, validated as `muster apply` would;
    PayloadError naming it and the field when it is not."""
    return decode_manifest(payload.manifest_json, what=f"{payload.kind}/{payload.name}")


def decode_manifest(text: str, *, what: str) -> ApiObject:
    """The one api object `text` (a payload's manifest) holds; PayloadError naming `what`.

    A Workload's podset whose template was read before (another workload of the same Job) is
    not read again (`PodSetsByTemplate`); the rest is read and checked in full, so a manifest
    decodes, or fails naming the object and field, as it does alone. A Kueue Workload without
    a problem (every `submitted` the gateway or the watcher wrote) is read in one typed pass
    (`decode_workload_json`, the same checks); any other text is read through a dict."""
    found = _typed_workload(text, checked=True)
    if found is not None:
        return found
    doc = _parsed(text, what=what)
    objects, errors = decode_documents(
        [doc], source=what, stored=True, pod_sets=functools.partial(_POD_SETS.of, text)
    )
    if errors:
        raise PayloadError("; ".join(str(e) for e in errors))
    if len(objects) != 1:
        raise PayloadError(f"{what}: expected one object, got {len(objects)}")
    return objects[0]


def manifest_workload(text: str, *, what: str) -> Workload:
    """The Workload a `submitted` or an `admitted` carries; PayloadError naming `what` when the
    manifest is not one valid Workload."""
    obj = decode_manifest(text, what=what)
    if not isinstance(obj, Workload):
        raise PayloadError(f"{what}: manifest is a {type(obj).__name__}, not a Workload")
    return obj


def check_transitioned_s(env: events_pb2.Envelope) -> float:
    """When the check of `admission_check` event `env` entered its state, in seconds: the
    lastTransitionTime it carries (Kueue counts a Retry's requeueAfterSeconds from it), else
    (admission's own answers, events stored before the field) the event's time."""
    nanos = env.admission_check.transitioned_unix_nano
    return (nanos if nanos > 0 else env.time_unix_nano) / 1e9


def written_workload(text: str, *, what: str) -> Workload:
    """The Workload of a manifest `workload_manifest` wrote, as `manifest_workload` reads it,
    in one pass: what the binder and gang-permit read of a `submitted` or an `admitted`.

    They act on admitted workloads only, and admission admits none that `manifest_workload`
    refuses: the names, labels and fields it checks are not checked again here. A manifest
    not of that shape (another apiVersion or kind, no name, a problem) is read by
    `manifest_workload`, so it decodes the same or fails with the same PayloadError. A
    podset's template read before (another workload of the same Job) is not read again
    (`PodSetsByTemplate`).
    """
    found = _typed_workload(text, checked=False)
    return found if found is not None else manifest_workload(text, what=what)


def _typed_workload(text: str, *, checked: bool) -> Workload | None:
    return decode_workload_json(
        text, pod_sets=functools.partial(_POD_SETS.of, text), checked=checked
    )


class _WrittenTemplate(msgspec.Struct):
    template: msgspec.Raw = msgspec.Raw()


class _WrittenTemplates(msgspec.Struct, rename="camel"):
    pod_sets: list[_WrittenTemplate] = []


class _WrittenSpec(msgspec.Struct):
    spec: _WrittenTemplates = msgspec.field(default_factory=_WrittenTemplates)


# Each podset's template as the manifest spells it: the key of what it reads to.
_TEMPLATES_JSON: Final = msgspec.json.Decoder(_WrittenSpec)


class PodSetsByTemplate:
    """Podsets read from templates read before: a podset is a function of its template's JSON
    bytes (and its name and counts, which are not read from them), and the workloads of one
    Job, JobSet or bench share one template; reading it is most of a manifest's decode.

    Kept: up to `entries` templates of up to `max_bytes` each that read without a problem (one
    that does not is read again each time, to name its field); the oldest makes room.
    """

    __slots__ = ("_entries", "_max_bytes", "_read")

    def __init__(self, *, entries: int = 256, max_bytes: int = 8 * 1024) -> None:
        self._entries = entries
        self._max_bytes = max_bytes
        self._read: dict[bytes, PodSet] = {}

    def of(self, text: str, raw: RawWorkload, errs: ObjectErrors) -> tuple[PodSet, ...] | None:
        """`raw`'s podsets (read from `text`, its manifest) as `workload_from_raw` reads them,
        problems added to `errs`; None when `text`'s templates cannot be told apart."""
        try:
            written = _TEMPLATES_JSON.decode(text).spec.pod_sets
        except msgspec.DecodeError:  # RawWorkload read it: not expected, read as it does
            return None
        if len(written) != len(raw.spec.pod_sets):
            return None
        return tuple(
            self._pod_set(bytes(w.template), ps, errs, index=p)
            for p, (w, ps) in enumerate(zip(written, raw.spec.pod_sets, strict=True))
        )

    def _pod_set(self, key: bytes, raw: RawPodSet, errs: ObjectErrors, *, index: int) -> PodSet:
        known = self._read.get(key)
        if known is None:
            problems = len(errs.errors)
            known = pod_set_of(raw, errs, index=index)
            if len(errs.errors) == problems and key and len(key) <= self._max_bytes:
                if len(self._read) >= self._entries:
                    del self._read[next(iter(self._read))]
                self._read[key] = known
            return known
        if (known.name, known.count, known.min_count) == (raw.name, raw.count, raw.min_count):
            return known
        return msgspec.structs.replace(
            known, name=raw.name, count=raw.count, min_count=raw.min_count
        )


_POD_SETS: Final = PodSetsByTemplate()


class KeptManifest:
    """A `submitted`'s manifest as published, read with `written_workload` the first time its
    Workload is asked for, and only then.

    The binder and gang-permit follow every workload submitted, on every cluster (MultiKueue
    may dispatch one here), to start or place those admitted to their own: the others
    (another cluster's, or deleted while pending) are never decoded there, and while a
    workload waits the JSON held is about a third of its decoded Workload's size.
    """

    __slots__ = ("_text", "_what", "_workload")

    def __init__(self, text: str, *, what: str) -> None:
        self._text: str | None = text
        self._what = what  # the workload's key, for the warning
        self._workload: Workload | None = None

    def workload(self) -> Workload | None:
        """The Workload, decoded once; None when it does not decode (logged then, once)."""
        if self._text is not None:
            text, self._text = self._text, None
            try:
                self._workload = written_workload(text, what=self._what)
            except PayloadError as err:
                log.warning(
                    "undecodable workload manifest: %s", err, extra={"workload": self._what}
                )
        return self._workload
