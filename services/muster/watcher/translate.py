"""What the watcher publishes about one changed cluster object: events as data, no I/O.

Config objects and Namespaces become `config.applied`/`config.deleted`; a queued Job or JobSet
or a Kueue Workload becomes `workload.submitted`/`workload.deleted`; what a check controller
wrote into a Kueue Workload's `status.admissionChecks` becomes `workload.admission_check`.
Each `Outgoing` carries an `id_key`
that is the same whenever the same fact is seen again, so the service derives a deterministic
event id from it and a republished fact is dropped by JetStream's dedupe.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec

from muster.api import check_states, decode_documents
from muster.api.job import QUEUE_NAME_KEY
from muster.api.jobset import INTEGRATION_KINDS, JOBSET_API_VERSION, JOBSET_KIND, pods_ready
from muster.api.model import Workload
from muster.api.raw import RawJobSet
from muster.cluster.kube import jobs, jobsets
from muster.contracts.v1 import events_pb2
from muster.payloads import config_applied as config_applied_payload
from muster.payloads import manifest_json, workload_submitted

KUEUE_GROUP = "kueue.x-k8s.io"
# Kueue configuration kinds whose changes admission needs; plus Namespaces and PriorityClasses.
KUEUE_CONFIG_KINDS = frozenset(
    {
        "ResourceFlavor",
        "ClusterQueue",
        "Cohort",
        "LocalQueue",
        "WorkloadPriorityClass",
        "AdmissionCheck",
        "Topology",
        "MultiKueueConfig",
        "MultiKueueCluster",
    }
)
CORE_CONFIG_KINDS = {
    "Namespace": "v1",
    "PriorityClass": "scheduling.k8s.io/v1",
    "LimitRange": "v1",  # defaults and bounds of a namespace's requests (core.limit_ranges)
    "RuntimeClass": "node.k8s.io/v1",  # a pod's overhead (core.pod_overhead)
}
# Past this, a time in Unix nanoseconds does not fit the int64 an event carries (year 2262).
_LATEST_UNIX_S = (2**63 - 1) // 1_000_000_000


class Outgoing(msgspec.Struct, frozen=True, kw_only=True):
    """One event to publish: its payload (by Envelope field), workload and dedupe key."""

    field: str  # Envelope payload field: "submitted", "config_applied", ...
    payload: Any  # the protobuf payload message
    id_key: str  # same fact, same key: the service derives the event id from it
    workload: str = ""
    generation: int = 0
    # Where its admission partition comes from: its pods' annotation, or its LocalQueue
    # ("<namespace>/<name>") looked up in MUSTER_PARTITIONS (docs/events.md, "Partitions").
    partition: str = ""
    local_queue: str = ""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _group(obj: Mapping[str, Any]) -> str:
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or "/" not in api_version:
        return ""
    return api_version.split("/", 1)[0]


def object_name(obj: Mapping[str, Any]) -> str:
    """Return "<name>" or "<namespace>/<name>", as ConfigApplied.name spells it."""
    meta = _meta(obj)
    name = str(meta.get("name", ""))
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def is_config(obj: Mapping[str, Any]) -> bool:
    """Whether `obj` is configuration admission reads (Kueue config kinds, Namespaces, ...)."""
    kind = obj.get("kind")
    if kind in KUEUE_CONFIG_KINDS:
        return _group(obj) == KUEUE_GROUP
    return kind in CORE_CONFIG_KINDS and obj.get("apiVersion") == CORE_CONFIG_KINDS[str(kind)]


def is_job(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Job" and obj.get("apiVersion") == "batch/v1"


def is_jobset(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == JOBSET_KIND and obj.get("apiVersion") == JOBSET_API_VERSION


def is_owner(obj: Mapping[str, Any]) -> bool:
    """Whether `obj` is of a kind Kueue's job integrations make a Workload for (Job, JobSet)."""
    return is_job(obj) or is_jobset(obj)


