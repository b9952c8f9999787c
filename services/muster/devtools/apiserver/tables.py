"""The Table answer (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`) to a get or a
list, as `kubectl get` asks for it: the columns an API server prints for each kind.

Pods, Jobs, Nodes and Namespaces get the built-in printers' columns (Kubernetes'
`pkg/printers/internalversion`; the wide ones at priority 1, what `-o wide` adds). Kueue's
kinds served from the start get the printer columns Kueue's own CRDs declare (its
`+kubebuilder:printcolumn` markers, v1beta1 and v1beta2 alike); a kind whose CRD was applied
through the API gets that CRD's `additionalPrinterColumns`, as a real server prints it (so
k8s/crds applied to the stand-in prints muster's columns); anything else, Name and Age, as a
resource without a printer. Each row carries its object's metadata (`includeObject`:
Metadata by default, Object or None), which kubectl reads for -A's NAMESPACE column and
--show-labels. A watch asked for tables (`kubectl get -w`) sends each event's object as a
Table of one row, the columns in the first only, as a real server does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from muster.devtools.apiserver.objects import JsonObj
from muster.devtools.apiserver.resources import ResourceType

Column = tuple[str, str, str, int]  # name, type, JSONPath (or "" for a printer's own), priority
Cells = Callable[[JsonObj, float], list[Any]]

_NAME: Final[JsonObj] = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
_AGE: Final[Column] = ("Age", "date", ".metadata.creationTimestamp", 0)
_TABLE_TYPES: Final = ("v1", "v1beta1")


def table_version(accept: str) -> str:
    """The meta.k8s.io version of Table that `accept` asks for first; "" for none."""
    for offer in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in offer.split(";")[1:] if "=" in p)
        if (
            params.get("as") == "Table"
            and params.get("g") == "meta.k8s.io"
            and params.get("v") in _TABLE_TYPES
        ):
            return params["v"]
    return ""


def as_table(
    rt: ResourceType,
    answer: JsonObj,
    *,
    table: str,
    now_s: float,
    include: str = "Metadata",
    crd: JsonObj | None = None,
    version: str = "",
) -> JsonObj:
    """`answer` (one object, or a list of them) as a Table of meta.k8s.io/`table`; `crd` the
    CustomResourceDefinition that registered `rt`, when one did."""
    items = answer.get("items") if answer.get("kind") == rt.list_kind else [answer]
    columns, cells = _printer(rt, crd, version)
    metadata = answer.get("metadata", {}) if answer.get("kind") == rt.list_kind else {}
    rows = []
    for obj in items or ():
        row: JsonObj = {"cells": [_name(obj), *cells(obj, now_s)]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": f"meta.k8s.io/{table}",
                "metadata": obj.get("metadata", {}),
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{table}",
        "metadata": {k: v for k, v in metadata.items() if k in ("resourceVersion", "continue")},
        "columnDefinitions": [_NAME, *columns],
        "rows": rows,
    }


def _name(obj: JsonObj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _printer(rt: ResourceType, crd: JsonObj | None, version: str) -> tuple[list[JsonObj], Cells]:
    builtin = _BUILTIN.get(rt.key)
    if builtin is not None:
        return [_definition(c) for c in builtin[0]], builtin[1]
    declared = None if crd is None else _crd_columns(crd, version)
    if declared is None:
        declared = _kueue_columns(rt, version)
    columns = list(declared or (_AGE,))
    return [_definition(c) for c in columns], lambda obj, now_s: [
        _cell(obj, path, kind, now_s) for _, kind, path, _ in columns
    ]


def _definition(column: Column) -> JsonObj:
    name, kind, _, priority = column
    return {"name": name, "type": kind, "format": "", "description": "", "priority": priority}


def _crd_columns(crd: JsonObj, version: str) -> list[Column] | None:
    for served in crd.get("spec", {}).get("versions", ()):
        if isinstance(served, dict) and served.get("name") == version:
            found = served.get("additionalPrinterColumns")
            if not isinstance(found, list):
                return []  # none declared: Age
            return [
                (str(c["name"]), str(c["type"]), str(c["jsonPath"]), int(c.get("priority", 0)))
                for c in found
                if isinstance(c, dict) and {"name", "type", "jsonPath"} <= c.keys()
            ]
    return None


# --- JSONPath cells, as a CRD's columns are printed -------------------------------------

_STEP: Final = re.compile(r"\.([^.\[]+)|\[\?\(@\.(\w+)==['\"]([^'\"]*)['\"]\)\]")


def _cell(obj: JsonObj, path: str, kind: str, now_s: float) -> Any:
    """The value at `path` (dotted fields and `[?(@.field=='value')]` filters: what the
    printer columns here use); None (kubectl prints <none>) when missing; a date as an age."""
    value: Any = obj
    for field, key, wanted in _STEP.findall(path):
        if field:
            value = value.get(field) if isinstance(value, dict) else None
        else:
            value = (
                next((i for i in value if isinstance(i, dict) and i.get(key) == wanted), None)
                if isinstance(value, list)
                else None
            )
        if value is None:
            return None
    if kind == "date":
        return _age_of(value, now_s)
    if kind == "integer":
        return value if isinstance(value, int) else None
    if kind == "string" and not isinstance(value, str):
        return _json_text(value)
    return value


def _json_text(value: Any) -> str:
    """A non-string value in a string column, as kubectl's JSONPath prints it."""
    if isinstance(value, list):
        return "[" + ",".join(f'"{v}"' if isinstance(v, str) else str(v) for v in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _age_of(timestamp: Any, now_s: float) -> str:
    at = _epoch(timestamp)
    return "<unknown>" if at is None else human_duration(now_s - at)


def human_duration(seconds: float) -> str:
    """Kubernetes' HumanDuration, what AGE and DURATION print: 42s, 3m5s, 47m, 5h30m, 3d4h."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years, days = hours // 24 // 365, hours // 24 % 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{years}y"


# --- the built-in printers --------------------------------------------------------------


def _printed(*shown: str, wide: tuple[str, ...] = ()) -> list[Column]:
    """A built-in printer's columns (strings all, its own cells): `wide` at priority 1."""
    return [(n, "string", "", 0) for n in shown] + [(n, "string", "", 1) for n in wide]


def _condition(obj: JsonObj, kind: str) -> str:
    for c in obj.get("status", {}).get("conditions", ()) or ():
        if isinstance(c, dict) and c.get("type") == kind:
            return str(c.get("status", ""))
    return ""


def _age(obj: JsonObj, now_s: float) -> str:
    return _age_of(obj.get("metadata", {}).get("creationTimestamp"), now_s)


def _or_none(value: Any) -> Any:
    return value if value not in (None, "") else "<none>"


def _pod(obj: JsonObj, now_s: float) -> list[Any]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    containers = spec.get("containers", ()) or ()
    statuses = [s for s in status.get("containerStatuses", ()) or () if isinstance(s, dict)]
    reason = status.get("reason") or status.get("phase") or "Pending"
    for s in statuses:
        waiting = (s.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            reason = waiting["reason"]
    if obj.get("metadata", {}).get("deletionTimestamp"):
        reason = "Terminating"
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0) or 0) for s in statuses)
    gates = spec.get("readinessGates") or ()
    return [
        f"{ready}/{len(containers)}",
        reason,
        str(restarts),
        _age(obj, now_s),
        _or_none(status.get("podIP")),
        _or_none(spec.get("nodeName")),
        _or_none(status.get("nominatedNodeName")),
        f"{sum(_condition(obj, g.get('conditionType', '')) == 'True' for g in gates)}/{len(gates)}"
        if gates
        else "<none>",
    ]


