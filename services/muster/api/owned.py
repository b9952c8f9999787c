"""What Kueue's job integrations share when they make a Workload for the object that owns it
(a batch/v1 Job, a JobSet): its name, metadata and owner reference, its queue and priority.

Kueue's jobframework (ff69552e79, `GetWorkloadNameForOwnerWithGVK`, `QueueNameForObject`,
`ExtractPriority`) applies these rules to every integration; `muster.api.job` and
`muster.api.jobset` call them, each with its own kind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from muster.api.convert import (
    POD_PRIORITY_CLASS,
    WORKLOAD_PRIORITY_CLASS,
    meta_from_raw,
    stable_uid,
)
from muster.api.errors import ObjectErrors, key_path
from muster.api.model import ObjectMeta, OwnerReference, PriorityClassSource
from muster.api.names import LABEL_VALUE_MAX, check_reference
from muster.api.raw import RawMeta

QUEUE_NAME_KEY = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
# Each pod of the workload is labelled with its Workload's name (`muster.dev/workload`), and a
# label value has at most 63 characters: a longer name made an owner the API server would not
# start.
_MAX_NAME = LABEL_VALUE_MAX


def workload_name_for_owner(api_version: str, kind: str, name: str, uid: str) -> str:
    """Return `<kind, lower case>-<name>-<hash>`, the hash being 5 hex digits of sha256 over
    the owner's api version, kind, name and uid.

    Stable for the same owner; two owners with the same name but different uids (or kinds) get
    different names. Long names are cut so the result is at most 63 characters: a label value,
    as each pod carries it (Differs from Kueue, which cuts at 253 unless ShortWorkloadNames is
    on, because it labels no pod so).
    """
    digest = hashlib.sha256(f"{api_version}/{kind}/{name}/{uid}".encode()).hexdigest()[:5]
    prefix = f"{kind.lower()}-{name}"[: _MAX_NAME - 6].rstrip("-.")
    return f"{prefix}-{digest}"


def owned_workload_meta(raw: RawMeta, *, namespace: str, api_version: str, kind: str) -> ObjectMeta:
    """The metadata of the Workload that owner `raw` (of `api_version`/`kind`) gets: its name
    (`workload_name_for_owner`), the owner's labels, annotations and creation time, and a
    controller reference to the owner."""
    uid = raw.uid or stable_uid(kind, namespace, raw.name)
    name = workload_name_for_owner(api_version, kind, raw.name, uid)
    base = meta_from_raw(raw, namespace=namespace)
    return ObjectMeta(
        name=name,
        namespace=namespace,
        uid=stable_uid("Workload", namespace, name),
        labels=base.labels,
        annotations=base.annotations,
        creation_timestamp=base.creation_timestamp,
        owner_references=(
            OwnerReference(
                api_version=api_version, kind=kind, name=raw.name, uid=uid, controller=True
            ),
        ),
    )


def owner_queue_name(raw: RawMeta, errs: ObjectErrors) -> str:
    """The LocalQueue the owner names: label `kueue.x-k8s.io/queue-name`, else the annotation
    of that name, else "" (the namespace's LocalQueue "default"). The queue and priority class
    labels must name objects (Kueue's webhooks): a bad one goes to `errs`."""
    for where, keys in (("metadata.labels", raw.labels), ("metadata.annotations", raw.annotations)):
        for key in (QUEUE_NAME_KEY, PRIORITY_CLASS_LABEL):
            check_reference(errs, keys.get(key), key_path(where, key))
    return raw.labels.get(QUEUE_NAME_KEY) or raw.annotations.get(QUEUE_NAME_KEY, "")


def owner_priority_class(
    raw: RawMeta, pod_classes: Iterable[str]
) -> tuple[str | None, PriorityClassSource | None]:
    """The owner's priority: label `kueue.x-k8s.io/priority-class` names a
    WorkloadPriorityClass, else the first pod template's `priorityClassName` that is set (in
    podset order) names a scheduling.k8s.io PriorityClass."""
    wpc = raw.labels.get(PRIORITY_CLASS_LABEL)
    if wpc:
        return wpc, WORKLOAD_PRIORITY_CLASS
    for pod_class in pod_classes:
        if pod_class:
            return pod_class, POD_PRIORITY_CLASS
    return None, None