def _controller_kind(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (apiVersion, kind) of `obj`'s controller, if it has one."""
    for ref in _meta(obj).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return (str(ref.get("apiVersion")), str(ref.get("kind")))
    return None


def is_kueue_workload(obj: Mapping[str, Any]) -> bool:
    """Whether `obj` is a Kueue Workload (of its own or of a Job): it has check states."""
    return obj.get("kind") == "Workload" and _group(obj) == KUEUE_GROUP


def is_workload_source(obj: Mapping[str, Any]) -> bool:
    """Whether `obj` is a Kueue Workload of its own, or a batch/v1 Job or a JobSet that names
    a queue.

    The Kueue Workload of a Job or JobSet (its controller) is not: the owner is the source,
    and muster itself created that Workload (on Kubernetes) to carry the status. Nor is a
    JobSet's child Job: its JobSet was admitted whole (Kueue's Job webhook leaves a Job with
    a managed parent alone).
    """
    kind = obj.get("kind")
    if kind == "Workload":
        return _group(obj) == KUEUE_GROUP and _controller_kind(obj) not in INTEGRATION_KINDS
    if not is_owner(obj) or _controller_kind(obj) in INTEGRATION_KINDS:
        return False
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return bool(labels.get(QUEUE_NAME_KEY) or annotations.get(QUEUE_NAME_KEY))


def _content_hash(obj: Mapping[str, Any]) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Written by the API server or by muster itself: no change to the configuration. A status write
# of muster's (queue counts) must not come back as a config event, or each would cause another.
_SERVER_METADATA = ("resourceVersion", "managedFields", "generation")


def as_configured(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` without its status and the metadata the server keeps up to date."""
    out = {k: v for k, v in obj.items() if k != "status"}
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = {k: v for k, v in out["metadata"].items() if k not in _SERVER_METADATA}
    return out


def config_applied(obj: Mapping[str, Any]) -> Outgoing:
    """`config.applied` for `obj` as configured (`as_configured`); the same configuration
    always gets the same id key."""
    kind, name = str(obj.get("kind")), object_name(obj)
    configured = as_configured(obj)
    return Outgoing(
        field="config_applied",
        payload=config_applied_payload(kind, name, configured),
        id_key=f"config/{kind}/{name}/{_content_hash(configured)}",
    )


def config_deleted(obj: Mapping[str, Any]) -> Outgoing:
    kind, name = str(obj.get("kind")), object_name(obj)
    meta = _meta(obj)
    life = f"{meta.get('uid', '')}/{meta.get('creationTimestamp', '')}"
    return Outgoing(
        field="config_deleted",
        payload=events_pb2.ConfigDeleted(kind=kind, name=name),
        id_key=f"config-deleted/{kind}/{name}/{life}",
    )


def workload_of(obj: Mapping[str, Any]) -> tuple[Workload | None, list[str]]:
    """The Workload `obj` stands for (a Kueue Workload, or the one Kueue derives from a Job or
    JobSet as its owner wrote it: what the binder changed to start it does not count).

    Returns (None, problems) when the object does not decode; each problem names a field.
    """
    # A cluster's object: one an earlier release took in is still read, to its end.
    objects, errors = decode_documents([dict(as_written(obj))], stored=True)
    found = [o for o in objects if isinstance(o, Workload)]
    if errors or not found:
        return None, [str(e) for e in errors] or [f"{object_name(obj)}: not a workload"]
    return found[0], []


def as_written(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """`obj` as its owner wrote it: a Job's or JobSet's pod templates as they were before the
    binder started it (`jobs.as_written`, `jobsets.as_written`); any other object as it is."""
    if is_job(obj):
        return jobs.as_written(obj)
    if is_jobset(obj):
        return jobsets.as_written(obj)
    return obj


def incarnation(wl: Workload) -> str:
    """Return "<uid>/<generation>/<creationTimestamp>": which life of the object this is.

    The creation time tells apart a Job deleted and created again under the same name, whose
    uid (derived from the name when the cluster sets none) and generation may repeat. A Job's
    Workload carries no generation (only its name, uid and spec come from the Job), so muster's
    own writes to a Job (unsuspend, suspend, the flavor's node selector) never resubmit it;
    nor do status writes to a Kueue Workload (they leave its generation alone).
    """
    return f"{wl.meta.uid}/{wl.meta.generation}/{wl.meta.creation_timestamp or ''}"


# What a copy of a Job in a worker cluster needs of its metadata (MultiKueue): the rest is the
# manager's API server's (resourceVersion, managedFields, ...), or kubectl's bookkeeping.
_OWNER_META = ("name", "namespace", "uid", "labels", "annotations")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def owner_manifest(job: Mapping[str, Any]) -> str:
    """A Job (or JobSet) as its owner wrote it, for `WorkloadSubmitted.owner_manifest_json`:
    what the binder changed to start it put back, without status or server-kept metadata."""
    written = as_written(job)
    meta = {k: v for k, v in _meta(written).items() if k in _OWNER_META}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != _LAST_APPLIED}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    out = {
        "apiVersion": written.get("apiVersion"),
        "kind": written.get("kind"),
        "metadata": meta,
        "spec": written.get("spec") or {},
    }
    return manifest_json(out)


def submitted(wl: Workload, *, owner: str = "") -> Outgoing:
    """`workload.submitted` for `wl`, once per incarnation (uid, generation, creation);
    `owner` is the Job it stands for (`owner_manifest`), when it stands for one."""
    payload = workload_submitted(wl, owner_manifest=owner)
    return Outgoing(
        field="submitted",
        payload=payload,
        id_key=f"submitted/{incarnation(wl)}",
        workload=wl.key,
        generation=wl.meta.generation,
        local_queue=local_queue_of(wl),
    )


def local_queue_of(wl: Workload) -> str:
    return f"{wl.meta.namespace}/{wl.queue_name or 'default'}"


def job_local_queue(job: Mapping[str, Any]) -> str:
    """The LocalQueue a Job names (its label, else annotation), as `local_queue_of` spells it;
    a MultiKueue copy keeps its origin's."""
    meta = _meta(job)
    queue = (meta.get("labels") or {}).get(QUEUE_NAME_KEY) or (meta.get("annotations") or {}).get(
        QUEUE_NAME_KEY
    )
    return f"{meta.get('namespace', '')}/{queue or 'default'}"


def deleted(wl: Workload) -> Outgoing:
    return deleted_incarnation(wl.key, incarnation(wl), local_queue=local_queue_of(wl))


def deleted_incarnation(workload: str, mark: str, *, local_queue: str = "") -> Outgoing:
    """`deleted` of `workload`'s life `mark` (`incarnation`), with the id its watched deletion
    has: also from the mark alone, when the object went unseen (its LocalQueue unknown then:
    an event of no partition, which every admission replica reads)."""
    parts = mark.rsplit("/", 2)
    generation = parts[1] if len(parts) == 3 and parts[1].isdigit() else "0"
    return Outgoing(
        field="deleted",
        payload=events_pb2.WorkloadDeleted(),
        id_key=f"deleted/{mark}",
        workload=workload,
        generation=int(generation),
        local_queue=local_queue,
    )


def same_life(mark: str, other: str) -> bool:
    """Whether incarnations `mark` and `other` are one object's life (its uid and creation
    time): a new generation of a Kueue Workload is that object changed, not a new one."""
    return _life(mark) == _life(other)


def _life(mark: str) -> tuple[str, str]:
    parts = mark.rsplit("/", 2)
    return (parts[0], parts[2]) if len(parts) == 3 else (mark, "")


# An owner's conditions that say it is over, success first, and the message when none is set.
_ENDS = {
    "Job": (("Complete", "Job finished successfully"), ("Failed", "Job failed")),
    JOBSET_KIND: (("Completed", "JobSet completed"), ("Failed", "JobSet failed")),
}


def end_conditions(kind: str) -> tuple[str, ...]:
    """The condition types that say an owner of `kind` is over: a JobSet's Completed or
    Failed, a Job's (any other kind's) Complete or Failed."""
    return tuple(condition for condition, _ in _ENDS.get(kind, _ENDS["Job"]))


def job_finished(job: Mapping[str, Any], workload: str) -> Outgoing | None:
    """`workload.finished` once a Job's (or JobSet's) controller says it is over (condition
    Complete, or a JobSet's Completed, or Failed), as Kueue's integrations read it; None while
    it runs. The pods do not tell: failed pods are retried, and more pods may follow those
    that succeeded."""
    conditions = (job.get("status") or {}).get("conditions") or []
    done = {
        c.get("type"): c for c in conditions if isinstance(c, Mapping) and c.get("status") == "True"
    }
    ends = _ENDS.get(str(job.get("kind")), _ENDS["Job"])
    found = [(n, c, text) for n, (c, text) in enumerate(ends) if c in done]
    if not found:
        return None
    which, condition, default = found[0]
    succeeded = which == 0
    message = str(done[condition].get("message") or "") or default
    return Outgoing(
        field="finished",
        payload=events_pb2.WorkloadFinished(succeeded=succeeded, message=message),
        id_key=f"finished/job/{_meta(job).get('uid', '')}",
        workload=workload,
        local_queue=job_local_queue(job),
    )


def copy_status(job: Mapping[str, Any], workload: str) -> Outgoing | None:
    """`workload.copy_status`: the status of `workload`'s Job copy here (MultiKueue), for the
    manager's watcher to mirror onto the manager's Job; None while the copy has none. Same
    status, same event id, so a resumed watch repeats nothing."""
    status = job.get("status")
    if not isinstance(status, Mapping) or not status:
        return None
    text = manifest_json(status)
    return Outgoing(
        field="copy_status",
        payload=events_pb2.CopyStatus(status_json=text),
        id_key=f"copy_status/{_meta(job).get('uid', '')}/{copy_status_mark(status)}",
        workload=workload,
        local_queue=job_local_queue(job),
    )


def copy_status_mark(status: Mapping[str, Any]) -> str:
    """What `Sent.copy_status` keeps of a copy's status published: a digest of it."""
    return _content_hash(status)


class CheckAnswer(NamedTuple):
    """A check entry that changed: its name, its mark (state, when it was set, retries), and
    the event telling admission, or None when there is nothing to tell."""

    name: str
    mark: str
    event: Outgoing | None


def jobset_ready(obj: Mapping[str, Any]) -> bool | None:
    """Whether JobSet `obj`'s pods are ready as Kueue's JobSet integration tells it, from its
    `status.replicatedJobsStatus` (`muster.api.jobset.pods_ready`); None for another kind, or
    a JobSet whose counts do not decode (its pods then tell, as any workload's). Strictly: the
    API server keeps those counts as integers only, so `"ready": "2"` is no count."""
    if not is_jobset(obj):
        return None
    try:
        return pods_ready(msgspec.convert(obj, RawJobSet))
    except msgspec.ValidationError:
        return None


def spec_active(obj: Mapping[str, Any]) -> bool:
    """A Kueue Workload's spec.active (absent: true)."""
    spec = obj.get("spec")
    return not isinstance(spec, dict) or spec.get("active", True) is not False


def active_change(obj: Mapping[str, Any], seen: bool | None) -> Outgoing | None:
    """`workload.active_changed` when Kueue Workload `obj`'s spec.active differs from `seen`
    (what was last seen; None: nothing yet). A Workload first seen tells nothing of its own:
    its `submitted` carries spec.active; a Job's Workload is created active, so a first
    sight inactive is news (stopped before the watcher saw it)."""
    active = spec_active(obj)
    if seen is None:
        seen = True if not is_workload_source(obj) else active
    if active == seen:
        return None
    meta = _meta(obj)
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    return Outgoing(
        field="active_changed",
        payload=events_pb2.WorkloadActiveChanged(active=active),
        id_key=f"active/{meta.get('uid', '')}/{meta.get('generation', 0)}/{active}",
        workload=key,
    )


def reclaimable_mark(wl: Workload) -> str:
    """What `Sent.reclaimable` keeps of `wl`'s reclaimable pods: "main=2,aux=1" ("" none)."""
    return ",".join(f"{p.name}={p.count}" for p in wl.reclaimable_pods if p.count > 0)


def reclaimable_change(obj: Mapping[str, Any], wl: Workload, seen: str) -> Outgoing | None:
    """`workload.reclaimable_pods` when `wl`'s reclaimable pods (a Kueue Workload's
    status.reclaimablePods, a Job's finished pods: `api.job_reclaim`) differ from `seen`, the
    `reclaimable_mark` last told (its `submitted` told the first)."""
    mark = reclaimable_mark(wl)
    if mark == seen:
        return None
    meta = _meta(obj)
    pods = [
        events_pb2.ReclaimablePodCount(pod_set=p.name, count=p.count)
        for p in wl.reclaimable_pods
        if p.count > 0
    ]
    return Outgoing(
        field="reclaimable_pods",
        payload=events_pb2.WorkloadReclaimablePods(pods=pods),
        # The object's version: the same list told again after a change back is news.
        id_key=f"reclaimable/{meta.get('uid', '')}/{meta.get('resourceVersion', '')}/{mark}",
        workload=wl.key,
        local_queue=local_queue_of(wl),
    )


def check_updates(obj: Mapping[str, Any], sent: Mapping[str, str]) -> list[CheckAnswer]:
    """What Kueue Workload `obj`'s check controllers answered since `sent` (check name → the
    mark last seen): each changed entry, with `workload.admission_check` unless the check is
    still Pending (muster's own entry, or its reset after an eviction, tells admission nothing).
    """
    meta = _meta(obj)
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    spec = obj.get("spec")
    queue = spec.get("queueName") if isinstance(spec, Mapping) else None
    local_queue = f"{meta.get('namespace', '')}/{queue or 'default'}"
    out: list[CheckAnswer] = []
    for entry in check_states.entries_of(obj.get("status")):
        name, state = str(entry["name"]), str(entry.get("state", ""))
        mark = f"{state}/{entry.get('lastTransitionTime', '')}/{entry.get('retryCount', 0)}"
        before = sent.get(name)
        if before == mark:
            continue
        was_pending = before is None or before.startswith(f"{check_states.PENDING}/")
        if state == check_states.PENDING and was_pending:
            out.append(CheckAnswer(name, mark, None))
            continue
        payload = events_pb2.AdmissionCheckUpdated(
            check=name,
            state=state,
            message=str(entry.get("message") or ""),
            requeue_after_seconds=_requeue_after(entry.get("requeueAfterSeconds")),
            transitioned_unix_nano=_unix_nano(entry.get("lastTransitionTime")),
        )
        event = Outgoing(
            field="admission_check",
            payload=payload,
            id_key=f"check/{meta.get('uid', '')}/{name}/{mark}",
            workload=key,
            local_queue=local_queue,
        )
        out.append(CheckAnswer(name, mark, event))
    return out


def _unix_nano(value: object) -> int:
    """A check entry's lastTransitionTime as the event carries it: Unix nanoseconds, 0 when
    unreadable or not representable (admission then counts from the event's time)."""
    seconds = check_states.parse_time(value)
    if seconds is None or not 0 < seconds < _LATEST_UNIX_S:
        return 0
    return int(seconds) * 1_000_000_000


def _requeue_after(value: object) -> int:
    """A check's requeueAfterSeconds as an int32 the event can carry (anything else: 0)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(0, min(value, 2**31 - 1))