_POD: Final = _printed(
    "Ready",
    "Status",
    "Restarts",
    "Age",
    wide=(
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ),
)


def _job(obj: JsonObj, now_s: float) -> list[Any]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    succeeded = status.get("succeeded", 0) or 0
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 1) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    state = next(
        (
            shown
            for shown, present in (
                ("Complete", _condition(obj, "Complete") == "True"),
                ("Failed", _condition(obj, "Failed") == "True"),
                ("Terminating", bool(obj.get("metadata", {}).get("deletionTimestamp"))),
                ("Suspended", _condition(obj, "Suspended") == "True"),
                ("FailureTarget", _condition(obj, "FailureTarget") == "True"),
                ("SuccessCriteriaMet", _condition(obj, "SuccessCriteriaMet") == "True"),
            )
            if present
        ),
        "Running",
    )
    started = _epoch(status.get("startTime"))
    ended = _epoch(status.get("completionTime"))
    duration = "" if started is None else human_duration((ended or now_s) - started)
    pod = (spec.get("template") or {}).get("spec") or {}
    containers = [c for c in pod.get("containers", ()) or () if isinstance(c, dict)]
    labels = ((spec.get("selector") or {}).get("matchLabels")) or {}
    return [
        state,
        completions,
        duration,
        _age(obj, now_s),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>",
    ]


