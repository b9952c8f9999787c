"""The podSetUpdates of a Kueue Workload's Ready admission checks, read as hostile input.

A controller answering Ready may list `podSetUpdates` in its entry of the Workload's
`status.admissionChecks` (labels, annotations, nodeSelector, tolerations per podset): the
ProvisioningRequest check names the request the pods are to consume this way. Kueue's job
framework puts them on the pods as the workload starts. Both cluster backends
(`muster.cluster.pod_set_updates`) and the simulator's pods (`muster.sim.placement`) read them
here; an entry or field of the wrong shape is left out, never raised.

What conflicts is Kueue's (pkg/podset `Merge`, as its job reconciler starts a job): a label,
annotation or nodeSelector key the pods have with another value. Tolerations never conflict:
one already there (Kueue's `tolerations.Equal`: key, operator, value and effect, an empty
operator read as Equal) is not added twice, any other is added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from muster.api.job import POD_SET_NAME
from muster.api.model import Frozen, Pod, Toleration
from muster.api.wellknown import POD_SET_ANNOTATION, WORKLOAD_LABEL

_TOLERATION_FIELDS = ("key", "operator", "value", "effect")


class PodSetUpdate(Frozen, frozen=True, kw_only=True):
    """What one Ready check (`check`, its entry's name) asks to be set on the pods of podset
    `name`."""

    name: str
    check: str = ""
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)
    node_selector: Mapping[str, str] = msgspec.field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()


def ready_updates(entries: object) -> list[PodSetUpdate]:
    """The podSetUpdates of the Ready entries among `entries` (a Workload's
    `status.admissionChecks`, as stored), in their order."""
    return [
        PodSetUpdate(
            name=str(update.get("name") or ""),
            check=str(entry.get("name") or ""),
            labels=_string_map(update.get("labels")),
            annotations=_string_map(update.get("annotations")),
            node_selector=_string_map(update.get("nodeSelector")),
            tolerations=tuple(
                t for t in map(_toleration, _dicts(update.get("tolerations"))) if t is not None
            ),
        )
        for entry in _dicts(entries)
        if entry.get("state") == "Ready"
        for update in _dicts(entry.get("podSetUpdates"))
    ]


def ready_updates_of(workload: Mapping[str, Any] | None) -> list[PodSetUpdate]:
    """`ready_updates` of Kueue Workload `workload` as stored (None: no Workload)."""
    status = (workload or {}).get("status")
    return ready_updates(status.get("admissionChecks") if isinstance(status, dict) else None)


# The maps a podSetUpdate sets, in the order Kueue's job framework compares them, with the
# field as the user wrote it.
_MAPS = (("annotations", "annotations"), ("labels", "labels"), ("node_selector", "nodeSelector"))


def update_conflict(
    update: PodSetUpdate,
    *,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    node_selector: Mapping[str, str],
) -> str | None:
    """Why `update` cannot go onto the pods of its podset, which have `labels`, `annotations`
    and `node_selector` (their template's, their flavors' node labels, earlier checks'): it
    gives a key they have another value. Kueue's job framework fails such a workload at start
    (Finished, reason FailedToStart) rather than choose; the message has its words (the pods'
    value first). None when there is no conflict: a value repeated as it is is none.

    Differs from Kueue: it names the check (Kueue only when two checks conflict) and the
    podset (Kueue never), and the first key in name order (Kueue: its map's order), because
    the user must find which update to fix (docs/kueue-compatibility.md)."""
    have = {"labels": labels, "annotations": annotations, "node_selector": node_selector}
    for attr, field in _MAPS:
        wanted: Mapping[str, str] = getattr(update, attr)
        for key in sorted(wanted):
            if key in have[attr] and have[attr][key] != wanted[key]:
                where = f'in admission check "{update.check}": ' if update.check else ""
                return (
                    f"{where}invalid admission check PodSetUpdate: conflict for {field}: "
                    f"conflict for key={key}, value1={have[attr][key]}, value2={wanted[key]} "
                    f'(podset "{update.name}")'
                )
    return None


# A podset's pods as a podSetUpdate meets them: their labels, annotations and nodeSelector.
PodMaps = tuple[Mapping[str, str], Mapping[str, str], Mapping[str, str]]


def start_conflict(
    pods: Mapping[str, PodMaps], updates: Sequence[PodSetUpdate], *, workload: str
) -> str | None:
    """The first of `updates` (in order, each over the pods as the earlier ones left them)
    that conflicts with the pods of its podset (`pods`, by podset name), as `update_conflict`
    words it; None when all of them can go on. A podset not in `pods` is not started.

    The pods of workload `workload` (its name) also carry muster's own label and annotation
    (`muster.dev/workload`, `muster.dev/pod-set`), as Kueue's carry its podset label before
    any update is merged: an update giving either another value conflicts too."""
    now = {
        name: (
            {**labels, WORKLOAD_LABEL: workload},
            {**annotations, POD_SET_ANNOTATION: name},
            dict(node_selector),
        )
        for name, (labels, annotations, node_selector) in pods.items()
    }
    for update in updates:
        maps = now.get(update.name)
        if maps is None:
            continue
        labels, annotations, node_selector = maps
        conflict = update_conflict(
            update, labels=labels, annotations=annotations, node_selector=node_selector
        )
        if conflict is not None:
            return conflict
        labels.update(update.labels)
        annotations.update(update.annotations)
        node_selector.update(update.node_selector)
    return None


def merged_tolerations(
    have: tuple[Toleration, ...], more: Sequence[Toleration]
) -> tuple[Toleration, ...]:
    """`have` and then those of `more` not among them (Kueue's `tolerations.Equal`)."""
    out = list(have)
    out += [t for t in more if t not in out]
    return tuple(out)


def template_labels(owner: Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
    """The labels of the pod templates of `owner` (a Job, a JobSet or a Kueue Workload, as
    stored), by podset name: what its pods carry before any podSetUpdate, which Kueue's start
    compares an update's labels with. Anything of the wrong shape reads as no labels."""
    spec = (owner or {}).get("spec")
    if not isinstance(spec, dict):
        return {}
    # Told apart by shape: an object listed has no `kind`.
    if "podSets" in spec:  # a Workload
        return {
            str(ps.get("name") or ""): _labels_of(ps.get("template"))
            for ps in _dicts(spec.get("podSets"))
        }
    if "replicatedJobs" in spec:  # a JobSet
        return {
            str(rj.get("name") or ""): _labels_of(_field(rj.get("template"), "spec", "template"))
            for rj in _dicts(spec.get("replicatedJobs"))
        }
    return {POD_SET_NAME: _labels_of(spec.get("template"))}  # a Job


def _labels_of(template: object) -> dict[str, str]:
    return _string_map(_field(template, "metadata", "labels"))


def _field(obj: object, *path: str) -> object:
    for name in path:
        obj = obj.get(name) if isinstance(obj, dict) else None
    return obj


def updated_pod(pod: Pod, updates: Sequence[PodSetUpdate]) -> Pod:
    """`pod` (of the podset its `muster.dev/pod-set` annotation names) with the `updates` for
    its podset over what its template set; muster's own label and annotation stay."""
    pod_set = pod.meta.annotations.get(POD_SET_ANNOTATION)
    mine = [u for u in updates if u.name == pod_set]
    if not mine:
        return pod
    meta = pod.meta
    labels, annotations, selector = (
        dict(meta.labels),
        dict(meta.annotations),
        dict(pod.node_selector),
    )
    tolerations = pod.tolerations
    for update in mine:
        labels.update(update.labels)
        annotations.update(update.annotations)
        selector.update(update.node_selector)
        tolerations = merged_tolerations(tolerations, update.tolerations)
    for own, kept in ((labels, meta.labels), (annotations, meta.annotations)):
        for key in (WORKLOAD_LABEL, POD_SET_ANNOTATION):
            if key in kept:
                own[key] = kept[key]
    return msgspec.structs.replace(
        pod,
        meta=msgspec.structs.replace(meta, labels=labels, annotations=annotations),
        node_selector=selector,
        tolerations=tolerations,
    )


def _string_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if isinstance(v, str)}


def _dicts(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _toleration(obj: Mapping[str, Any]) -> Toleration | None:
    fields = {f: obj[f] for f in _TOLERATION_FIELDS if isinstance(obj.get(f), str)}
    if fields.get("operator") == "":  # the API's default, as Kueue's tolerations.Equal reads it
        fields["operator"] = "Equal"
    try:
        return msgspec.convert(fields, Toleration)
    except msgspec.ValidationError:
        return None