def _epoch(timestamp: Any) -> float | None:
    """An RFC 3339 time as seconds since the epoch; None when absent or not one."""
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


_JOB: Final = _printed(
    "Status",
    "Completions",
    "Duration",
    "Age",
    wide=(
        "Containers",
        "Images",
        "Selector",
    ),
)


def _node(obj: JsonObj, now_s: float) -> list[Any]:
    ready = {"True": "Ready", "False": "NotReady"}.get(_condition(obj, "Ready"), "Unknown")
    if obj.get("spec", {}).get("unschedulable"):
        ready += ",SchedulingDisabled"
    labels = obj.get("metadata", {}).get("labels", {}) or {}
    roles = sorted(
        {k.removeprefix("node-role.kubernetes.io/") for k in labels
         if k.startswith("node-role.kubernetes.io/")}
        | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
    )  # fmt: skip
    status = obj.get("status", {})
    info = status.get("nodeInfo", {}) or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses", ()) or ()}
    return [
        ready,
        ",".join(r for r in roles if r) or "<none>",
        _age(obj, now_s),
        info.get("kubeletVersion", ""),
        _or_none(addresses.get("InternalIP")),
        _or_none(addresses.get("ExternalIP")),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


_NODE: Final = _printed(
    "Status",
    "Roles",
    "Age",
    "Version",
    wide=(
        "Internal-IP",
        "External-IP",
        "OS-Image",
        "Kernel-Version",
        "Container-Runtime",
    ),
)


def _namespace(obj: JsonObj, now_s: float) -> list[Any]:
    return [obj.get("status", {}).get("phase", "Active"), _age(obj, now_s)]


_BUILTIN: Final[dict[tuple[str, str], tuple[Sequence[Column], Cells]]] = {
    ("", "pods"): (_POD, _pod),
    ("batch", "jobs"): (_JOB, _job),
    ("", "nodes"): (_NODE, _node),
    ("", "namespaces"): (_printed("Status", "Age"), _namespace),
}

# Kueue's printer columns (apis/kueue/v1beta1 and v1beta2 `+kubebuilder:printcolumn`; the
# same in both versions but for ClusterQueue's cohort field); a kind without any, Age.
_ACTIVE_STATUS: Final = ".status.conditions[?(@.type=='Active')].status"
KUEUE_COLUMNS: Final[dict[tuple[str, str], list[Column]]] = {
    ("kueue.x-k8s.io", "clusterqueues"): [
        ("Cohort", "string", ".spec.cohort", 0),
        ("Strategy", "string", ".spec.queueingStrategy", 1),
        ("Pending Workloads", "integer", ".status.pendingWorkloads", 0),
        ("Admitted Workloads", "integer", ".status.admittedWorkloads", 1),
    ],
    ("kueue.x-k8s.io", "localqueues"): [
        ("ClusterQueue", "string", ".spec.clusterQueue", 0),
        ("Pending Workloads", "integer", ".status.pendingWorkloads", 0),
        ("Admitted Workloads", "integer", ".status.admittedWorkloads", 0),
    ],
    ("kueue.x-k8s.io", "workloads"): [
        ("Queue", "string", ".spec.queueName", 0),
        ("Reserved in", "string", ".status.admission.clusterQueue", 0),
        ("Admitted", "string", ".status.conditions[?(@.type=='Admitted')].status", 0),
        ("Finished", "string", ".status.conditions[?(@.type=='Finished')].status", 0),
        _AGE,
    ],
    ("kueue.x-k8s.io", "multikueueclusters"): [("Connected", "string", _ACTIVE_STATUS, 0), _AGE],
    ("kueue.x-k8s.io", "workloadpriorityclasses"): [("Value", "integer", ".value", 0)],
}
_COHORT_V1BETA2: Final = ("Cohort", "string", ".spec.cohortName", 0)


def _kueue_columns(rt: ResourceType, version: str) -> list[Column] | None:
    if rt.group != "kueue.x-k8s.io":
        return None
    columns = KUEUE_COLUMNS.get(rt.key, [_AGE])
    if rt.plural == "clusterqueues" and version != "v1beta1":
        return [_COHORT_V1BETA2, *columns[1:]]
    return columns
